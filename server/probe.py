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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from ldptel import keys
from ldptel.campaigns.config import Config
from ldptel.server.background import ProcessThread
from ldptel.store import heartbeat, tally
from ldptel.store.redis_client import AnyRedis, connect

PROBE_TIMEOUT_S = 0.5
REFRESH_S = 1.0
STALE_S = 3.0


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


class Probe:
    """Cached reads of Redis for the health and metrics endpoints (thread-safe)."""

    def __init__(self, config: Callable[[], Config], redis_url: str) -> None:
        self._config = config  # the current snapshot (``registry.Live``)
        self.redis_url = redis_url
        self._client: AnyRedis | None = None
        self._snap: Snapshot | None = None
        self._lock = threading.Lock()
        self._thread = ProcessThread(self._run, "ldptel-probe")
        self._thread.ensure()

    def _connect(self) -> AnyRedis:
        if self._client is None:
            self._client = connect(self.redis_url, role="reader", socket_timeout=PROBE_TIMEOUT_S,
                                   socket_connect_timeout=PROBE_TIMEOUT_S, retry=Retry(NoBackoff(), 0),
                                   health_check_interval=0)
        return self._client

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

    def _run(self) -> None:
        while True:
            self._update(self._snap, blocking=True)
            time.sleep(REFRESH_S)

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
        res: list[Any] = pipe.execute()
        bound = self._config().shuffler.max_ingress_batches
        per: dict[str, dict[str, int]] = {c.name: {"stream_entries": 0, "ingress_entries": 0,
                                                   "ingress_shard_max": 0, "last_window_reports": 0,
                                                   "ingress_group_max": 0, "ingress_groups_full": 0,
                                                   "min_reports": c.min_reports} for c in campaigns}
        n = 5  # replies per shard
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
        return Snapshot(taken=now, redis_ok=True, read_at=now, beats=heartbeat.parse(res[1]),
                        shuffler_beats=heartbeat.parse(res[2]),
                        global_counters={k.decode(): v.decode() for k, v in res[0].items()},
                        campaign_counters=per)
