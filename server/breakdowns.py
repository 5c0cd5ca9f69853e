"""Breakdowns and experiments in the export API (issue 28): the query parameters ``by`` and
``compare`` of ``/estimates`` and ``/mean`` (and ``by`` of ``/series``), answered from the
aggregator's publication (its ``cells``, ``aggregator.breakdown``) with ``cell_sums``: nothing is
decoded here.

- without ``by``: the publication's document without its ``cells`` (the fleet-wide estimate: the
  sum of the released cells; ``dimensions``, ``experiment`` and ``withheld`` stay);
- ``by=platform,arm``: plus ``cells``, the marginal over those dimensions (every dimension: the
  cells themselves): ``[{"dimensions": {...}, "n_reports", "withheld", "withheld_cells",
  "items" | "mean", "sum"}]``, each the sum of its released cells;
- ``compare=<arm>`` (needs ``by`` to hold the campaign's ``experiment``): plus ``comparison``
  ``{"dimension", "control", "treatment", "withheld"}`` and ``differences``: per value
  ``{"value", "estimate", "std_error", "ci_low", "ci_high"}`` of treatment − control as
  frequencies (numeric: the means) over every other dimension (``cell_sums.differences``); with
  other dimensions in ``by``, each cell of the compared arm also holds the ``differences``
  against the control cell of the same other values. An arm with no released cell has no
  differences (``withheld``: true, ``differences`` empty).

``rows`` lays a document out as the long rows of CSV and Parquet: one column per dimension of
``by``, then the item columns (frequency: ``value, estimate, std_error, ci_low, ci_high,
estimate_normalized``; numeric: ``statistic``, …) with each row's ``n_reports``.
"""

from __future__ import annotations

from typing import Any

from ldptel.campaigns.config import Campaign
from ldptel.cell_sums import differences, fragment_of, group_cells
from ldptel.server.documents import Params
from ldptel.server.errors import BadParameter

ITEM_COLUMNS = ("value", "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized")
MEAN_COLUMNS = ("statistic", "estimate", "std_error", "ci_low", "ci_high")


def by_param(campaign: Campaign, params: Params) -> tuple[str, ...] | None:
    """``by``: comma-separated dimension names of the campaign (None when absent)."""
    raw = params.get("by")
    if not raw:
        return None
    dims = campaign.dimensions
    if dims is None:
        raise BadParameter("by", f"campaign {campaign.name!r} has no dimensions")
    names = tuple(n.strip() for n in raw.split(","))
    bad = next((n for n in names if n not in dims.names), None)
    if bad is not None or len(set(names)) != len(names):
        raise BadParameter("by", f"must name distinct dimensions of {campaign.name!r} "
                                 f"({', '.join(dims.names)}), got {raw!r}")
    return names


def compare_param(campaign: Campaign, params: Params, by: tuple[str, ...] | None) -> str | None:
    """``compare``: an arm of the campaign's experiment other than its control (None when absent)."""
    arm = params.get("compare")
    if not arm:
        return None
    dims = campaign.dimensions
    if dims is None or dims.experiment is None:
        raise BadParameter("compare", f"campaign {campaign.name!r} declares no experiment")
    if by is None or dims.experiment not in by:
        raise BadParameter("compare", f"needs by to include the experiment dimension {dims.experiment!r}")
    arms = dims.dimension(dims.experiment).values
    if arm not in arms[1:]:
        raise BadParameter("compare", f"must be an arm of {dims.experiment!r} other than its control "
                                      f"{arms[0]!r} ({', '.join(arms[1:])}), got {arm!r}")
    return arm


def check(campaign: Campaign, params: Params) -> tuple[tuple[str, ...] | None, str | None]:
    """(``by``, ``compare``) of a request, checked (``BadParameter``)."""
    by = by_param(campaign, params)
    return by, compare_param(campaign, params, by)


def shaped(campaign: Campaign, doc: dict[str, Any], by: tuple[str, ...] | None,
           compare: str | None) -> dict[str, Any]:
    """The document a request with ``by`` / ``compare`` answers (module docstring)."""
    out = {k: v for k, v in doc.items() if k != "cells"}
    if by is None or "cells" not in doc:
        return out
    out["cells"] = group_cells(doc["cells"], by)
    dims = campaign.dimensions
    if compare is None or dims is None or dims.experiment is None:
        return out
    exp = dims.experiment
    control = dims.dimension(exp).values[0]
    arms = group_cells(doc["cells"], (exp,))
    treated = next((g for g in arms if g["dimensions"][exp] == compare and not g["withheld"]), None)
    base = next((g for g in arms if g["dimensions"][exp] == control and not g["withheld"]), None)
    out["comparison"] = {"dimension": exp, "control": control, "treatment": compare,
                         "withheld": treated is None or base is None}
    out["differences"] = [] if treated is None or base is None else _diff(treated, base)
    others = [d for d in by if d != exp]
    if others:
        by_rest = {tuple(g["dimensions"][d] for d in others): g for g in out["cells"]
                   if g["dimensions"][exp] == control and not g["withheld"]}
        for g in out["cells"]:
            ctrl = by_rest.get(tuple(g["dimensions"][d] for d in others))
            if g["dimensions"][exp] == compare:
                g["differences"] = [] if g["withheld"] or ctrl is None else _diff(g, ctrl)
    return out


def _diff(treated: dict[str, Any], control: dict[str, Any]) -> list[dict[str, Any]]:
    return differences((int(treated["n_reports"]), fragment_of(treated)),
                       (int(control["n_reports"]), fragment_of(control)))


def columns(campaign: Campaign, by: tuple[str, ...] | None) -> tuple[str, ...]:
    """The long rows' columns: the ``by`` dimensions, the item columns, ``n_reports``."""
    items = MEAN_COLUMNS if campaign.estimate_kind == "numeric" else ITEM_COLUMNS
    return (*(by or ()), *items, "n_reports")


def rows(campaign: Campaign, doc: dict[str, Any], by: tuple[str, ...] | None) -> list[dict[str, Any]]:
    """The document's estimates as long rows (``columns``, and ``status``: ``released`` or
    ``withheld``): per cell of ``by`` (a withheld cell is one row without values), else the
    fleet-wide estimate."""
    groups = doc.get("cells") if by is not None else None
    if groups is None:
        groups = [{"dimensions": {}, "n_reports": doc["n_reports"], "withheld": False, **fragment_of(doc)}]
    out: list[dict[str, Any]] = []
    for g in groups:
        base = {**g["dimensions"], "n_reports": g["n_reports"],
                "status": "withheld" if g["withheld"] else "released"}
        if g["withheld"]:
            out.append(base)
        elif "items" in g:
            out += [{**base, **item} for item in g["items"]]
        else:
            out += [{**base, "statistic": s, **g[s]} for s in ("mean", "sum")]
    return out


__all__ = ["ITEM_COLUMNS", "MEAN_COLUMNS", "by_param", "check", "columns", "compare_param", "rows", "shaped"]
