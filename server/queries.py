"""Heavy-hitter, range and quantile queries, export token:

- ``GET /v1/campaigns/<name>/heavy-hitters?k=…&window=…`` (heavy_hitters campaigns) →
  ``{"campaign", "kind", "epsilon", "n_reports", "window", "alpha", "items": [{"value",
  "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized", "z_score",
  "levels_used"}]}``: the heavy strings by decreasing count (at most ``k``, default all found;
  1 ≤ k ≤ the campaign's width), counts of devices with std errors and 95% CIs.
- ``GET /v1/campaigns/<name>/range?lo=…&hi=…&window=…`` (range campaigns) → ``{"campaign",
  "kind", "method", "epsilon", "n_reports", "window", "lo", "hi", "estimate", "std_error",
  "ci_low", "ci_high"}``: devices with a value in [lo, hi] (0 ≤ lo ≤ hi < domain_size).
- ``GET /v1/campaigns/<name>/quantiles?q=0.5,0.9&window=…`` (range campaigns) → ``{…, "items":
  [{"q", "value", "rank_std_error", "value_ci_low", "value_ci_high"}]}`` (1 to 100 values of q in
  [0, 1]).

``window`` as in the estimates endpoint; ``format=csv`` answers the rows (the heavy strings, the
one range, the quantiles) as CSV with ``window`` and ``n_reports`` as the last columns
(``documents.document_csv``). ``400`` names the bad parameter (or says the campaign's
kind has no such query), ``401`` no/bad token, ``404`` unknown campaign, ``409`` while
``n_reports`` < ``min_reports`` (same body as the estimates endpoint), ``503``
``not_yet_published`` before the aggregator's first publication of the window. Every document
also has ``decoded_at`` after ``window``. Nothing is decoded here: heavy hitters are the
aggregator's published list (``ldptel.aggregator.publish``), and ranges, quantiles and the CDF
are evaluated on its published per-value counts, CDF and plug-in counts (a cumulative sum, a
binary search and the method's closed-form variance).

Each endpoint's document is a function ``(campaign, window, params) -> dict`` (``heavy_hitters``,
``range_estimate``, ``quantiles``), called by the views and the operator pages; ``cdf`` (the
monotone CDF with its 95% band at up to ``points`` values) serves the pages' chart and CSV.
Each checks, in order: the campaign's kind (400), its parameters (400 ``bad_parameter`` naming
one), the released window (400/409/503, ``documents.load_released``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
from flask import Blueprint, Response, request

from ldptel.aggregator import publish
from ldptel.client.mechanisms.base import Z95
from ldptel.config import Campaign
from ldptel.server.auth import require_token
from ldptel.server.documents import (
    Params,
    Published,
    Window,
    document_csv,
    find_campaign,
    finite_row,
    format_param,
    json_text,
    load_released,
    not_modified,
    require_kind,
)
from ldptel.server.errors import BadParameter

bp = Blueprint("queries", __name__)

MAX_QUANTILES = 100
MAX_CDF_POINTS = 4096
HEAVY_HITTER_COLUMNS = ("value", "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized",
                        "z_score", "levels_used")
CDF_COLUMNS = ("value", "cdf", "cdf_ci_low", "cdf_ci_high")
RANGE_COLUMNS = ("lo", "hi", "estimate", "std_error", "ci_low", "ci_high")
QUANTILE_COLUMNS = ("q", "value", "rank_std_error", "value_ci_low", "value_ci_high")


def _int_param(params: Params, name: str, low: int, high: int, default: int | None = None) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        if default is None:
            raise BadParameter(name, "is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParameter(name, f"must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise BadParameter(name, f"must be in [{low}, {high}], got {value}")
    return value


def _q_param(campaign: Campaign, params: Params) -> list[float]:
    raw = params.get("q")
    if not raw:
        raise BadParameter("q", "is required (comma-separated probabilities, e.g. q=0.5,0.9)")
    parts = raw.split(",")
    if len(parts) > MAX_QUANTILES:
        raise BadParameter("q", f"at most {MAX_QUANTILES} values")
    out = []
    for p in parts:
        try:
            v = float(p)
        except ValueError:
            raise BadParameter("q", f"must be numbers in [0, 1], got {p!r}") from None
        if not (math.isfinite(v) and 0.0 <= v <= 1.0):
            raise BadParameter("q", f"must be in [0, 1], got {p!r}")
        out.append(v)
    return out


def _k_param(campaign: Campaign, params: Params) -> int:
    width = int(campaign.params.get("width", 64))
    return _int_param(params, "k", 1, width, default=width)


def _range_params(campaign: Campaign, params: Params) -> tuple[int, int]:
    d = int(campaign.domain_size or 1)
    lo = _int_param(params, "lo", 0, d - 1)
    hi = _int_param(params, "hi", 0, d - 1)
    if lo > hi:
        raise BadParameter("lo", f"must be <= hi, got lo={lo}, hi={hi}")
    return lo, hi


def _points_param(campaign: Campaign, params: Params) -> int:
    return _int_param(params, "points", 1, MAX_CDF_POINTS, default=MAX_CDF_POINTS)


def _estimate(campaign: Campaign, pub: Published) -> Any:
    """What a query answers from: the published document (heavy hitters) or the published
    range estimate (``publish.range_estimate``)."""
    return publish.range_estimate(campaign, pub) if campaign.kind == "range" else pub.doc


def _document(campaign: Campaign, window: Window, params: Params, kind: str, query: str,
              parse: Callable[[Campaign, Params], Any], answer: Callable[[Campaign, Any, Any], dict]) -> dict:
    """The pipeline of every query: ``campaign`` of ``kind`` (400) → ``parse`` its parameters
    (400 naming one) → the released window's publication (400/409/503) → its header plus
    ``answer(campaign, published estimate, parsed parameters)``."""
    require_kind(campaign, kind, f"no {query} (only {kind} campaigns)")
    parsed = parse(campaign, params)
    _, pub = load_released(campaign, window)
    return {**pub.header(), **answer(campaign, _estimate(campaign, pub), parsed)}


def heavy_hitters(campaign: Campaign, window: Window, params: Params) -> dict:
    """The ``k`` (default: the campaign's width) heaviest strings, rows ``HEAVY_HITTER_COLUMNS``."""
    return _document(campaign, window, params, "heavy_hitters", "heavy hitters", _k_param,
                     lambda c, doc, k: {"alpha": doc["alpha"], "items": doc["items"][:k]})


def range_estimate(campaign: Campaign, window: Window, params: Params) -> dict:
    """Devices with a value in [``lo``, ``hi``]."""
    return _document(campaign, window, params, "range", "range queries", _range_params,
                     lambda c, est, lohi: {"method": c.params.get("method"), **finite_row(est.range(*lohi))})


def quantiles(campaign: Campaign, window: Window, params: Params) -> dict:
    """The quantiles ``q`` (comma-separated) with their rank std errors and value intervals."""
    return _document(campaign, window, params, "range", "quantiles", _q_param,
                     lambda c, est, qs: {"method": c.params.get("method"),
                                         "items": [finite_row(r) for r in est.quantiles(qs)]})


def _cdf_rows(est: Any, points: int) -> dict:
    """F̃(x) at up to ``points`` evenly spaced values x with the band F̃(x) ± 1.96·σ(Ŝ(x))/N
    (clipped to [0, 1]), rows ``CDF_COLUMNS``."""
    d = est.domain_size
    xs = np.unique(np.linspace(0, d - 1, min(d, points)).round().astype(np.int64))
    F = est.cdf()[xs]
    se = est.ranges(np.zeros(xs.size, np.int64), xs)[1] / max(est.n, 1)
    lo, hi = np.clip(F - Z95 * se, 0, 1), np.clip(F + Z95 * se, 0, 1)
    return {"items": [{"value": x, "cdf": f, "cdf_ci_low": a, "cdf_ci_high": b} for x, f, a, b
                      in zip(xs.tolist(), F.tolist(), lo.tolist(), hi.tolist(), strict=True)]}


def cdf(campaign: Campaign, window: Window, params: Params) -> dict:
    """The monotone CDF at up to ``points`` (default and at most ``MAX_CDF_POINTS``) values."""
    return _document(campaign, window, params, "range", "CDF", _points_param,
                     lambda c, est, points: {"method": c.params.get("method"), **_cdf_rows(est, points)})


def _view(document: Callable[[Campaign, Window, Params], dict], columns: tuple[str, ...],
          one_row: bool = False) -> Callable[[str], Response]:
    """The API view of ``document``: its JSON, or with ``format=csv`` its ``items`` (``one_row``:
    the document itself) as CSV of ``columns``, with the publication's ``ETag`` (304 on a match)
    and ``X-Ldptel-N-Reports``."""

    def view(name: str) -> Response:
        campaign, window = find_campaign(name), request.args.get("window")
        fmt = format_param(request.args)
        doc = document(campaign, window, request.args)
        _, pub = load_released(campaign, window)  # the same publication (read once per request)
        headers = {"ETag": pub.etag, "Cache-Control": "private, no-cache", "Vary": "Authorization",
                   "X-Ldptel-N-Reports": str(pub.n)}
        if not_modified(pub.etag, datetime.fromtimestamp(pub.decoded_at, UTC)):
            return Response(status=304, headers=headers)
        if fmt == "csv":
            rows = [doc] if one_row else doc["items"]
            return Response(document_csv(doc, rows, columns), mimetype="text/csv", headers=headers)
        return Response(json_text(doc), mimetype="application/json", headers=headers)

    view.__name__ = f"{document.__name__}_view"
    return require_token("export")(view)


bp.add_url_rule("/v1/campaigns/<name>/heavy-hitters", "heavy_hitters",
                 _view(heavy_hitters, HEAVY_HITTER_COLUMNS))
bp.add_url_rule("/v1/campaigns/<name>/range", "range_query", _view(range_estimate, RANGE_COLUMNS, True))
bp.add_url_rule("/v1/campaigns/<name>/quantiles", "quantiles", _view(quantiles, QUANTILE_COLUMNS))
