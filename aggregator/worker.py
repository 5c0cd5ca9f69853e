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
``slots.CLUSTER_BLOCK_MS``. The estimate is the sum over shards of the committed states.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import redis as redis_lib

from ldptel.aggregator import metrics as agg_metrics
from ldptel.aggregator import publish, retention, store, upkeep
from ldptel.aggregator.decoders import Accumulator
from ldptel.aggregator.keyring import Keyring
from ldptel.aggregator.opening import Opener
from ldptel.aggregator.sealed import SealedReleases
from ldptel.aggregator.slots import ClusterReads, Parsed, Slot, build_slots, every_version, split_by_version
from ldptel.campaigns.config import Campaign, Config
from ldptel.keys import GROUP
from ldptel.ops import prom
from ldptel.privacy.modes import is_shuffled
from ldptel.store import heartbeat, registry
from ldptel.store.redis_client import AnyRedis, is_cluster
from ldptel.store.runner import UNAVAILABLE, Backoff, DrainStats, retry_wait

TRIM_INTERVAL_S = 10.0
PROGRESS_INTERVAL_S = 2.0
COMPACT_RETRIES = 3
KEYS_RETRY_LOG_S = 300.0  # a keys directory that keeps failing is logged again this often
LOG = logging.getLogger("ldptel.aggregator")


