"""The aggregator worker: drains the campaigns' report streams into accumulator state, exactly once.

Any number of workers may run at once (``ldptel aggregate``, see ``ldptel.aggregator.runners``):
they share consumer group ``keys.GROUP`` on every (campaign, shard) stream. Exactly-once design:
a commit (``store.commit``, script ``scripts.COMMIT``) touches the keys of one (campaign, shard):
the stream and its state hash share a hash tag. It (1) checks that every entry the worker decoded
is still pending *to this worker's consumer*, (2) checks that every state field it read still
exists, then (3) deletes those fields, writes one new ``acc:<window>:<uid>`` field per window
holding their sum plus the new entries, bumps the counters and (4) ``XACK``s the entries — or, if
a check fails, changes nothing. State fields are immutable (each has a fresh uid), so "the field
still exists" means "it still holds what I read": a set of fields is replaced by their sum at most
once, and the state of a window is always the sum of its fields. Which fields a commit folds in
is size-tiered (``store.fold_stored``): for the dense frequency states that is all of them.

Why nothing is lost or counted twice, wherever a worker or Redis dies:

- Before the script runs, nothing is written: the entries stay pending to the dead consumer and a
  later worker takes them over with ``XAUTOCLAIM`` once they are idle ``claim_idle_ms``.
- The script is atomic (also in the AOF), so state and XACK move together.
- A worker that was only slow, and whose entries another worker claimed meanwhile, fails check (1)
  and throws away its whole uncommitted delta; it then re-reads what is still pending to it.
  An entry is therefore added by exactly one commit: the one that acknowledged it.
- Two workers compacting the same window: the second fails check (2) and retries on fresh fields.
- Every consumer name is unique per process (``host:pid:random``).

Entries are read ``read_count`` per stream, grouped by their ``window`` field and decoded with the
campaign's accumulator (vectorized per batch); an entry of a window past the campaign's retention
is rejected (``ldptel.aggregator.retention``, which the upkeep also runs). On start a worker checks
the stored state of every campaign (``StateMismatch`` if it no longer fits the parameters), claims
entries of dead consumers, and first drains what is pending to itself; ``upkeep`` trims acknowledged
entries past retention and removes idle consumers that own nothing. Committed windows are published
by ``publish.Publisher``. Redis Cluster: new entries are read with one ``XREADGROUP`` per stream
(pipelined); when all are empty the worker blocks on one stream at a time, in turn, for at most
``CLUSTER_BLOCK_MS``. The estimate is the sum over shards of the committed states.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis as redis_lib
from redis.exceptions import ClusterDownError, SlotNotCoveredError

from ldptel import prom
from ldptel.aggregator import heartbeat, publish, retention, store, upkeep
from ldptel.aggregator import metrics as agg_metrics
from ldptel.aggregator.decoders import Accumulator
from ldptel.config import Campaign, Config
from ldptel.keys import ENTRY_BATCH, ENTRY_WINDOW, GROUP, stream_key
from ldptel.proto import ReportBatch
from ldptel.redis_client import AnyRedis, is_cluster

TRIM_INTERVAL_S = 10.0
PROGRESS_INTERVAL_S = 2.0
COMPACT_RETRIES = 3
ONCE_GIVE_UP_S = 60.0  # --once: give up when Redis stays unreachable this long
# errors after which the worker waits and retries (a cluster node down or slots not served)
UNAVAILABLE = (redis_lib.ConnectionError, redis_lib.TimeoutError, redis_lib.BusyLoadingError,
               ClusterDownError, SlotNotCoveredError)
CLUSTER_BLOCK_MS = 100  # Redis Cluster: longest block on one stream while all are empty
LOG = logging.getLogger("ldptel.aggregator")


@dataclass
class Slot:
    """One (campaign, shard) stream the worker consumes."""

    campaign: Campaign
    shard: int
    template: Accumulator
    history: bool = True  # entries may be pending to this consumer: read them before new ones

    def fresh(self) -> Accumulator:
        """An empty accumulator (sharing the template's mechanism object)."""
        return type(self.template)(self.template.mech)

    @property
    def stream(self) -> str:
        return stream_key(self.campaign.name, self.shard)


@dataclass
class DrainStats:
    entries: int = 0
    reports: int = 0
    rejected: int = 0
    commits: int = 0
    lost: int = 0  # commits refused because another worker had claimed an entry
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        dt = max(self.elapsed, 1e-9)
        return (f"{self.entries} entries, {self.reports} reports in {dt:.1f} s "
                f"({self.reports / dt:,.0f} reports/s)"
                + (f", {self.rejected} rejected" if self.rejected else ""))


@dataclass
class Backoff:
    """Wait before the next try while Redis is unavailable: 0.1 s, doubling up to 5 s."""

    delay: float = 0.1
    down_since: float | None = None

    def reset(self) -> None:
        self.delay, self.down_since = 0.1, None

    def down_for(self) -> float:
        """Seconds since the first failure of this outage (0 on its first failure)."""
        if self.down_since is None:
            self.down_since = time.monotonic()
        return time.monotonic() - self.down_since

    def next(self) -> float:
        wait, self.delay = self.delay, min(self.delay * 2, 5.0)
        return wait


def new_consumer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    """Consumes every campaign of ``config`` (a config has at least one). ``run()`` until stopped (or drained,
    with ``once``); ``step()`` does one read-decode-commit round."""

    def __init__(self, config: Config, r: AnyRedis, consumer: str | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.cfg = config.aggregator
        self.r = r
        self.consumer = consumer or new_consumer_name()
        # ``log`` (tests, the demo) replaces the ``ldptel.aggregator`` logger for info and warnings
        self.log: Callable[[str], None] = log or LOG.info
        self.warn: Callable[[str], None] = log or LOG.warning
        self.stats = DrainStats()
        self.slots: list[Slot] = []
        for camp in config.campaigns:
            template = store.new_accumulator(camp)
            self.slots.extend(Slot(camp, s, template) for s in range(camp.shards))
        self._ready = False  # groups created and stored state checked (setup() done)
        self._last_claim = 0.0
        self._last_trim = time.monotonic()
        self._marks = upkeep.DeliveryMarks(self.cfg.retention_seconds)
        self._cluster = is_cluster(r)
        self.publisher = publish.Publisher(r, self.cfg.publish_interval, config.campaigns)
        self._turn = 0  # Redis Cluster: which stream the next idle blocking read waits on
        self.committed_at: float | None = None  # epoch seconds of the last commit
        self.caught_up_at = time.time()  # of the last round that found nothing to do (or the start)
        self._pulse = heartbeat.Pulse(self.consumer)

    # --- setup ------------------------------------------------------------------------------
    def setup(self) -> None:
        """Create the groups, check the stored state, take over dead consumers' entries."""
        for slot in self.slots:
            try:
                self.r.xgroup_create(slot.stream, GROUP, id="0", mkstream=True)
            except redis_lib.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            store.check_state(self.r, slot.campaign, slot.shard, slot.template)
            slot.history = True
        self.claim_dead()
        self.remove_idle_consumers()

    def claim_dead(self) -> int:
        """Take over every entry pending for at least ``claim_idle_ms`` to any consumer."""
        claimed = 0
        for slot in self.slots:
            n = upkeep.claim_idle(self.r, slot.stream, self.consumer, self.cfg.claim_idle_ms)
            if n:
                claimed += n
                slot.history = True
        self._last_claim = time.monotonic()
        if claimed:
            self.log(f"aggregate: claimed {claimed} entries left pending by other consumers")
        return claimed

    def remove_idle_consumers(self) -> None:
        for slot in self.slots:
            upkeep.remove_idle_consumers(self.r, slot.stream, self.consumer, self.cfg.claim_idle_ms)

    def trim(self) -> int:
        """Trim acknowledged entries delivered at least ``retention_seconds`` ago
        (``upkeep.DeliveryMarks``); returns how many."""
        now = time.monotonic()
        return sum(upkeep.trim(self.r, slot.stream, self._marks, now) for slot in self.slots)

    # --- main loop --------------------------------------------------------------------------
    def run(self, once: bool = False, stop: threading.Event | None = None,
            progress: bool = False) -> DrainStats:
        """Consume until ``stop`` is set (or, with ``once``, until no entry is left that this
        worker may take). Every Redis failure goes through ``recover`` (commits are atomic, so a
        dropped connection at any point is harmless)."""
        stop = stop or threading.Event()
        self.stats = DrainStats()
        self._ready = False
        backoff = Backoff()
        last_progress, last_entries = time.monotonic(), 0
        while not stop.is_set():
            try:
                if not self._ready:
                    self.setup()
                    self._ready = True
                n = self.step(block_ms=None if once else self.cfg.block_ms)
                backoff.reset()
                drained = n == 0 and not any(slot.history for slot in self.slots)
                self.caught_up_at = time.time() if drained else self.caught_up_at
                self.housekeeping()
                self.publisher.due(drained, everything=once and drained)
                if self._pulse.tick(self.r, self.committed_at, self.caught_up_at):
                    prom.update_process_gauges("aggregator")
                if once and drained:
                    break
            except (*UNAVAILABLE, redis_lib.ResponseError) as exc:
                stop.wait(self.recover(exc, backoff, once))
                continue
            if (progress and time.monotonic() - last_progress > PROGRESS_INTERVAL_S
                    and self.stats.entries != last_entries):
                self.log(f"aggregate: {self.stats.line()}")
                last_progress, last_entries = time.monotonic(), self.stats.entries
        if self._ready:
            try:
                self.publisher.due(drained=True, everything=True)  # what it committed, published
                self.trim()
                heartbeat.forget(self.r, self.consumer)
            except redis_lib.RedisError:
                pass
        return self.stats

    def recover(self, exc: Exception, backoff: Backoff, once: bool) -> float:
        """The one recovery path of ``run``: seconds to wait before the next round, or raise.

        - Redis unavailable (``UNAVAILABLE``): every slot re-reads what is pending to it first;
          wait with exponential backoff (with ``once``, give up after ``ONCE_GIVE_UP_S``).
        - a consumer group vanished (``NOGROUP``: Redis data reset): set up again at once.
        - any other error: raised.
        """
        if isinstance(exc, UNAVAILABLE):
            if once and backoff.down_for() > ONCE_GIVE_UP_S:
                raise exc
            wait = backoff.next()
            self.warn(f"aggregate: redis unavailable ({exc}); retrying in {wait:.1f} s")
            for slot in self.slots:
                slot.history = True
            return wait
        if "NOGROUP" in str(exc):
            self.warn("aggregate: a consumer group vanished (Redis data reset?); setting up again")
            self._ready = False
            return 0.0
        raise exc

    def housekeeping(self) -> None:
        now = time.monotonic()
        if now - self._last_claim > min(max(self.cfg.claim_idle_ms / 2000.0, 0.05), 30.0):
            self.claim_dead()
        if now - self._last_trim > TRIM_INTERVAL_S:
            self.trim()
            self.remove_idle_consumers()
            retention.expire_all(self.r, self.config.campaigns)
            self._last_trim = now

    def step(self, block_ms: int | None = None) -> int:
        """One round: entries pending to this consumer first, else new ones (blocking up to
        ``block_ms``). Returns the number of entries committed."""
        done = 0
        for slot in self.slots:
            if slot.history:
                pending: Any = self.r.xreadgroup(GROUP, self.consumer, {slot.stream: "0"},
                                                 count=self.cfg.read_count)
                entries = pending[0][1] if pending else []
                if not entries:
                    slot.history = False
                else:
                    done += self.process(slot, entries)
        if done:
            return done
        by_stream = {slot.stream: slot for slot in self.slots}
        resp: Any
        if self._cluster:
            resp = self.read_new_cluster(block_ms)
        else:
            resp = self.r.xreadgroup(GROUP, self.consumer, {k: ">" for k in by_stream},
                                     count=self.cfg.read_count, block=block_ms)
        for key, entries in resp or []:
            key = key.decode() if isinstance(key, bytes) else key
            if entries:
                done += self.process(by_stream[key], entries)
        return done

    def read_new_cluster(self, block_ms: int | None) -> list:
        """New entries of every stream on a Redis Cluster: one XREADGROUP per stream, pipelined;
        if all are empty and ``block_ms`` is set, block on one stream (in turn) for a short time."""
        pipe = self.r.pipeline(transaction=False)
        for slot in self.slots:
            pipe.xreadgroup(GROUP, self.consumer, {slot.stream: ">"}, count=self.cfg.read_count)
        new = [item for res in pipe.execute() for item in (res or [])]
        if new or not block_ms:
            return new
        slot = self.slots[self._turn % len(self.slots)]
        self._turn += 1
        resp: Any = self.r.xreadgroup(GROUP, self.consumer, {slot.stream: ">"}, count=self.cfg.read_count,
                                      block=min(block_ms, CLUSTER_BLOCK_MS))
        return resp or []

    # --- decode and commit ------------------------------------------------------------------
    def decode(self, slot: Slot, entries: list) -> tuple[dict[int, Accumulator], dict[int, int], int]:
        """Entries → (accumulator delta per window, entries per window, rejected entries).

        An entry that does not decode is counted as rejected, logged, and acknowledged with the
        rest (it stays in the stream until retention trims it)."""
        deltas: dict[int, Accumulator] = {}
        n_entries: dict[int, int] = {}
        good: dict[int, list[ReportBatch]] = {}
        rejected = 0
        for eid, fields in entries:
            if not fields:  # pending entry whose data is gone (cannot happen with our trimming)
                rejected += 1
                self.warn(f"aggregate: {slot.stream} entry {eid!r} has no data; skipped")
                continue
            try:
                window = int(fields[ENTRY_WINDOW])
                batch = ReportBatch.FromString(fields[ENTRY_BATCH])
            except Exception as exc:  # KeyError, ValueError, protobuf's DecodeError
                rejected += 1
                self.warn(f"aggregate: {slot.stream} entry {eid!r} unreadable ({exc}); skipped")
                continue
            if retention.expired(slot.campaign, window):
                rejected += 1  # a window past retention is never counted (nor brought back)
                continue
            acc = deltas.get(window)
            if acc is None:
                acc = deltas[window] = slot.fresh()
            try:
                acc.add(batch)
            except Exception as exc:  # a bad batch must not stop the worker
                rejected += 1
                self.warn(f"aggregate: {slot.stream} entry {eid!r} does not decode ({exc}); skipped")
                # add() may have changed part of the state: rebuild this window from good batches
                deltas[window] = slot.fresh()
                for b in good.get(window, []):
                    deltas[window].add(b)
                continue
            good.setdefault(window, []).append(batch)
            n_entries[window] = n_entries.get(window, 0) + 1
        return deltas, n_entries, rejected

    def process(self, slot: Slot, entries: list) -> int:
        """Decode and commit ``entries`` (all pending to this consumer). On a lost entry the
        delta is dropped and the slot re-reads what is still pending to it."""
        ids = [eid for eid, _ in entries]
        t0 = time.perf_counter()
        deltas, n_entries, rejected = self.decode(slot, entries)
        reports = sum(acc.n for acc in deltas.values())
        t1 = time.perf_counter()
        if not self.commit(slot, ids, deltas, n_entries, rejected):
            self.stats.lost += 1
            slot.history = True
            return 0
        self.publisher.note(slot.campaign, *deltas)
        self.committed_at = time.time()
        agg_metrics.observe(slot.campaign.name, len(ids), reports, rejected, t1 - t0,
                            time.perf_counter() - t1)
        self.stats.entries += len(ids)
        self.stats.reports += reports
        self.stats.rejected += rejected
        self.stats.commits += 1
        return len(ids)

    def commit(self, slot: Slot, ids: list, deltas: dict[int, Accumulator], n_entries: dict[int, int],
               rejected: int) -> bool:
        """Merge ``deltas`` into the stored state and acknowledge ``ids``, atomically
        (``store.commit``), folding in the stored fields ``store.fold_stored`` picks.

        Returns False (nothing written) if an entry is no longer pending to this consumer."""
        for attempt in range(COMPACT_RETRIES + 1):
            totals: dict[int, Accumulator] = deltas
            replaced: list[bytes] = []
            if attempt < COMPACT_RETRIES and deltas:
                totals, replaced = store.fold_stored(self.r, slot.campaign, slot.shard, deltas, slot.template)
            status = store.commit(self.r, slot.campaign, slot.shard, self.consumer, ids, replaced, totals,
                                  deltas, n_entries, rejected)
            if status == b"ok":
                return True
            if status == b"lost":
                return False
            # b"stale": another worker compacted this window meanwhile; read again
        raise RuntimeError("commit without compaction cannot be stale")  # pragma: no cover
