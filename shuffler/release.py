"""Moving one release to the analysis stream with no Redis call over a bounded size.

A release of at most ``CALL_IDS`` ingress entries and ``CALL_BATCHES`` / ``CALL_BYTES`` of
re-packed batches is one ``scripts.SHUFFLE`` call, as before. A larger one (the shuffler behind,
a long ``shuffle_max_delay``, a big ``batch_min``) would block every Redis client for as long as
the script runs (0.5-1 s for 70,000 entries), so it is journaled and moved in bounded steps
(``ldptel.store.release_scripts``: begin, stage, commit, then steps that anyone can run): each call
checks or deletes at most ``CALL_IDS`` ingress ids and writes at most ``CALL_BATCHES`` batches of
at most ``CALL_BYTES`` in all. Exactly once holds across the calls (``release_scripts``); a
shuffler that finds a committed release (its own, or that of a shuffler that died) completes it
(``settle``) before it releases anything else from that stream.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ldptel import keys
from ldptel.store import scripts
from ldptel.store.redis_client import AnyRedis

CALL_IDS = 1000  # ingress ids checked or deleted per call (5-10 ms of Redis time on this machine)
CALL_BATCHES = 64  # analysis batches written per call
CALL_BYTES = 4 << 20  # bytes of batches written per call
STAGING_TTL_MS = 60_000  # a release still staging expires unless a call renews it
IDLE_MS = 5_000  # another shuffler drops a staging release that no call renewed for this long


def _status(res: Any) -> str:
    first = res[0]
    return first.decode() if isinstance(first, bytes) else str(first)


def chunks(ids: list[bytes], batches: list[tuple[bytes, int]]
           ) -> Iterator[tuple[list[bytes], list[tuple[bytes, int]]]]:
    """(ids, batches) of each staging call: ids ``CALL_IDS`` at a time, batches up to
    ``CALL_BATCHES`` and ``CALL_BYTES`` (a larger batch goes alone)."""
    parts: list[list[tuple[bytes, int]]] = []
    cur: list[tuple[bytes, int]] = []
    size = 0
    for b in batches:
        if cur and (len(cur) >= CALL_BATCHES or size + len(b[0]) > CALL_BYTES):
            parts.append(cur)
            cur, size = [], 0
        cur.append(b)
        size += len(b[0])
    if cur:
        parts.append(cur)
    id_parts = [ids[s:s + CALL_IDS] for s in range(0, len(ids), CALL_IDS)]
    for i in range(max(len(parts), len(id_parts))):
        yield (id_parts[i] if i < len(id_parts) else []), (parts[i] if i < len(parts) else [])


class Mover:
    """The bounded moves of one (campaign, shard) ingress stream."""

    def __init__(self, r: AnyRedis, campaign: str, shard: int) -> None:
        self.scripts = scripts.of(r)
        self.ingress, self.analysis = keys.ingress_key(campaign, shard), keys.stream_key(campaign, shard)
        self.counters = keys.shuffle_metrics_key(campaign, shard)
        self.groups = keys.ingress_groups_key(campaign, shard)
        self.refs = (keys.sealed_keys_key(campaign, shard), keys.key_holds_key(campaign, shard))
        self.journal = keys.release_key(campaign, shard)
        self.staged = (self.journal, keys.release_batches_key(campaign, shard),
                       keys.release_ids_key(campaign, shard))

    def move(self, ids: list[bytes], reports: int, window: int, batches: list[tuple[bytes, int]],
             group: str = "", key_spec: str = "") -> str:
        """Move a release: ``"ok"``, ``"refused"`` (an entry was gone: nothing moved) or
        ``"busy"`` (another release holds the stream: nothing moved; ``settle`` it). ``group``:
        the ids' ingress group (``keys.ingress_group``), lowered by them with their deletion;
        ``key_spec``: their entries per analyzer key (``key_refs.spec``), lowered the same way."""
        if (len(ids) <= CALL_IDS and len(batches) <= CALL_BATCHES
                and sum(len(b) for b, _ in batches) <= CALL_BYTES):
            args: list[Any] = [len(ids), reports, window, len(batches), *ids]
            for data, count in batches:
                args += [data, count]
            return _status(self.scripts.call("SHUFFLE", keys=[self.ingress, self.analysis, self.counters,
                                                               self.journal, self.groups, *self.refs],
                                             args=[*args, group, key_spec]))
        rid = os.urandom(8).hex()
        begun = self.scripts.call("RELEASE_BEGIN", keys=self.staged,
                                  args=[rid, len(ids), len(batches), reports, window, STAGING_TTL_MS,
                                        group, key_spec])
        if _status(begun) != "ok":
            return "busy"
        for part_ids, part_batches in chunks(ids, batches):
            args = [rid, STAGING_TTL_MS, len(part_ids), *part_ids]
            for data, count in part_batches:
                args += [data, count]
            res = self.scripts.call("RELEASE_STAGE", keys=[*self.staged, self.ingress, self.counters],
                                    args=args)
            if _status(res) != "ok":
                self.abort(rid)
                return "refused"
        if _status(self.scripts.call("RELEASE_COMMIT", keys=self.staged, args=[rid])) != "ok":
            self.abort(rid)
            return "refused"
        self.complete()
        return "ok"

    def abort(self, rid: str = "") -> str:
        """Drop a staging release (``rid``, or whichever once it is idle): ``"ok"``, ``"committed"``,
        ``"active"`` or ``"gone"``."""
        return _status(self.scripts.call("RELEASE_ABORT", keys=self.staged,
                                         args=[rid, STAGING_TTL_MS, IDLE_MS]))

    def complete(self) -> str:
        """Run the steps of the stream's committed release until it is done: ``"done"``,
        ``"none"`` (no release) or ``"staging"`` (a release not committed yet)."""
        while True:
            res = self.scripts.call("RELEASE_STEP",
                                    keys=[*self.staged, self.ingress, self.analysis, self.counters,
                                          self.groups, *self.refs],
                                    args=[CALL_BATCHES, CALL_BYTES, CALL_IDS])
            status = _status(res)
            if status in ("done", "none", "staging"):
                return status

    def settle(self) -> str:
        """Whatever release holds the stream: complete it if committed, drop it if staging and
        idle. Returns ``"none"`` (the stream is free now) or ``"active"`` (another shuffler is
        staging one)."""
        status = self.complete()
        if status == "staging":
            aborted = self.abort()
            if aborted == "committed":
                self.complete()
            elif aborted == "active":
                return "active"
        return "none"


__all__ = ["CALL_BATCHES", "CALL_BYTES", "CALL_IDS", "Mover", "chunks"]
