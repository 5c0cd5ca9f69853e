"""``GET /healthz`` (each stage's state and lag) and ``GET /metrics`` (Prometheus text format, see
``server.metrics``). ``/healthz`` needs no token, ``/metrics`` an admin or export token;
neither exposes a report, and with a campaign in a shuffled privacy mode ``/healthz`` leaves out
the age of the last commit (the time of a release), and its ingress counts hold only the other
campaigns' entries (issue 36 item 5: one device's sealed report moved ``ingress_batches`` 0→1, the
arrival signal an n−1 attacker waits for; ``/metrics``, with a token, keeps the exact counts, the
shuffled campaigns' summed under ``campaign="(shuffled)"``). Both read Redis through
``server.probe`` (fresh, unless another thread of the process is reading: then its last snapshot),
so they answer within about a second whatever Redis does.

``/healthz`` answers 200 ``{"status": "ok", "redis": "ok", "version", "components"}`` or 503
``{"status": "unavailable", …}`` when a stage is down. ``components`` holds one entry per stage:

- ``collector``: ``degraded`` when a (version, window, cell) group of a campaign holds ``[shuffler]
  max_ingress_batches`` entries in ingress (the collector then refuses that group's batches, and
  only that group's, with 503 ``ingress_full`` and ``Retry-After``: a stopped shuffler never makes
  it trim an accepted report, and a group that cannot reach ``batch_min`` until its window closes
  refuses no other group): ``degraded`` lists those campaigns with their full groups, and the
  answer stays 200 — a full group is one campaign's trouble, not the collector's (issue 34). With
  ``ingress_batches`` (every ingress stream), ``ingress_fullest`` (the fullest shard's) and
  ``ingress_group_fullest`` (the fullest group's), each over the campaigns in the ``local`` mode
  only (a full group of a shuffled campaign holds ``max_ingress_batches`` ≥ 2·``batch_min``
  entries: it is still named in ``degraded``);
- ``redis``: ``down`` when it does not answer;
- ``shuffler`` (with ``[shuffler] enabled``): ``down`` (no heartbeat for the stall threshold) or
  ``lagging`` when its ``lag_seconds`` — since it last ended a round with nothing overdue — passes
  ``stall_after_seconds`` = the smallest ``shuffle_max_delay`` of the campaigns (at least 2 s; a
  hung shuffler shows within that, before any report waited twice it in ingress);
- ``aggregator``: ``down`` (no fresh heartbeat, ``ldptel.store.heartbeat.stale_after``) or ``lagging``
  (lag over ``[server] max_aggregator_lag_seconds``);
- ``analyzer_keys`` (with a campaign in a shuffled privacy mode): ``failing`` while no current
  analyzer key is published (an aggregator that cannot write its keys directory: those campaigns
  are not aggregated, the local ones are), with the campaigns it concerns; informational, never
  a 503.

The shuffler and aggregator turn the answer 503 only when this ``ldptel serve`` runs them
(``supervised``); otherwise they are informational (``external`` with a fresh heartbeat, else
``none``): a collector must not be taken out of a load balancer for a stage it does not run.
"""

from __future__ import annotations

import os
import time
from typing import Any

from flask import Blueprint, Response, jsonify

from ldptel import __version__
from ldptel.campaigns.config import Config
from ldptel.privacy.modes import is_shuffled
from ldptel.server.app import state
from ldptel.server.auth import require_token
from ldptel.server.probe import Snapshot
from ldptel.server.sealed_ingest import sealed_keys
from ldptel.store import analyzer_keys, heartbeat

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


def stall_after(config: Config) -> float:
    """Seconds after which the shuffler counts as stalled: the smallest ``shuffle_max_delay`` (at
    least 2 s). A running shuffler ends a round with nothing overdue every ``poll_ms``; one that
    stopped at t held reports at most ``shuffle_max_delay`` old, so when it is flagged no report has
    waited in ingress more than twice that."""
    delays = [c.shuffle_max_delay_seconds for c in config.campaigns]
    return max(2.0, float(min(delays, default=60)))


def shuffler_gauges(snap: Snapshot, stall: float, now: float) -> dict[str, float | None]:
    """``workers`` (a heartbeat within ``stall``), ``heartbeat_age_seconds`` and ``lag_seconds``:
    since the freshest shuffler last ended a round with nothing overdue."""
    fresh = [b for b in snap.shuffler_beats if now - b.at <= stall]
    caught_up = [b.caught_up for b in snap.shuffler_beats if b.caught_up is not None]
    beats = snap.shuffler_beats
    return {
        "workers": float(len(fresh)),
        "heartbeat_age_seconds": max(0.0, now - max(b.at for b in beats)) if beats else None,
        "lag_seconds": max(0.0, now - max(caught_up)) if caught_up else None,
    }


def stage_status(gauges: dict[str, float | None], max_lag: float, supervised: bool) -> str:
    """``ok``, ``down`` (no fresh heartbeat), ``lagging`` (lag over ``max_lag``) when
    ``supervised``; otherwise ``external`` (a fresh heartbeat) or ``none``."""
    if not gauges["workers"]:
        return "down" if supervised else "none"
    if not supervised:
        return "external"
    lag = gauges["lag_seconds"]
    return "lagging" if lag is not None and lag > max_lag else "ok"


aggregator_status = stage_status  # the name callers and tests know


