"""The collector's last-known view of Redis, for ``/healthz`` and ``/metrics``: they answer within
``2 × PROBE_TIMEOUT_S`` (plus rendering) whatever Redis does — down, or frozen with its socket
open.

``Probe.snapshot()`` returns a ``Snapshot`` at most ``REFRESH_S`` old when Redis answers. A
refresh runs in the request that finds the snapshot old, on a client of its own with short socket
timeouts and no retries; requests arriving meanwhile get the previous snapshot at once. A failed
refresh keeps the last-known counters and heartbeats, marked ``redis_ok=False``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from ldptel import keys
from ldptel.aggregator import heartbeat
from ldptel.config import Config
from ldptel.redis_client import AnyRedis, connect

PROBE_TIMEOUT_S = 0.5
REFRESH_S = 1.0


@dataclass(frozen=True)
class Snapshot:
    taken: float  # epoch seconds of the last refresh attempt
    redis_ok: bool
    error: str | None = None
    read_at: float | None = None  # epoch seconds of the last successful read
    beats: list[heartbeat.Beat] = field(default_factory=list)
    global_counters: dict[str, str] = field(default_factory=dict)  # hash keys.GLOBAL_METRICS_KEY
    campaign_counters: dict[str, dict[str, int]] = field(default_factory=dict)  # + "stream_entries"


class Probe:
    """Cached reads of Redis for the health and metrics endpoints (thread-safe)."""

    def __init__(self, config: Config, redis_url: str) -> None:
        self.config = config
        self.redis_url = redis_url
        self._client: AnyRedis | None = None
        self._snap: Snapshot | None = None
        self._lock = threading.Lock()

    def _connect(self) -> AnyRedis:
        if self._client is None:
            self._client = connect(self.redis_url, socket_timeout=PROBE_TIMEOUT_S,
                                   socket_connect_timeout=PROBE_TIMEOUT_S, retry=Retry(NoBackoff(), 0),
                                   health_check_interval=0)
        return self._client

    def snapshot(self) -> Snapshot:
        snap = self._snap
        if snap is None:
            self._lock.acquire()  # the first read: nothing to answer with yet
        elif time.time() - snap.taken < REFRESH_S or not self._lock.acquire(blocking=False):
            return snap
        try:
            current = self._snap
            if current is None or current is snap:
                current = self._snap = self._refresh(current)
            return current
        finally:
            self._lock.release()

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
        shards = [(c.name, s) for c in self.config.campaigns for s in range(c.shards)]
        pipe = client.pipeline(transaction=False)
        pipe.hgetall(keys.GLOBAL_METRICS_KEY)
        for name, s in shards:
            pipe.hgetall(keys.metrics_key(name, s))
            pipe.xlen(keys.stream_key(name, s))
        res: list[Any] = pipe.execute()
        per: dict[str, dict[str, int]] = {c.name: {"stream_entries": 0} for c in self.config.campaigns}
        for i, (name, _) in enumerate(shards):
            for k, v in res[1 + 2 * i].items():
                per[name][k.decode()] = per[name].get(k.decode(), 0) + int(v)
            per[name]["stream_entries"] += int(res[2 + 2 * i])
        return Snapshot(taken=now, redis_ok=True, read_at=now, beats=heartbeat.read(client),
                        global_counters={k.decode(): v.decode() for k, v in res[0].items()},
                        campaign_counters=per)
