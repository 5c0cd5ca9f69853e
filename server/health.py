"""``GET /healthz`` (each component's state) and ``GET /metrics`` (Prometheus text format, see
``server.metrics``). ``/healthz`` needs no token, ``/metrics`` an admin or export token; neither
exposes a report, and with a campaign in a shuffled privacy mode ``/healthz`` leaves out the age of
the last commit (the time of a release). Both read Redis through
``server.probe`` (fresh, unless another thread of the process is reading: then its last snapshot),
so they answer within about a second whatever Redis does.

``/healthz`` answers 200 ``{"status": "ok", "redis": "ok", "version", "components"}`` or 503
``{"status": "unavailable", …}`` when a component is down: Redis does not answer, or — when this
``ldptel serve`` runs the aggregator (``supervised``) — no aggregator heartbeat is fresh
(``ldptel.heartbeat.stale_after``) or the aggregator's lag exceeds
``[server] max_aggregator_lag_seconds``. Without a supervised aggregator the aggregator entry is
informational: a collector must not be taken out of a load balancer for a lagging aggregator.
"""

from __future__ import annotations

import os
import time

from flask import Blueprint, Response, jsonify

from ldptel import __version__, heartbeat
from ldptel.privacy_modes import is_shuffled
from ldptel.server.app import state
from ldptel.server.auth import require_token
from ldptel.server.probe import Snapshot

bp = Blueprint("health", __name__)


def aggregator_gauges(snap: Snapshot, block_ms: int, now: float) -> dict[str, float | None]:
    """From the heartbeats: ``workers`` (fresh), ``heartbeat_age_seconds``,
    ``last_commit_age_seconds`` and ``lag_seconds`` — seconds since a fresh worker last found
    every stream drained (a worker counts its start as such), None when unknown."""
    fresh = [b for b in snap.beats if now - b.at <= heartbeat.stale_after(block_ms)]
    commits = [b.committed for b in snap.beats if b.committed is not None]
    caught_up = [b.caught_up for b in fresh if b.caught_up is not None]
    return {
        "workers": float(len(fresh)),
        "heartbeat_age_seconds": max(0.0, now - max(b.at for b in snap.beats)) if snap.beats else None,
        "last_commit_age_seconds": max(0.0, now - max(commits)) if commits else None,
        "lag_seconds": max(0.0, now - max(caught_up)) if caught_up else None,
    }


def aggregator_status(gauges: dict[str, float | None], max_lag: float, supervised: bool) -> str:
    """``ok``, ``down`` (no fresh heartbeat), ``lagging`` (lag over ``max_lag``) when
    ``supervised``; otherwise ``external`` (a fresh heartbeat) or ``none``."""
    if not gauges["workers"]:
        return "down" if supervised else "none"
    if not supervised:
        return "external"
    lag = gauges["lag_seconds"]
    return "lagging" if lag is not None and lag > max_lag else "ok"


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    """200 when every component is up, else 503 (see the module doc)."""
    st = state()
    snap = st.probe.snapshot(max_age=0)
    now = time.time()
    gauges = aggregator_gauges(snap, st.config.aggregator.block_ms, now)
    max_lag = st.config.server.max_aggregator_lag_seconds
    agg = aggregator_status(gauges, max_lag, st.supervised_aggregator)
    if any(is_shuffled(c) for c in st.config.campaigns):  # a commit's time is a release's time
        gauges.pop("last_commit_age_seconds")
    ok = snap.redis_ok and agg not in ("down", "lagging")
    redis_status = "ok" if snap.redis_ok else "down"
    components = {
        "collector": {"status": "ok", "pid": os.getpid()},
        "redis": {"status": redis_status, "error": snap.error,
                  "checked_seconds_ago": _rounded(max(0.0, now - snap.taken))},
        "aggregator": {"status": agg, "supervised": st.supervised_aggregator,
                       "max_lag_seconds": max_lag, **{k: _rounded(v) for k, v in gauges.items()}},
    }
    body = {"status": "ok" if ok else "unavailable", "redis": redis_status,
            "version": __version__, "components": components}
    return jsonify(body), 200 if ok else 503


@bp.get("/metrics")
@require_token("admin", "export")
def metrics() -> Response:
    """Prometheus text, for an admin or export token: campaigns in a shuffled privacy mode are
    counted together under ``campaign="(shuffled)"`` (``metrics.SHUFFLED_LABEL``), so no
    per-campaign count moves with a single device's report."""
    st = state()
    snap = st.probe.snapshot(max_age=0)
    gauges = aggregator_gauges(snap, st.config.aggregator.block_ms, time.time())
    pooled = {c.name for c in st.config.campaigns if is_shuffled(c)}
    return Response(st.metrics.render(snap, gauges, pooled), mimetype="text/plain; version=0.0.4")