def ingress_gauges(snap: Snapshot, shuffled: frozenset[str] = frozenset()) -> dict[str, int]:
    """Entries in every ingress stream, in the fullest shard's and in the fullest group's — of
    the campaigns not in ``shuffled`` (a shuffled privacy mode: one device's sealed report moved
    ``ingress_batches`` 0→1 at once, the arrival signal an n−1 attacker needs; issue 36 item 5)."""
    per = [c for name, c in snap.campaign_counters.items() if name not in shuffled]
    return {"ingress_batches": sum(c.get("ingress_entries", 0) for c in per),
            "ingress_fullest": max((c.get("ingress_shard_max", 0) for c in per), default=0),
            "ingress_group_fullest": max((c.get("ingress_group_max", 0) for c in per), default=0)}


def full_groups(snap: Snapshot) -> dict[str, dict[str, int]]:
    """The campaigns with a (version, window, cell) group at the ingress bound: name →
    ``{"full_groups": n}`` (each such group's batches are refused, no other's)."""
    return {name: {"full_groups": c["ingress_groups_full"]}
            for name, c in sorted(snap.campaign_counters.items()) if c.get("ingress_groups_full", 0) > 0}


def analyzer_keys_component(st: Any, shuffled: list[str], now: float) -> dict[str, Any]:
    """Whether an aggregator has published a current analyzer key: without one the shuffled
    campaigns (named) get no report (the SDK keeps them queued) and are not aggregated, while
    the local campaigns are: ``failing`` for those campaigns, never a 503 of the collector
    (the aggregator that cannot write its keys logs why: docs/operations.md#analyzer-keys)."""
    try:
        key = analyzer_keys.current(sealed_keys(st), now)
    except Exception as exc:  # noqa: BLE001 - Redis down: the redis component says so
        return {"status": "unknown", "campaigns": shuffled, "error": str(exc)}
    if key is None:
        return {"status": "failing", "campaigns": shuffled,
                "detail": "no aggregator has published an analyzer key: these campaigns are not "
                          "aggregated (is the aggregator's keys_dir writable?)"}
    return {"status": "ok", "campaigns": shuffled, "key_id": f"{key.key_id:08x}"}


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    """200 when every stage is up, else 503 (see the module doc)."""
    st = state()
    cfg = st.config
    snap = st.probe.snapshot(max_age=0)
    now = time.time()
    gauges = aggregator_gauges(snap, cfg.aggregator.block_ms, now)
    max_lag = cfg.server.max_aggregator_lag_seconds
    agg = stage_status(gauges, max_lag, st.supervised_aggregator)
    shuffled = frozenset(c.name for c in cfg.campaigns if is_shuffled(c))
    if shuffled:  # a commit's time is a release's time
        gauges.pop("last_commit_age_seconds")
    ingress = ingress_gauges(snap, shuffled)  # no count that moves with one sealed report
    degraded = full_groups(snap) if cfg.shuffler.enabled else {}
    components: dict[str, dict[str, Any]] = {
        "collector": {"status": "degraded" if degraded else "ok", "pid": os.getpid(), **ingress,
                      "max_ingress_batches": cfg.shuffler.max_ingress_batches, "degraded": degraded},
        "redis": {"status": "ok" if snap.redis_ok else "down", "error": snap.error,
                  "checked_seconds_ago": _rounded(max(0.0, now - snap.taken))},
    }
    bad = [not snap.redis_ok, agg in ("down", "lagging")]  # a full ingress group: degraded, 200
    if cfg.shuffler.enabled:
        stall = stall_after(cfg)
        shf_gauges = shuffler_gauges(snap, stall, now)
        shf = stage_status(shf_gauges, stall, st.supervised_aggregator)
        components["shuffler"] = {"status": shf, "supervised": st.supervised_aggregator,
                                  "stall_after_seconds": stall,
                                  **{k: _rounded(v) for k, v in shf_gauges.items()}}
        bad.append(shf in ("down", "lagging"))
    components["aggregator"] = {"status": agg, "supervised": st.supervised_aggregator,
                                "max_lag_seconds": max_lag, **{k: _rounded(v) for k, v in gauges.items()}}
    if shuffled:
        components["analyzer_keys"] = analyzer_keys_component(st, sorted(shuffled), now)
    ok = not any(bad)
    body = {"status": ("degraded" if degraded else "ok") if ok else "unavailable",
            "redis": components["redis"]["status"],
            "version": __version__, "components": components}
    return jsonify(body), 200 if ok else 503


@bp.get("/metrics")
@require_token("admin", "export")
def metrics() -> Response:
    """Prometheus text, for an admin or export token: campaigns in a shuffled privacy mode are
    counted together under ``campaign="(shuffled)"`` (``metrics.SHUFFLED_LABEL``), so no
    per-campaign count moves with a single device's report."""
    st = state()
    cfg = st.config
    snap = st.probe.snapshot(max_age=0)
    now = time.time()
    gauges = aggregator_gauges(snap, cfg.aggregator.block_ms, now)
    shuffler = shuffler_gauges(snap, stall_after(cfg), now) if cfg.shuffler.enabled else {}
    pooled = {c.name for c in cfg.campaigns if is_shuffled(c)}
    return Response(st.metrics.render(snap, gauges, shuffler, pooled),
                    mimetype="text/plain; version=0.0.4")
