"""Heavy-hitter, range and quantile queries (DESIGN §3), export token:

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

``window`` as in the estimates endpoint. ``400`` names the bad parameter (or says the campaign's
kind has no such query), ``401`` no/bad token, ``404`` unknown campaign, ``409`` while
``n_reports`` < ``min_reports`` (same body as the estimates endpoint). Estimates are cached per
(campaign, window, accumulated state), so repeated queries do not repeat the level walk or the
consistency step.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, request

from ldptel.aggregator.decoders import Accumulator
from ldptel.config import Campaign
from ldptel.server.app import error_response, state
from ldptel.server.auth import require_token
from ldptel.server.cache import LruCache, state_digest
from ldptel.server.export import load_released

bp = Blueprint("queries", __name__)

MAX_QUANTILES = 100
_estimates = LruCache(32)  # state digest → estimate object


class BadParameter(ValueError):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


def _int_param(name: str, low: int, high: int, default: int | None = None) -> int:
    raw = request.args.get(name)
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


def _q_param() -> list[float]:
    raw = request.args.get("q")
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


def _finite(x: Any) -> Any:
    return x if not isinstance(x, float) or math.isfinite(x) else None


def _json(doc: dict) -> Response:
    return Response(json.dumps(doc, allow_nan=False) + "\n", mimetype="application/json",
                    headers={"Cache-Control": "private, no-cache", "Vary": "Authorization"})


def cached_estimate(campaign: Campaign, window: int, acc: Accumulator) -> Any:
    return _estimates.get_or_compute(state_digest(campaign, window, acc), acc.estimate)


def _campaign(name: str, kind: str, query: str):
    """The campaign if it exists and is of ``kind``, else an error response."""
    campaign = state().config.campaign(name)
    if campaign is None:
        return error_response(404, "not_found", f"unknown campaign {name!r}")
    if campaign.kind != kind:
        return error_response(400, "bad_request", f"campaign {name!r} is a {campaign.kind} campaign: "
                                                  f"no {query} (only {kind} campaigns)")
    return campaign


def _header(campaign: Campaign, window: int, acc: Accumulator) -> dict:
    return {"campaign": campaign.name, "kind": campaign.kind, "epsilon": campaign.epsilon,
            "n_reports": acc.n, "window": window}


def _answer(name: str, kind: str, query: str, parse: Callable[[Campaign], Any],
            answer: Callable[[Campaign, Any, Any], dict]) -> Response:
    """The pipeline of every query: campaign of ``kind`` (404/400) → ``parse`` the request's
    parameters (400 naming one) → the released window (400/409, as for /estimates) → the
    cached estimate → JSON of the header plus ``answer(campaign, estimate, params)``."""
    campaign = _campaign(name, kind, query)
    if not isinstance(campaign, Campaign):
        return campaign
    try:
        params = parse(campaign)
    except BadParameter as exc:
        return error_response(400, "bad_parameter", str(exc))
    loaded = load_released(campaign)
    if not isinstance(loaded, tuple):
        return loaded
    window, acc = loaded
    body = answer(campaign, cached_estimate(campaign, window, acc), params)
    return _json({**_header(campaign, window, acc), **body})


def finite_row(row: dict) -> dict:
    return {key: _finite(v) for key, v in row.items()}


def _k_param(campaign: Campaign) -> int:
    width = int(campaign.params.get("width", 64))
    return _int_param("k", 1, width, default=width)


def range_params(campaign: Campaign) -> tuple[int, int]:
    d = int(campaign.domain_size or 1)
    lo = _int_param("lo", 0, d - 1)
    hi = _int_param("hi", 0, d - 1)
    if lo > hi:
        raise BadParameter("lo", f"must be <= hi, got lo={lo}, hi={hi}")
    return lo, hi


@bp.get("/v1/campaigns/<name>/heavy-hitters")
@require_token("export")
def heavy_hitters(name: str):
    return _answer(name, "heavy_hitters", "heavy hitters", _k_param,
                   lambda c, est, k: {"alpha": 0.05, "items": [finite_row(r) for r in est.items()[:k]]})


@bp.get("/v1/campaigns/<name>/range")
@require_token("export")
def range_query(name: str):
    return _answer(name, "range", "range queries", range_params,
                   lambda c, est, lohi: {"method": c.params.get("method"),
                                         **finite_row(est.range(*lohi))})


@bp.get("/v1/campaigns/<name>/quantiles")
@require_token("export")
def quantiles(name: str):
    return _answer(name, "range", "quantiles", lambda c: _q_param(),
                   lambda c, est, qs: {"method": c.params.get("method"),
                                       "items": [finite_row(r) for r in est.quantiles(qs)]})
