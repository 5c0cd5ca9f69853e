"""The collector's last-known view of Redis, for ``/healthz`` and ``/metrics``: they answer within
``2 × PROBE_TIMEOUT_S`` (plus rendering) whatever Redis does — down, or frozen with its socket
open.

A reading is a PING and one pipelined round trip, on a client of its own with
``PROBE_TIMEOUT_S`` socket timeouts and no retries, under a lock. A daemon thread per process
(started with the app, and again in a forked child) reads every ``REFRESH_S``;
``Probe.snapshot(max_age)`` reads first when the snapshot is older than ``max_age`` and no other
thread is reading, else returns the last one at once. A failed reading keeps the last-known
counters and heartbeats, marked ``redis_ok=False``; a snapshot older than ``STALE_S`` (a reader
is stuck) counts as Redis not answering.

Each successful reading also feeds ``Probe.rates`` (``IngestRates``) with every local
campaign's accepted-reports counter, so every worker process holds readings of the last minute
from the moment it starts, whether or not a page was asked of it: the operator pages' ingest rate
is a real number in any worker (issue 35: a worker not asked before showed "measuring…", 47 s
after the last report). The readings stay in this process's memory (nothing is written to Redis)
and are of the collector's cumulative counter, never of a report; campaigns in a shuffled privacy
mode are not read into them (their counts move by whole releases; issue 36).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from ldptel import keys
from ldptel.campaigns.config import Config
from ldptel.privacy.modes import is_shuffled
from ldptel.server.background import ProcessThread
from ldptel.store import heartbeat, tally
from ldptel.store.redis_client import AnyRedis, connect

PROBE_TIMEOUT_S = 0.5
REFRESH_S = 1.0
STALE_S = 3.0
RATE_GAP_S = 2.0  # readings kept at least this far apart
RATE_SPAN_S = 60.0  # the rate covers about this much
RATE_SLACK_S = 5.0
RATE_READINGS = 64  # readings kept per campaign (at RATE_GAP_S: about two minutes)
RATE_FORGET_S = 3600.0  # readings older than this are dropped


@dataclass(frozen=True)
class Snapshot:
    taken: float  # epoch seconds of the last refresh attempt
    redis_ok: bool
    error: str | None = None
    read_at: float | None = None  # epoch seconds of the last successful read
    beats: list[heartbeat.Beat] = field(default_factory=list)
    shuffler_beats: list[heartbeat.Beat] = field(default_factory=list)
    global_counters: dict[str, str] = field(default_factory=dict)  # hash keys.GLOBAL_METRICS_KEY
    # + "stream_entries" (ingress and analysis), "ingress_entries", "ingress_shard_max" (the fullest shard),
    # "ingress_group_max" (the fullest (version, window, cell) group), "ingress_groups_full" (at the bound)
    campaign_counters: dict[str, dict[str, int]] = field(default_factory=dict)


def last_ended_window(campaign: Any, now: float) -> int:
    """The newest window of the campaign that has ended (its one window for ``window = "all"``)."""
    length = campaign.window_seconds
    return 0 if not length else tally.current_window(campaign, now) - length


class IngestRates:
    """Per-campaign readings (time, accepted reports) of the collector's counter, newest first,
    at least ``RATE_GAP_S`` apart (thread-safe). Fed by ``Probe``'s background reading every
    ``REFRESH_S`` and by each status read of the pages."""

    def __init__(self) -> None:
        self._readings: dict[str, deque[tuple[float, int]]] = {}
        self._lock = threading.Lock()

    def record(self, name: str, accepted: int, now: float) -> None:
        """Keep the reading ``accepted`` at ``now`` if the newest kept one is ``RATE_GAP_S`` old
        (a reading older than the newest kept one is ignored); forget readings over
        ``RATE_FORGET_S`` old."""
        with self._lock:
            self._record(name, accepted, now)

    def _record(self, name: str, accepted: int, now: float) -> deque[tuple[float, int]]:
        readings = self._readings.setdefault(name, deque(maxlen=RATE_READINGS))
        while readings and now - readings[-1][0] > RATE_FORGET_S:
            readings.pop()
        if not readings or now - readings[0][0] >= RATE_GAP_S:
            readings.appendleft((now, accepted))
        return readings

    def rate(self, name: str, accepted: int, now: float) -> float | None:
        """Record the reading ``accepted`` at ``now`` (as ``record``) and return
        (accepted − c₀) / (now − t₀) for the oldest kept reading (t₀, c₀) from ``RATE_GAP_S`` to
        ``RATE_SPAN_S`` (+ slack) ago, or else the newest one older than that; None while there
        is none."""
        with self._lock:
            readings = self._record(name, accepted, now)
            older = [(t, c) for t, c in readings if RATE_GAP_S <= now - t <= RATE_SPAN_S + RATE_SLACK_S]
            if not older:
                older = [(t, c) for t, c in readings if now - t >= RATE_GAP_S][:1]
        if not older:
            return None
        t0, c0 = min(older)
        return max(0.0, (accepted - c0) / (now - t0))


class Probe:
    """Cached reads of Redis for the health and metrics endpoints (thread-safe)."""

    def __init__(self, config: Callable[[], Config], redis_url: str) -> None:
        self._config = config  # the current snapshot (``registry.Live``)
        self.rates = IngestRates()  # the pages' ingest rates, fed by every reading
        self.redis_url = redis_url
        self._client: AnyRedis | None = None
        self._snap: Snapshot | None = None
        self._lock = threading.Lock()
        self._thread = ProcessThread(self._round, "ldptel-probe")
        self._thread.ensure()

    def _connect(self) -> AnyRedis:
        if self._client is None:
            self._client = connect(self.redis_url, role="reader", socket_timeout=PROBE_TIMEOUT_S,
                                   socket_connect_timeout=PROBE_TIMEOUT_S, retry=Retry(NoBackoff(), 0),
                                   health_check_interval=0)
        return self._client

    def ingest_rates(self) -> IngestRates:
        """``rates``, with this process's reading thread running (it starts on first use after a
        fork)."""
        self._thread.ensure()
        return self.rates

    def snapshot(self, max_age: float = REFRESH_S) -> Snapshot:
        """The last snapshot, read again first if it is older than ``max_age`` and no other
        thread is reading (see the module doc)."""
        self._thread.ensure()
        snap = self._snap
        if snap is None or time.time() - snap.taken > max_age:
            self._update(snap, blocking=snap is None)  # only the very first read waits for another
            snap = self._snap
        assert snap is not None
        age = time.time() - snap.taken
        if age > STALE_S:
            return replace(snap, redis_ok=False, error=f"no answer from Redis for {age:.0f} s")
        return snap

    def _update(self, seen: Snapshot | None, blocking: bool) -> None:
        """Read Redis unless another thread is reading (or, ``blocking``, has read since ``seen``)."""
        if not self._lock.acquire(blocking=blocking):
            return
        try:
            if self._snap is seen:
                self._snap = self._refresh(seen)
        finally:
            self._lock.release()

    def _round(self) -> float:
        """One round of the background thread: a fresh reading; the seconds to wait."""
        self._update(self._snap, blocking=True)
        return REFRESH_S

    def _refresh(self, last: Snapshot | None) -> Snapshot:
        now = time.time()
        try:
            client = self._connect()
            client.ping()
            return self._read(client, now)
        except (redis.RedisError, RedisClusterException, OSError) as exc:
            if last is None:
                return Snapshot(taken=now, redis_ok=False, error=str(exc))
            return replace(last, taken=now, redis_ok=False, error=str(exc))

    def _read(self, client: AnyRedis, now: float) -> Snapshot:
        campaigns = list(self._config().campaigns)
        shards = [(c.name, s) for c in campaigns for s in range(c.shards)]
        pipe = client.pipeline(transaction=False)
        pipe.hgetall(keys.GLOBAL_METRICS_KEY)
        pipe.hgetall(keys.HEARTBEAT_KEY)
        pipe.hgetall(keys.SHUFFLER_HEARTBEAT_KEY)
        last = {c.name: last_ended_window(c, now) for c in campaigns}
        versions = {c.name: c.version for c in campaigns}
        for name, s in shards:  # stream entries: ingress (not yet shuffled) and analysis
            pipe.hgetall(keys.metrics_key(name, s))
            pipe.xlen(keys.stream_key(name, s))
            pipe.xlen(keys.ingress_key(name, s))
            pipe.hget(keys.counts_key(name, s, versions[name]), f"{keys.N_PREFIX}{last[name]}")
            pipe.hvals(keys.ingress_groups_key(name, s))
            # the reports the shuffler discarded: the pages' accepted count is net of them (``tally.summary``)
            pipe.hget(keys.shuffle_metrics_key(name, s), keys.SHUFFLE_DISCARDED)
        res: list[Any] = pipe.execute()
        bound = self._config().shuffler.max_ingress_batches
        per: dict[str, dict[str, int]] = {c.name: {"stream_entries": 0, "ingress_entries": 0,
                                                   "ingress_shard_max": 0, "last_window_reports": 0,
                                                   "ingress_group_max": 0, "ingress_groups_full": 0,
                                                   "min_reports": c.min_reports} for c in campaigns}
        n = 6  # replies per shard
        discarded = {c.name: 0 for c in campaigns}
        for i, (name, _) in enumerate(shards):
            for k, v in res[3 + n * i].items():
                per[name][k.decode()] = per[name].get(k.decode(), 0) + int(v)
            ingress = int(res[5 + n * i])
            per[name]["stream_entries"] += int(res[4 + n * i]) + ingress
            per[name]["ingress_entries"] += ingress
            per[name]["ingress_shard_max"] = max(per[name]["ingress_shard_max"], ingress)
            per[name]["last_window_reports"] += int(res[6 + n * i] or 0)
            groups = [int(v) for v in res[7 + n * i]]  # entries per (version, window, cell) group
            per[name]["ingress_group_max"] = max([per[name]["ingress_group_max"], *groups])
            per[name]["ingress_groups_full"] += sum(g >= bound for g in groups)
            discarded[name] += int(res[8 + n * i] or 0)
        for c in campaigns:  # the pages' ingest rates (module doc); none of a shuffled campaign
            if not is_shuffled(c):
                self.rates.record(c.name, per[c.name].get(keys.ACCEPTED_REPORTS, 0) - discarded[c.name], now)
        return Snapshot(taken=now, redis_ok=True, read_at=now, beats=heartbeat.parse(res[1]),
                        shuffler_beats=heartbeat.parse(res[2]),
                        global_counters={k.decode(): v.decode() for k, v in res[0].items()},
                        campaign_counters=per)