def new_consumer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    """Consumes every campaign of ``config`` (a config has at least one). ``run()`` until stopped (or drained,
    with ``once``); ``step()`` does one read-decode-commit round."""

    def __init__(self, config: Config, r: AnyRedis, consumer: str | None = None,
                 log: Callable[[str], None] | None = None, registry_r: AnyRedis | None = None) -> None:
        """``registry_r``: the client that reads the campaign registry (``ldptel.store.acl``: the
        ``reader`` role, when ``r`` is the ``aggregator`` role, which holds no registry key);
        default ``r``."""
        self.live = registry.Live(config, registry_r or r)  # campaign changes without a restart
        self.cfg = config.aggregator
        self.r = r
        self.consumer = consumer or new_consumer_name()
        # ``log`` (tests, the demo) replaces the ``ldptel.aggregator`` logger for info and warnings
        self.log: Callable[[str], None] = log or LOG.info
        self.warn: Callable[[str], None] = log or LOG.warning
        self.stats = DrainStats()
        self.slots: list[Slot] = build_slots(config)
        self._ready = False  # groups created and stored state checked (setup() done)
        self._read = 0  # new entries the last round read (``step``)
        self._last_claim = 0.0
        self._last_trim = time.monotonic()
        self._marks = upkeep.DeliveryMarks(self.cfg.retention_seconds)
        self._cluster = is_cluster(r)
        self.publisher = publish.Publisher(r, self.cfg.publish_interval, every_version(config),
                                           shuffled=config.shuffler.enabled)
        self._cluster_reads = ClusterReads()
        self.committed_at: float | None = None  # epoch seconds of the last commit
        self.caught_up_at = time.time()  # of the last round that found nothing to do (or the start)
        self._pulse = heartbeat.Pulse(self.consumer)
        self.keyring = Keyring(config.analyzer)  # campaigns in a shuffled mode: ``aggregator.sealed``
        self.keys_error: str | None = None  # why the keys directory failed (``ensure_keys``)
        self.opener = Opener(config.analyzer.open_processes)  # a large release opens on every core
        self._keys_logged = 0.0
        self.sealed = SealedReleases(
            r, self.consumer, self.cfg.claim_idle_ms / 1000, self.keyring.key, lambda msg: self.warn(msg),
            reject=lambda slot, version, ids: self.commit_version(slot, version, [], ids),
            commit=self.commit_release, forget_at=self.keyring.forget_at,
            open_keyed=self.opener.open_keyed)

    @property
    def config(self) -> Config:
        """The campaign registry's current snapshot (``registry.Live``)."""
        return self.live.config

    # --- setup ------------------------------------------------------------------------------
    def setup(self) -> None:
        """Load the campaign registry, create the groups, move old counters out of the state
        (``store.move_counters``), check the stored state, take over dead consumers' entries."""
        self.live.refresh(force=True)
        self.reload()
        self.ensure_keys()
        for slot in self.slots:
            self.create_group(slot)
            for v, camp in slot.versions.items():
                store.move_counters(self.r, camp, slot.shard)  # state written before counts_key
                store.check_state(self.r, camp, slot.shard, slot.templates[v])
            slot.history = True
        self.claim_dead()
        self.remove_idle_consumers()

    def create_group(self, slot: Slot) -> None:
        try:
            self.r.xgroup_create(slot.stream, GROUP, id="0", mkstream=True)
        except redis_lib.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def reload(self) -> None:
        """Take the config's campaigns as they are now (``registry.Live`` changed them): new
        campaigns get slots (and their groups), changed ones their new versions."""
        streams = {slot.stream for slot in self.slots}
        self.slots = build_slots(self.config, self.slots)
        self.publisher.campaigns = every_version(self.config)
        for slot in self.slots:
            if slot.stream not in streams:
                self.create_group(slot)

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
                elif self.live.refresh():
                    self.reload()
                # a round at least every second: campaign changes are seen within 2 s
                n = self.step(block_ms=None if once else min(self.cfg.block_ms, 1000))
                backoff.reset()
                # a round that read only parts of a release larger than one read (held until
                # complete: ``aggregator.sealed``) commits nothing, yet is not drained
                drained = n == 0 and not self._read and not any(slot.history for slot in self.slots)
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
        self.opener.close()
        return self.stats

    def recover(self, exc: Exception, backoff: Backoff, once: bool) -> float:
        """The one recovery path of ``run``: seconds to wait before the next round, or raise.

        - Redis unavailable (``UNAVAILABLE``): every slot re-reads what is pending to it first;
          wait with exponential backoff (with ``once``, give up after ``ONCE_GIVE_UP_S``).
        - a consumer group vanished (``NOGROUP``: Redis data reset): set up again at once.
        - any other error: raised.
        """
        if isinstance(exc, UNAVAILABLE):
            wait = retry_wait(exc, backoff, once, self.warn, "aggregate")
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
            retention.expire_all(self.r, every_version(self.config))
            self.ensure_keys()
            self._last_trim = now

    def ensure_keys(self) -> None:
        """Rotate and publish the analyzer keys when any campaign is in a shuffled mode. A keys
        directory this worker cannot write (a read-only file system, a path under a file, no
        permission) never stops it: the local campaigns go on being aggregated, and the shuffled
        ones are reported as failing — logged as an error (again every ``KEYS_RETRY_LOG_S``),
        ``ldptel_aggregator_analyzer_keys_failing`` = 1 — until the directory works again; their
        releases wait in the streams for a worker that holds their key."""
        shuffled = sorted({c.name for c in every_version(self.config) if is_shuffled(c)})
        if not shuffled:
            return
        streams = sorted({(c.name, s) for c in every_version(self.config) if is_shuffled(c)
                          for s in range(c.shards)})
        try:
            self.keyring.ensure(self.r, streams=streams)
        except OSError as exc:
            agg_metrics.ANALYZER_KEYS_FAILING.set(1)
            now = time.monotonic()
            if self.keys_error is None or now - self._keys_logged >= KEYS_RETRY_LOG_S:
                LOG.error("aggregate: cannot write the analyzer keys in %s (%s): the shuffled campaigns "
                          "%s are not aggregated (their releases wait in the streams); the local ones "
                          "are. Give [analyzer] keys_dir (or $LDPTEL_DATA_DIR) a writable directory "
                          "(docs/operations.md#analyzer-keys)", self.keyring.dir, exc, ", ".join(shuffled))
                self._keys_logged = now
            self.keys_error = f"{self.keyring.dir}: {exc}"
            return
        if self.keys_error is not None:
            LOG.warning("aggregate: the analyzer keys in %s work again", self.keyring.dir)
        self.keys_error = None
        agg_metrics.ANALYZER_KEYS_FAILING.set(0)

    def step(self, block_ms: int | None = None) -> int:
        """One round: entries pending to this consumer first, else new ones (blocking up to
        ``block_ms``). Returns the number of entries committed."""
        done = self.sealed.poll() if self.sealed.partial else 0  # releases split between workers
        self._read = 0  # new entries this round (``run``: a round of parts alone is not drained)
        for slot in self.slots:
            if slot.history:
                pending: Any = self.r.xreadgroup(GROUP, self.consumer, {slot.stream: "0"},
                                                 count=self.cfg.read_count)
                entries = pending[0][1] if pending else []
                if not entries:
                    slot.history = False
                else:
                    got = self.process(slot, entries)
                    done += got
                    if got == 0 and len(entries) < self.cfg.read_count:
                        slot.history = False  # only parts of sealed releases, held until complete
        if done:
            return done
        by_stream = {slot.stream: slot for slot in self.slots}
        resp: Any
        if self._cluster:
            resp = self._cluster_reads.read(self.r, self.consumer, self.slots, self.cfg.read_count, block_ms)
        else:
            resp = self.r.xreadgroup(GROUP, self.consumer, {k: ">" for k in by_stream},
                                     count=self.cfg.read_count, block=block_ms)
        for key, entries in resp or []:
            key = key.decode() if isinstance(key, bytes) else key
            if entries:
                self._read += len(entries)
                done += self.process(by_stream[key], entries)
        return done

    # --- decode and commit ------------------------------------------------------------------
    def decode(self, slot: Slot, version: int, items: list[Parsed]
               ) -> tuple[dict[int, Accumulator], dict[int, int], int]:
        """One version's entries → (accumulator delta per window, entries per window, rejected
        entries). An entry that does not decode is counted as rejected, logged, and acknowledged
        with the rest (it stays in the stream until retention trims it)."""
        deltas: dict[int, Accumulator] = {}
        n_entries: dict[int, int] = {}
        good: dict[int, list[Any]] = {}
        rejected = 0
        for eid, window, batch in items:
            if retention.expired(slot.campaign, window):
                rejected += 1  # a window past retention is never counted (nor brought back)
                continue
            acc = deltas.get(window)
            if acc is None:
                acc = deltas[window] = slot.fresh(version)
            try:
                acc.add(batch)
            except Exception as exc:  # noqa: BLE001 - a bad batch must not stop the worker
                rejected += 1
                self.warn(f"aggregate: {slot.stream} entry {eid!r} does not decode ({exc}); skipped")
                # add() may have changed part of the state: rebuild this window from good batches
                deltas[window] = slot.fresh(version)
                for b in good.get(window, []):
                    deltas[window].add(b)
                continue
            good.setdefault(window, []).append(batch)
            n_entries[window] = n_entries.get(window, 0) + 1
        return deltas, n_entries, rejected

    def process(self, slot: Slot, entries: list[Any]) -> int:
        """Decode and commit ``entries`` (all pending to this consumer), one commit per campaign
        version (each acknowledges its own entries; unreadable entries and those of a version
        this worker does not know go with the latest version's, counted as rejected). On a lost
        entry that version's delta is dropped and the slot re-reads what is still pending to it.
        Returns the entries committed. Its time counts as busy (``DrainStats.busy``: the rate
        the worker logs is over the time it worked, not the time it waited for entries)."""
        t0 = time.monotonic()
        try:
            return self._process(slot, entries)
        finally:
            self.stats.busy += time.monotonic() - t0

    def _process(self, slot: Slot, entries: list[Any]) -> int:
        by_version, bad = split_by_version(entries, self.warn, slot.stream)
        for v in [v for v in by_version if v not in slot.versions and not self.knows(slot, v)]:
            self.warn(f"aggregate: {slot.stream}: {len(by_version[v])} entries of unknown "
                      f"version {v} of {slot.campaign.name!r}; skipped")
            bad += [eid for eid, _, _ in by_version.pop(v)]
        latest = max(slot.versions)
        if bad or not by_version:
            by_version.setdefault(latest, [])
        done = 0
        for v, items in sorted(by_version.items()):
            extra = bad if v == latest else []
            if is_shuffled(slot.versions[v]):  # whole sealed releases (``aggregator.sealed``)
                done += self.commit_version(slot, v, [], extra) if extra else 0
                done += self.sealed.take(slot, v, items)
            else:
                done += self.commit_version(slot, v, items, extra)
        return done

    def knows(self, slot: Slot, version: int) -> bool:
        """Whether ``version`` of the slot's campaign is known after reloading the registry
        (the collector stored a batch of a version created since the last reload)."""
        if self.live.refresh(force=True):
            self.reload()
        return version in slot.versions

    def commit_version(self, slot: Slot, version: int, items: list[Parsed], bad: list[bytes]) -> int:
        """Decode and commit one version's ``items``, acknowledging ``bad`` entries with them as
        rejected. Returns the entries committed (0 if lost)."""
        ids = [eid for eid, _, _ in items] + bad
        if not ids:
            return 0
        camp = slot.versions[version]
        t0 = time.perf_counter()
        deltas, n_entries, rejected = self.decode(slot, version, items)
        rejected += len(bad)
        reports = sum(acc.n for acc in deltas.values())
        t1 = time.perf_counter()
        if not self.commit(slot, camp, ids, deltas, n_entries, rejected):
            self.stats.lost += 1
            slot.history = True
            return 0
        self.after_commit(camp, list(deltas), len(ids), reports, rejected, t1 - t0, time.perf_counter() - t1)
        return len(ids)

    def commit_release(self, slot: Slot, camp: Campaign, window: int, ids: list[bytes], acc: Accumulator,
                       rejected: int, extra: list[Any], decode_s: float) -> int:
        """Commit one whole sealed release of ``window`` (``aggregator.sealed``); the entries
        committed, 0 when lost."""
        t1 = time.perf_counter()
        if not self.commit(slot, camp, ids, {window: acc}, {window: len(ids)}, rejected, extra):
            self.stats.lost += 1
            slot.history = True
            return 0
        self.after_commit(camp, [window], len(ids), acc.n, rejected, decode_s, time.perf_counter() - t1)
        return len(ids)

    def after_commit(self, camp: Campaign, windows: list[int], entries: int, reports: int, rejected: int,
                     decode_s: float, commit_s: float) -> None:
        """Note the committed windows for publication and count what was committed."""
        self.publisher.note(camp, *windows)
        self.committed_at = time.time()
        agg_metrics.observe(camp.name, entries, reports, rejected, decode_s, commit_s)
        self.stats.entries += entries
        self.stats.reports += reports
        self.stats.rejected += rejected
        self.stats.commits += 1

    def commit(self, slot: Slot, camp: Campaign, ids: list[Any], deltas: dict[int, Accumulator],
               n_entries: dict[int, int], rejected: int, extra: list[Any] | None = None) -> bool:
        """Merge ``deltas`` into version ``camp``'s stored state and acknowledge ``ids``,
        atomically (``store.commit``), folding in the stored fields ``store.fold_stored`` picks.

        Returns False (nothing written) if an entry is no longer pending to this consumer."""
        template = slot.templates[camp.version]
        for attempt in range(COMPACT_RETRIES + 1):
            totals: dict[int, Accumulator] = deltas
            replaced: list[bytes] = []
            if attempt < COMPACT_RETRIES and deltas:
                totals, replaced = store.fold_stored(self.r, camp, slot.shard, deltas, template)
            status = store.commit(self.r, camp, slot.shard, self.consumer, ids, replaced, totals,
                                  deltas, n_entries, rejected, extra)
            if status == b"ok":
                return True
            if status == b"lost":
                return False
            # b"stale": another worker compacted this window meanwhile; read again
        raise RuntimeError("commit without compaction cannot be stale")  # pragma: no cover

