"""The campaign page's breakdown (issue 28): for a campaign with dimensions, the table of its cells
and, for an experiment, the chart of the differences between an arm and the control with their
95 % CI whiskers — both from the export API's document (``export.estimates`` / ``means.mean``
with ``server.breakdowns``), so the page and the API agree.

The table lists the released cells only (each holds ``min_reports`` reports) and says how many
reports fall in cells below the threshold, in total, without naming those cells. Frequency
campaigns show each cell's share of its reports for the ``TOP_ITEMS`` items the fleet holds most;
numeric ones each cell's mean.
"""

from __future__ import annotations

from typing import Any

from ldptel.campaigns.config import Campaign
from ldptel.cell_sums import group_cells
from ldptel.server import breakdowns, charts

TOP_ITEMS = 5


def fmt_points(x: float | None) -> str:
    """A difference in percentage points, signed (``5.04`` → ``"+5.0"``)."""
    return charts.DASH if x is None else f"{x:+.1f}".replace("-", charts.MINUS)


def _share(n: int, x: float | None) -> str:
    return charts.fmt_pct(None if x is None else x / n)


def _cell_row(g: dict[str, Any], names: tuple[str, ...], top: list[Any], numeric: bool) -> dict[str, Any]:
    """One released cell: its values, reports and (value, 95 % interval) per column."""
    n = g["n_reports"]
    if numeric:
        m = g["mean"]
        cells = [(charts.fmt_value(m["estimate"]),
                  f"{charts.fmt_value(m['ci_low'])} to {charts.fmt_value(m['ci_high'])}")]
    else:
        by_value = {it["value"]: it for it in g["items"]}
        cells = [(_share(n, by_value[v]["estimate"]),
                  f"{_share(n, by_value[v]['ci_low'])} to {_share(n, by_value[v]['ci_high'])}") for v in top]
    return {"dimensions": [g["dimensions"][d] for d in names], "n": charts.fmt_count(n), "cells": cells}


def breakdown_context(c: Campaign, doc: dict[str, Any], compare: str | None) -> dict[str, Any] | None:
    """The breakdown's numbers (None for a campaign without dimensions)."""
    dims = c.dimensions
    if dims is None or "cells" not in doc:
        return None
    numeric = c.estimate_kind == "numeric"
    ranked = [] if numeric else sorted(doc["items"], key=lambda it: -(it["estimate"] or 0))
    top = [it["value"] for it in ranked[:TOP_ITEMS]]
    withheld = doc.get("withheld") or {"cells": 0, "n_reports": 0}
    return {"names": dims.names, "numeric": numeric,
            "rows": [_cell_row(g, dims.names, top, numeric) for g in group_cells(doc["cells"], dims.names)
                     if not g["withheld"]],
            "columns": ["Mean"] if numeric else [charts.display_label(v) for v in top],
            "withheld": withheld, "withheld_fmt": charts.fmt_count(withheld["n_reports"]),
            "experiment": experiment_context(c, doc, compare) if dims.experiment else None}


def experiment_context(c: Campaign, doc: dict[str, Any], compare: str | None) -> dict[str, Any]:
    """The arms, the compared one (``compare``, default the first arm after the control) and the
    chart of its differences against the control (percentage points, or the mean's units)."""
    dims = c.dimensions
    assert dims is not None and dims.experiment is not None
    arms = list(dims.dimension(dims.experiment).values)
    treatment = compare if compare in arms[1:] else arms[1]
    shaped = breakdowns.shaped(c, doc, (dims.experiment,), treatment)
    numeric = c.estimate_kind == "numeric"
    scale = 1.0 if numeric else 100.0
    fmt = charts.fmt_value if numeric else fmt_points
    diffs: list[dict[str, Any]] = [
        {"label": charts.display_label(d["value"]),
         **{k: None if d[k] is None else d[k] * scale for k in ("estimate", "ci_low", "ci_high")}}
        for d in shaped["differences"]]
    chart = None
    if diffs:
        what = "difference of the means" if numeric else "difference in percentage points"
        bars = [charts.Bar(d["label"], d["estimate"], d["ci_low"], d["ci_high"]) for d in diffs]
        chart = charts.bar_chart(bars, unit="" if numeric else "points", fmt=fmt,
                                 axis_label=f"{what} (95% CI)",
                                 aria_label=f"{treatment} minus {arms[0]} for {c.name}")
    rows = [{"value": d["label"], "estimate": fmt(d["estimate"]),
             "ci": f"{fmt(d['ci_low'])} to {fmt(d['ci_high'])}",
             "significant": d["ci_low"] is not None and (d["ci_low"] > 0 or d["ci_high"] < 0)} for d in diffs]
    return {"dimension": dims.experiment, "control": arms[0], "treatment": treatment, "arms": arms,
            "withheld": shaped["comparison"]["withheld"], "chart": chart, "numeric": numeric, "rows": rows}


__all__ = ["TOP_ITEMS", "breakdown_context", "experiment_context", "fmt_points"]
