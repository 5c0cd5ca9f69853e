"""Upkeep of the report streams' consumer groups, one stream at a time: take over entries of dead
consumers, remove idle consumers that own nothing, trim acknowledged entries past retention
(measured from when they were delivered: entry ids hold no receive time).

Every function touches one stream key, so it runs on that stream's Redis Cluster node.
"""

from __future__ import annotations

from collections import deque
from typing import cast

import redis as redis_lib

from ldptel.keys import GROUP
from ldptel.store import scripts
from ldptel.store.redis_client import AnyRedis


def claim_idle(r: AnyRedis, stream: str, consumer: str, idle_ms: int) -> int:
    """``XAUTOCLAIM`` to ``consumer`` every entry of ``stream`` pending for at least ``idle_ms``
    to any consumer; returns the number claimed."""
    claimed = 0
    start = "0-0"
    while True:
        nxt, n = scripts.of(r).call("AUTOCLAIM", keys=[stream], args=[GROUP, consumer, idle_ms, start, 1000])
        claimed += n
        if nxt == b"0-0":
            return cast("int", claimed)
        start = nxt


def remove_idle_consumers(r: AnyRedis, stream: str, keep: str, idle_ms: int) -> None:
    """Drop consumers of ``stream`` (other than ``keep``) idle longer than ``idle_ms`` that own no
    pending entry (a live one is re-created by its next read; nothing pending means nothing to
    lose). The pending check and the removal are one script."""
    try:
        consumers = r.xinfo_consumers(stream, GROUP)
    except redis_lib.ResponseError:
        return
    for c in consumers:
        name = c["name"].decode() if isinstance(c["name"], bytes) else c["name"]
        if name != keep and c["pending"] == 0 and c["idle"] > idle_ms:
            scripts.of(r).call("DELCONSUMER", keys=[stream], args=[GROUP, name])


class DeliveryMarks:
    """Up to which id each stream had been delivered, and when (this process's monotonic clock,
    memory only). Entry ids are window starts, not receive times (``scripts.INGEST``), so the age
    of an entry is taken from these marks: an acknowledged entry is trimmed ``retention_seconds``
    after it was delivered. A restarted aggregator starts without marks, so trimming resumes
    ``retention_seconds`` after the restart; at most ``MAX_MARKS`` marks per stream are kept."""

    MAX_MARKS = 64

    def __init__(self, retention_seconds: float) -> None:
        self.retention = retention_seconds
        self._marks: dict[str, deque[tuple[float, tuple[int, int]]]] = {}

    def expired(self, stream: str, now: float, delivered: tuple[int, int]) -> tuple[int, int] | None:
        """Note that ``stream`` was delivered below ``delivered`` at ``now``; return the newest
        such bound noted at least ``retention_seconds`` ago (None: none yet)."""
        marks = self._marks.setdefault(stream, deque())
        if not marks or now - marks[-1][0] >= self.retention / self.MAX_MARKS:
            marks.append((now, delivered))
        cutoff = now - self.retention
        while len(marks) > 1 and marks[1][0] <= cutoff:
            marks.popleft()
        return marks[0][1] if marks[0][0] <= cutoff else None


def trim(r: AnyRedis, stream: str, marks: DeliveryMarks, now: float) -> int:
    """Trim the entries of ``stream`` acknowledged and delivered at least ``retention_seconds``
    ago (``DeliveryMarks``): MINID is the smallest of that bound, the oldest pending entry and the
    first undelivered one of every group. Returns the number of entries removed."""
    try:
        groups = r.xinfo_groups(stream)
    except redis_lib.ResponseError:
        return 0
    if not groups:
        return 0
    delivered = min(_parse_id(g["last-delivered-id"]) for g in groups)
    delivered = (delivered[0], delivered[1] + 1)
    bound = marks.expired(stream, now, delivered)
    if bound is None:
        return 0
    minid = min(bound, delivered)
    for g in groups:
        if g.get("pending", 0):
            lowest = r.xpending(stream, g["name"])["min"]
            if lowest is not None:
                minid = min(minid, _parse_id(lowest))
    if minid > (0, 0):
        return r.xtrim(stream, minid=f"{minid[0]}-{minid[1]}", approximate=False)
    return 0


def _parse_id(eid: bytes | str) -> tuple[int, int]:
    s = eid.decode() if isinstance(eid, bytes) else eid
    ms, _, seq = s.partition("-")
    return int(ms), int(seq or 0)
