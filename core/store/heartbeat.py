"""Aggregator and shuffler heartbeats, the liveness signal of ``/healthz`` and the operator pages.

Each running aggregator worker writes, about every ``INTERVAL_S``, one field of the hash
``keys.HEARTBEAT_KEY``: its consumer name (``host:pid:random``) → ``"<beat> <committed>
<caught up>"`` in epoch milliseconds (0 = not yet): when it last finished a round, last committed,
and last found every stream drained (nothing new, nothing pending to it). Each shuffler writes the
same into ``keys.SHUFFLER_HEARTBEAT_KEY`` (committed 0; caught up: the end of its last round that
left nothing overdue in what it holds, so a hung or failing shuffler's lag grows). A process that
stops cleanly removes its field; fields not refreshed for ``FORGET_S`` are pruned by the live ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

from ldptel import keys
from ldptel.store.redis_client import AnyRedis

INTERVAL_S = 1.0
PRUNE_INTERVAL_S = 60.0
FORGET_S = 86400.0
STALE_GRACE_S = 2.0


def stale_after(block_ms: int) -> float:
    """Seconds after which a worker that has not beaten is taken as dead: three blocking reads
    (a worker beats after each) plus ``STALE_GRACE_S``."""
    return 3 * block_ms / 1000 + STALE_GRACE_S


@dataclass(frozen=True)
class Beat:
    consumer: str
    at: float  # epoch seconds of the last beat
    committed: float | None  # of the last commit
    caught_up: float | None  # of the last round that found every stream drained

    @property
    def pid(self) -> int | None:
        parts = self.consumer.split(":")
        return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


def _ms(t: float | None) -> int:
    return 0 if t is None else int(t * 1000)


def _seconds(ms: bytes) -> float | None:
    return int(ms) / 1000 if int(ms) else None


def beat(r: AnyRedis, consumer: str, committed: float | None, caught_up: float | None,
         now: float | None = None, key: str = keys.HEARTBEAT_KEY) -> None:
    """Write this worker's heartbeat (``key``: the shuffler's hash for a shuffler)."""
    now = time.time() if now is None else now
    r.hset(key, consumer, f"{_ms(now)} {_ms(committed)} {_ms(caught_up)}")


def read(r: AnyRedis, key: str = keys.HEARTBEAT_KEY) -> list[Beat]:
    """Every worker's last heartbeat."""
    return parse(cast(dict[bytes, bytes], r.hgetall(key)))


def parse(fields: dict[bytes, bytes]) -> list[Beat]:
    """The heartbeats of an HGETALL of ``keys.HEARTBEAT_KEY`` (malformed fields are skipped)."""
    beats = []
    for field, value in fields.items():
        parts = value.split()
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            at, committed, caught_up = (_seconds(p) for p in parts)
            beats.append(Beat(field.decode(errors="replace"), at or 0.0, committed, caught_up))
    return beats


def forget(r: AnyRedis, consumer: str, key: str = keys.HEARTBEAT_KEY) -> None:
    r.hdel(key, consumer)


def prune(r: AnyRedis, now: float | None = None, key: str = keys.HEARTBEAT_KEY) -> int:
    """Remove the fields of workers silent for ``FORGET_S``; returns how many."""
    now = time.time() if now is None else now
    old = [b.consumer for b in read(r, key) if now - b.at > FORGET_S]
    return int(r.hdel(key, *old)) if old else 0


class Pulse:
    """One worker's beats, rate-limited: ``tick`` writes at most every ``INTERVAL_S`` and prunes
    silent workers every ``PRUNE_INTERVAL_S``."""

    def __init__(self, consumer: str, key: str = keys.HEARTBEAT_KEY, interval: float = INTERVAL_S) -> None:
        self.consumer, self.key, self.interval = consumer, key, interval
        self._last_beat = self._last_prune = float("-inf")

    def tick(self, r: AnyRedis, committed: float | None, caught_up: float | None) -> bool:
        """Beat if it is time; True if it beat."""
        now = time.monotonic()
        if now - self._last_beat < self.interval:
            return False
        self._last_beat = now
        beat(r, self.consumer, committed, caught_up, key=self.key)
        if now - self._last_prune > PRUNE_INTERVAL_S:
            self._last_prune = now
            prune(r, key=self.key)
        return True
