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

Importing this module also registers the heavy-hitter and range kinds with the aggregator's
store (``store.register_accumulator``) unless something registered them already.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from typing import Any

from flask import Blueprint, Response, request

from ldptel.aggregator import store
from ldptel.aggregator.decoders import Accumulator, accumulator_for
from ldptel.config import Campaign
from ldptel.server.app import error_response, state
from ldptel.server.auth import require_token
from ldptel.server.export import load_released

bp = Blueprint("queries", __name__)

MAX_QUANTILES = 100
CACHE_SIZE = 32


def _structured_accumulator(campaign: Campaign) -> Accumulator:
    return accumulator_for(campaign.mechanism())


for _kind in ("heavy_hitters", "range"):
    store.ACCUMULATOR_FACTORIES.setdefault(_kind, _structured_accumulator)

_cache: OrderedDict[str, Any] = OrderedDict()  # state digest → estimate object
_cache_lock = threading.Lock()


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


def _digest(campaign: Campaign, window: int, acc: Accumulator) -> str:
    h = hashlib.sha256(json.dumps([campaign.public(), window], sort_keys=True, default=str).encode())
    for key in sorted(acc.state):
        h.update(key.encode())
        h.update(acc.state[key].tobytes())
    return h.hexdigest()


def _estimate(campaign: Campaign, window: int, acc: Accumulator) -> Any:
    key = _digest(campaign, window, acc)
    with _cache_lock:
        est = _cache.get(key)
        if est is not None:
            _cache.move_to_end(key)
            return est
    est = acc.estimate()
    with _cache_lock:
        _cache[key] = est
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return est


def _campaign(name: str, kind: str, query: str):
    """The campaign if it exists and is of ``kind``, else an error response."""
    campaign = state().config.campaign(name)
    if campaign is None:
        return error_response(404, "not_found", f"unknown campaign {name!r}")
    if campaign.kind != kind:
        return error_response(400, "bad_request", f"campaign {name!r} is a {campaign.kind} campaign: "
                                                  f"no {query} (only {kind} campaigns)")
    return campaign


_load = load_released  # (window, accumulator) or the 400/409 response, as for /estimates


def _header(campaign: Campaign, window: int, acc: Accumulator) -> dict:
    return {"campaign": campaign.name, "kind": campaign.kind, "epsilon": campaign.epsilon,
            "n_reports": acc.n, "window": window}


@bp.get("/v1/campaigns/<name>/heavy-hitters")
@require_token("export")
def heavy_hitters(name: str):
    campaign = _campaign(name, "heavy_hitters", "heavy hitters")
    if not isinstance(campaign, Campaign):
        return campaign
    try:
        width = int(campaign.params.get("width", 64))
        k = _int_param("k", 1, width, default=width)
    except BadParameter as exc:
        return error_response(400, "bad_parameter", str(exc))
    loaded = _load(campaign)
    if not isinstance(loaded, tuple):
        return loaded
    window, acc = loaded
    est = _estimate(campaign, window, acc)
    items = [{key: _finite(v) for key, v in row.items()} for row in est.items()[:k]]
    return _json({**_header(campaign, window, acc), "alpha": 0.05, "items": items})


@bp.get("/v1/campaigns/<name>/range")
@require_token("export")
def range_query(name: str):
    campaign = _campaign(name, "range", "range queries")
    if not isinstance(campaign, Campaign):
        return campaign
    d = int(campaign.domain_size or 1)
    try:
        lo = _int_param("lo", 0, d - 1)
        hi = _int_param("hi", 0, d - 1)
        if lo > hi:
            raise BadParameter("lo", f"must be <= hi, got lo={lo}, hi={hi}")
    except BadParameter as exc:
        return error_response(400, "bad_parameter", str(exc))
    loaded = _load(campaign)
    if not isinstance(loaded, tuple):
        return loaded
    window, acc = loaded
    row = _estimate(campaign, window, acc).range(lo, hi)
    return _json({**_header(campaign, window, acc), "method": campaign.params.get("method"),
                  **{key: _finite(v) for key, v in row.items()}})


@bp.get("/v1/campaigns/<name>/quantiles")
@require_token("export")
def quantiles(name: str):
    campaign = _campaign(name, "range", "quantiles")
    if not isinstance(campaign, Campaign):
        return campaign
    try:
        qs = _q_param()
    except BadParameter as exc:
        return error_response(400, "bad_parameter", str(exc))
    loaded = _load(campaign)
    if not isinstance(loaded, tuple):
        return loaded
    window, acc = loaded
    rows = _estimate(campaign, window, acc).quantiles(qs)
    return _json({**_header(campaign, window, acc), "method": campaign.params.get("method"),
                  "items": [{key: _finite(v) for key, v in row.items()} for row in rows]})
