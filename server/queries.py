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
Each is a ``Query`` and checks, in order: the campaign's kind (400), its parameters (400
``bad_parameter`` naming one), the released window (400/409/503, ``documents.load_released``);
the views then answer 304 or the body rendered once per URL and publication
(``documents.conditional_response``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from flask import Blueprint, Response, request

from ldptel.campaigns.config import Campaign
from ldptel.mechanisms.base import Z95
from ldptel.numbers import ascii_int
from ldptel.server.auth import require_token
from ldptel.server.documents import (
    Params,
    Published,
    Window,
    conditional_response,
    document_csv,
    finite_row,
    format_param,
    json_text,
    load_released,
    require_kind,
)
from ldptel.server.errors import BadParameter
from ldptel.server.versions import find_campaign
from ldptel.store import published

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
    value = ascii_int(raw, 12)
    if value is None:
        raise BadParameter(name, f"must be an integer (ASCII digits), got {raw!r}")
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
    range estimate (``published.range_estimate``)."""
    return published.range_estimate(campaign, pub) if campaign.kind == "range" else pub.doc


@dataclass(frozen=True)
class Query:
    """The pipeline of every query: ``campaign`` of ``kind`` (400) → ``parse`` its parameters
    (400 naming one) → the released window's publication (400/409/503) → its header plus
    ``answer(campaign, published estimate, parsed parameters)``. ``released`` runs the checks
    (all a 304 needs), ``document`` the rest."""

    kind: str
    name: str  # "heavy hitters", in "no heavy hitters (only … campaigns)"
    parse: Callable[[Campaign, Params], Any]
    answer: Callable[[Campaign, Any, Any], dict[str, Any]]

    def released(self, campaign: Campaign, window: Window, params: Params) -> tuple[Published, Any]:
        """(publication, parsed parameters), or ``ApiError``."""
        require_kind(campaign, self.kind, f"no {self.name} (only {self.kind} campaigns)")
        parsed = self.parse(campaign, params)
        return load_released(campaign, window)[1], parsed

    def document(self, campaign: Campaign, pub: Published, parsed: Any) -> dict[str, Any]:
        assert pub.doc is not None
        return {**pub.header(), "complete": pub.doc.get("complete"),
                **self.answer(campaign, _estimate(campaign, pub), parsed)}

    def __call__(self, campaign: Campaign, window: Window, params: Params) -> dict[str, Any]:
        return self.document(campaign, *self.released(campaign, window, params))


HEAVY_HITTERS = Query("heavy_hitters", "heavy hitters", _k_param,
                      lambda c, doc, k: {"alpha": doc["alpha"], "items": doc["items"][:k]})
RANGE = Query("range", "range queries", _range_params,
              lambda c, est, lohi: {"method": c.params.get("method"), **finite_row(est.range(*lohi))})
QUANTILES = Query("range", "quantiles", _q_param,
                  lambda c, est, qs: {"method": c.params.get("method"),
                                      "items": [finite_row(r) for r in est.quantiles(qs)]})


def heavy_hitters(campaign: Campaign, window: Window, params: Params) -> dict[str, Any]:
    """The ``k`` (default: the campaign's width) heaviest strings, rows ``HEAVY_HITTER_COLUMNS``."""
    return HEAVY_HITTERS(campaign, window, params)


def range_estimate(campaign: Campaign, window: Window, params: Params) -> dict[str, Any]:
    """Devices with a value in [``lo``, ``hi``]."""
    return RANGE(campaign, window, params)


def quantiles(campaign: Campaign, window: Window, params: Params) -> dict[str, Any]:
    """The quantiles ``q`` (comma-separated) with their rank std errors and value intervals."""
    return QUANTILES(campaign, window, params)


def _cdf_rows(est: Any, points: int) -> dict[str, Any]:
    """F̃(x) at up to ``points`` evenly spaced values x with the band F̃(x) ± 1.96·σ(Ŝ(x))/N
    (clipped to [0, 1]), rows ``CDF_COLUMNS``."""
    d = est.domain_size
    xs = np.unique(np.linspace(0, d - 1, min(d, points)).round().astype(np.int64))
    F = est.cdf()[xs]
    se = est.ranges(np.zeros(xs.size, np.int64), xs)[1] / max(est.n, 1)
    lo, hi = np.clip(F - Z95 * se, 0, 1), np.clip(F + Z95 * se, 0, 1)
    return {"items": [{"value": x, "cdf": f, "cdf_ci_low": a, "cdf_ci_high": b} for x, f, a, b
                      in zip(xs.tolist(), F.tolist(), lo.tolist(), hi.tolist(), strict=True)]}


CDF = Query("range", "CDF", _points_param,
            lambda c, est, points: {"method": c.params.get("method"), **_cdf_rows(est, points)})


def cdf(campaign: Campaign, window: Window, params: Params) -> dict[str, Any]:
    """The monotone CDF at up to ``points`` (default and at most ``MAX_CDF_POINTS``) values."""
    return CDF(campaign, window, params)


def _view(query: Query, endpoint: str, columns: tuple[str, ...],
          one_row: bool = False) -> Callable[[str], Response]:
    """The API view of ``query``: its JSON, or with ``format=csv`` its ``items`` (``one_row``: the
    document itself) as CSV of ``columns`` (``documents.conditional_response``: the
    publication's ``ETag``, 304 on a match, the body rendered once per URL and publication) and
    ``X-Ldptel-N-Reports``."""

    def view(name: str) -> Response:
        campaign = find_campaign(name)
        fmt = format_param(request.args)
        pub, parsed = query.released(campaign, request.args.get("window"), request.args)
        headers = {"ETag": pub.etag, "Cache-Control": "private, no-cache", "Vary": "Authorization",
                   "X-Ldptel-N-Reports": str(pub.n)}

        def body() -> str:
            doc = query.document(campaign, pub, parsed)
            if fmt == "csv":
                return document_csv(doc, [doc] if one_row else doc["items"], columns)
            return json_text(doc)

        return conditional_response(pub.etag, pub.decoded_at, headers, body,
                                    "text/csv" if fmt == "csv" else "application/json")

    view.__name__ = f"{endpoint}_view"
    return cast("Callable[[str], Response]", require_token("export")(view))


bp.add_url_rule("/v1/campaigns/<name>/heavy-hitters", "heavy_hitters",
                 _view(HEAVY_HITTERS, "heavy_hitters", HEAVY_HITTER_COLUMNS))
bp.add_url_rule("/v1/campaigns/<name>/range", "range_query",
                 _view(RANGE, "range_estimate", RANGE_COLUMNS, True))
bp.add_url_rule("/v1/campaigns/<name>/quantiles", "quantiles",
                 _view(QUANTILES, "quantiles", QUANTILE_COLUMNS))
