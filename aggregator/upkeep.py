"""Upkeep of the report streams' consumer groups, one stream at a time: take over entries of dead
consumers, remove idle consumers that own nothing, trim acknowledged entries past retention.

Every function touches one stream key, so it runs on that stream's Redis Cluster node.
"""

from __future__ import annotations

import redis as redis_lib

from ldptel import scripts
from ldptel.keys import GROUP
from ldptel.redis_client import AnyRedis


def claim_idle(r: AnyRedis, stream: str, consumer: str, idle_ms: int) -> int:
    """``XAUTOCLAIM`` to ``consumer`` every entry of ``stream`` pending for at least ``idle_ms``
    to any consumer; returns the number claimed."""
    autoclaim = r.register_script(scripts.AUTOCLAIM)
    claimed = 0
    start = "0-0"
    while True:
        nxt, n = autoclaim(keys=[stream], args=[GROUP, consumer, idle_ms, start, 1000])
        claimed += n
        if nxt == b"0-0":
            return claimed
        start = nxt


def remove_idle_consumers(r: AnyRedis, stream: str, keep: str, idle_ms: int) -> None:
    """Drop consumers of ``stream`` (other than ``keep``) idle longer than ``idle_ms`` that own no
    pending entry (a live one is re-created by its next read; nothing pending means nothing to
    lose). The pending check and the removal are one script."""
    try:
        consumers = r.xinfo_consumers(stream, GROUP)
    except redis_lib.ResponseError:
        return
    delconsumer = r.register_script(scripts.DELCONSUMER)
    for c in consumers:
        name = c["name"].decode() if isinstance(c["name"], bytes) else c["name"]
        if name != keep and c["pending"] == 0 and c["idle"] > idle_ms:
            delconsumer(keys=[stream], args=[GROUP, name])


def retention_bound(r: AnyRedis, retention_seconds: int) -> tuple[int, int]:
    """The stream id ``retention_seconds`` before the Redis server's clock. Entry ids are window
    starts (``scripts.INGEST``), so an entry is trimmed (once acknowledged) when its window began
    more than ``retention_seconds`` ago; ids of the "all" window are ``0-<n>``."""
    sec, usec = r.time()
    cutoff_ms = sec * 1000 + usec // 1000 - retention_seconds * 1000
    return max(cutoff_ms, 0), 0


def trim(r: AnyRedis, stream: str, bound: tuple[int, int]) -> int:
    """Trim the entries of ``stream`` below ``bound`` that are acknowledged: MINID is the smallest
    of ``bound``, the oldest pending entry and the first undelivered one of every group. Returns
    the number of entries removed."""
    try:
        groups = r.xinfo_groups(stream)
    except redis_lib.ResponseError:
        return 0
    minid = bound
    for g in groups:
        ms, seq = _parse_id(g["last-delivered-id"])
        minid = min(minid, (ms, seq + 1))
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
