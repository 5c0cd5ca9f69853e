"""The shuffler: moves reports from the collector's ingress streams to the analysis streams the
aggregator reads, permuted across batches and re-packed, so that nothing the aggregator (or a
reader of Redis) sees links reports to each other, to a batch id or to a receive time.

Per (campaign, shard) a shuffler (``ldptel shuffle``, or ``ldptel serve``'s child):

1. holds a lease (``keys.shuffle_lease_key``, ``scripts.LEASE``: ``SET PX``, renewed each round);
   while another shuffler holds it, this one skips the stream. Safety does not depend on it.
2. reads the ingress stream (``keys.ingress_key``) after the last entry it read, ``READ_COUNT``
   entries per XRANGE, and holds the entries in memory grouped by (campaign version, window, cell)
   (``held.Held``; sealed envelopes of every analyzer key in one group); an entry of a version
   this process does not know is held aside until the registry (``registry.Live``) knows it
   (logged once). A shuffled campaign's sealed envelopes read on a shard ≠ 0 are handed to shard
   0, which releases them (``shuffler.handoff``).
3. releases a group when it holds ≥ ``shuffle_min_reports`` reports, its first report waited
   ``shuffle_max_delay``, it holds ``[shuffler] max_held_reports``, or on ``once`` (a drain) — a
   sealed group of a shuffled campaign once, at its window's close (``shuffler.sealed.due``; early
   releases counted and, when forced by a memory bound, logged as a warning: ``early``):
   ``repack.repack`` (one uniform permutation of all the group's reports, re-packed without batch
   ids) then ``scripts.SHUFFLE``, which writes the new batches to the analysis stream
   (``keys.stream_key``) and deletes the ingress entries in one atomic step — refusing, and
   writing nothing, if any of those entries is already gone (another shuffler moved it). A refused
   stream's held state is dropped and the stream read again from its start.

Exactly once: a report is in ingress until the one SHUFFLE that moves it, and that script checks
that every entry it deletes still exists. A shuffler that dies loses only its memory.

Each round ends with a heartbeat (``keys.SHUFFLER_HEARTBEAT_KEY``, at most every
``BEAT_INTERVAL_S``) whose "caught up" time is the end of the last round that left nothing overdue:
``/healthz`` turns 503 when it is older than the smallest ``shuffle_max_delay``.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis as redis_lib

from ldptel import key_signing, keys, sealing
from ldptel.campaigns.config import Campaign, Config
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.randomness import OS_RANDOM, OsRandom
from ldptel.ops import prom
from ldptel.privacy.modes import ShuffledFakes, is_shuffled
from ldptel.proto import ReportBatch, SealedBatch, batch_version
from ldptel.shuffler import fakes, handoff, metrics, release, sealed
from ldptel.shuffler.held import Group, Held, cell_of
from ldptel.shuffler.release import Mover
from ldptel.shuffler.repack import repack
from ldptel.shuffler.sealer import Pending, Sealer
from ldptel.store import heartbeat, key_refs, registry, scripts
from ldptel.store.redis_client import AnyRedis
from ldptel.store.runner import UNAVAILABLE, Backoff, retry_wait

READ_COUNT = 1000  # ingress entries per XRANGE
READ_PAGES = 20  # XRANGEs per stream and round (a round then releases what is due)
ANSWER_INTERVAL_S = 5.0  # the keyring's questions about analyzer keys (``key_refs.answer``), per stream
BEAT_INTERVAL_S = 0.25  # the shuffler's heartbeat (``/healthz``: a hung shuffler shows within 2 × delay)
LOG = logging.getLogger("ldptel.shuffler")
Slot = tuple[str, int, int, tuple[tuple[str, str], ...]]  # (campaign, version, window, cell)


def sealing_slot(campaign: str, group: Group) -> Slot:
    """Where a group's fakes being sealed are kept (``Shuffler._sealing``): one set per
    (campaign, version, window, cell), drawn once and used by the group's one release."""
    return campaign, group.version, group.window, group.cell


@dataclass
class ShuffleStats:
    """What a shuffler moved since it started (its log line); the totals of every shuffler are
    the Redis counters ``keys.shuffle_metrics_key``."""

    ingress_batches: int = 0
    ingress_reports: int = 0
    analysis_batches: int = 0
    releases: int = 0
    refused: int = 0

    def line(self) -> str:
        return (f"{self.releases} releases: {self.ingress_batches} ingress batches, "
                f"{self.ingress_reports} reports → {self.analysis_batches} analysis batches"
                + (f", {self.refused} refused" if self.refused else ""))


class Shuffler:
    """Shuffles every campaign of ``config``; ``run()`` until stopped (or drained, with ``once``),
    ``step()`` does one round over every stream."""

    def __init__(self, config: Config, r: AnyRedis, log: Callable[[str], None] | None = None,
                 registry_r: AnyRedis | None = None,
                 rng: np.random.Generator | OsRandom = OS_RANDOM,
                 clock: Callable[[], float] | None = None) -> None:
        """``clock``: epoch seconds (default ``time.time``), for the windows' close (``sealed.due``,
        ``handoff.mark``): a test's clock past a window's close stands in for waiting for it.
        ``registry_r``: the client that reads the campaign registry (``ldptel.store.acl``: the
        ``reader`` role, when ``r`` is the ``shuffler`` role, which holds no registry key); default
        ``r``. ``rng``: the randomness of the shuffler's own fakes (OS randomness; a seeded
        generator in tests only)."""
        self.live = registry.Live(config, registry_r or r)
        self.keys_r = registry_r or r  # reads the published analyzer keys (the reader role: read only)
        self.rng = rng
        self.sealer = Sealer(config.shuffler.fake_processes)  # its fakes are sealed on every core
        # fakes being sealed: ``sealing_slot`` → (key id, sealing, perf_counter at draw)
        self._sealing: dict[Slot, tuple[int, Pending, float]] = {}
        self.clock: Callable[[], float] = clock or (lambda: time.time())  # looked up per call
        self._unpublished: set[int] = set()  # analyzer keys warned of (not published)
        self.cfg = config.shuffler
        self.r = r
        self.owner = secrets.token_hex(8)
        self.log: Callable[[str], None] = log or LOG.info
        self.warn: Callable[[str], None] = log or LOG.warning
        self.held: dict[tuple[str, int], Held] = {}
        self.stats = ShuffleStats()
        self.lease_ms = max(5000, 10 * self.cfg.poll_ms)
        self._warned: set[tuple[str, int]] = set()
        self._mechanisms: dict[tuple[str, int], tuple[Campaign, Mechanism]] = {}
        self._versions: dict[tuple[str, int], Campaign | None] = {}
        self._versions_of: Config | None = None
        self._scripts = scripts.of(r)
        self._answered: dict[tuple[str, int], float] = {}  # stream → monotonic s of its last answer
        self.pulse = heartbeat.Pulse(f"{socket.gethostname()}:{os.getpid()}:{self.owner}",
                                     keys.SHUFFLER_HEARTBEAT_KEY, BEAT_INTERVAL_S)
        self.caught_up: float | None = None  # epoch s: the end of the last round that left nothing overdue

    @property
    def config(self) -> Config:
        """The campaign registry's current snapshot (``registry.Live``)."""
        return self.live.config

    # --- the loop ---------------------------------------------------------------------------
    def run(self, once: bool = False, stop: threading.Event | None = None) -> ShuffleStats:
        """Shuffle until ``stop`` is set, or with ``once`` until the ingress streams are empty
        (everything read is released whatever the release rules say). What is held when it stops
        stays in ingress. Redis unavailable: retry with backoff (``once``: give up after
        ``ONCE_GIVE_UP_S``)."""
        stop = stop or threading.Event()
        backoff = Backoff()
        first, gauges_at = True, 0.0
        while not stop.is_set():
            try:
                if self.live.refresh(force=first):
                    self.retry_unknown()
                first = False
                moved = self.step(once=once)
                if not self.overdue():
                    self.caught_up = time.time()
                self.pulse.tick(self.r, None, self.caught_up)
                backoff.reset()
            except UNAVAILABLE as exc:
                wait = retry_wait(exc, backoff, once, self.warn, "shuffle")
                for held in self.held.values():
                    held.reset()
                stop.wait(wait)
                continue
            if once and moved == 0 and not self.holding():
                break
            if time.monotonic() - gauges_at >= 1.0:
                prom.update_process_gauges("shuffler")
                gauges_at = time.monotonic()
            if not once:
                stop.wait(self.cfg.poll_ms / 1000)
        self.give_up_leases()
        self.sealer.close()
        try:
            heartbeat.forget(self.r, self.pulse.consumer, keys.SHUFFLER_HEARTBEAT_KEY)
        except redis_lib.RedisError:
            pass  # pruned after a day
        return self.stats

    def holding(self) -> bool:
        """Whether groups are held that a drain releases (sealed groups below ``batch_min`` wait
        in ingress: ``shuffler.sealed``)."""
        return any(not g.sealed for h in self.held.values() for g in h.groups.values())

    def overdue(self) -> bool:
        """Whether a held group is past its release time (a release was refused, or failed); a
        sealed group waiting for ``batch_min`` devices is not (``shuffler.sealed.due``), nor one whose
        fakes are being sealed on the pool (``fakes``: in progress, the loop going on)."""
        now = time.monotonic()
        for held in self.held.values():
            latest = self.config.campaign(held.campaign)
            if latest is None:
                continue
            marks: dict[int, int] | None = None
            for g in held.groups.values():
                if g.sealed:
                    if sealing_slot(held.campaign, g) in self._sealing:
                        continue
                    camp = self.config.campaign_version(held.campaign, g.version) or latest
                    if marks is None:
                        marks = handoff.marks(self.r, held.campaign) if camp.shards > 1 else {}
                    if sealed.due(camp, g.window, g.reports, self.cfg.max_held_reports, False,
                                  now=self.clock(), settled=handoff.settled(marks, camp.shards, g.window,
                                                                            camp.window_seconds)):
                        return True
                elif g.due(latest, self.cfg.max_held_reports, now):
                    return True
        return False

    def step(self, once: bool = False) -> int:
        """One round: per stream, renew the lease, read new ingress entries, release what is due
        (everything with ``once``). Returns the ingress entries read or released."""
        done = 0
        for camp in list(self.config.campaigns):
            for shard in reversed(range(camp.shards)):  # shard 0 last: it gets this round's handoffs
                held = self.held.get((camp.name, shard))
                if held is None:
                    held = self.held[camp.name, shard] = Held(camp.name, shard)
                if not self.take_lease(held) and not once:
                    held.reset()  # another shuffler works on it; read again if we get it back
                    continue
                if not held.settled:  # a release left by a shuffler that died (or was refused)
                    held.settled = Mover(self.r, camp.name, shard).settle() == "none"
                done += self.read(held)
                if held.outgoing or (held.read_all and shard != handoff.OWNER):
                    self.hand_off(camp, held)
                done += self.release_due(camp, held, once, drained=once and self.drained(camp))
                self.answer_keyring(camp.name, shard)
        return done

    def drained(self, camp: Campaign) -> bool:
        """Whether this round read every shard of ``camp`` to its end and handed all of it off (a
        drain releases a sealed group only then: one release of all it holds, never one per
        ``READ_PAGES`` of reading; shard 0 is visited last)."""
        for s in range(camp.shards):
            h = self.held.get((camp.name, s))
            if h is None or not h.read_all or h.outgoing:
                return False
        return True

    def hand_off(self, camp: Campaign, held: Held) -> None:
        """Hand the sealed envelopes read on a shard ≠ 0 to shard 0 (``shuffler.handoff``); once
        a read reached the stream's end with all of it handed off, mark the shard settled up to
        that read's start. A refused handoff (a journaled release holds the stream): read again."""
        if held.outgoing:
            if not handoff.hand_off(self.r, camp, held.shard, held.outgoing):
                held.reset()
                return
            held.outgoing.clear()
        if held.read_all and is_shuffled(camp):
            handoff.mark(self.r, camp, held.shard, held.read_start)

    def answer_keyring(self, campaign: str, shard: int) -> None:
        """Answer the aggregator keyring's questions about the stream (``key_refs.answer``: which
        analyzer keys past their grace no ingress entry is sealed to any more), at most every
        ``ANSWER_INTERVAL_S`` per stream, after this round's releases."""
        now = time.monotonic()
        if now - self._answered.get((campaign, shard), -ANSWER_INTERVAL_S) >= ANSWER_INTERVAL_S:
            key_refs.answer(self.r, campaign, shard)
            self._answered[campaign, shard] = now

    # --- lease ------------------------------------------------------------------------------
    def take_lease(self, held: Held) -> bool:
        key = keys.shuffle_lease_key(held.campaign, held.shard)
        return bool(self._scripts.call("LEASE", keys=[key], args=[self.owner, self.lease_ms]))

    def give_up_leases(self) -> None:
        """Release this shuffler's leases (stopping): another one may take over at once."""
        try:
            for held in self.held.values():
                self._scripts.call("LEASE", keys=[keys.shuffle_lease_key(held.campaign, held.shard)],
                            args=[self.owner, 0])
        except redis_lib.RedisError:
            pass  # they lapse by themselves

    # --- read -------------------------------------------------------------------------------
    def read(self, held: Held) -> int:
        """Read new ingress entries into ``held``; returns how many."""
        stream = keys.ingress_key(held.campaign, held.shard)
        if not held.groups and not held.unknown and not held.outgoing:
            held.cursor = "-"  # nothing held: all the stream holds is new (also after a data reset)
        got = 0
        held.read_start, held.read_all = self.clock(), False
        for _ in range(READ_PAGES):
            start = "-" if held.cursor == "-" else f"({held.cursor}"
            entries: Any = self.r.xrange(stream, min=start, max="+", count=READ_COUNT)
            for eid, fields in entries:
                self.take(held, eid, fields)
            got += len(entries)
            if entries:
                last = entries[-1][0]
                held.cursor = last.decode() if isinstance(last, bytes) else last
            if len(entries) < READ_COUNT:
                held.read_all = True
                break
        return got

    def take(self, held: Held, eid: bytes, fields: dict[bytes, Any]) -> None:
        """Hold one ingress entry (an entry that cannot be read goes on as it is, alone)."""
        try:
            window = int(fields[keys.ENTRY_WINDOW])
            batch = ReportBatch.FromString(fields[keys.ENTRY_BATCH])
            count = int(fields.get(b"count", batch.count))
        except Exception as exc:  # noqa: BLE001 - KeyError, ValueError, DecodeError
            self.warn(f"shuffle: ingress entry {eid!r} of {held.campaign!r} unreadable ({exc}); "
                      "forwarded as it is")
            window, batch, count = int(fields.get(keys.ENTRY_WINDOW, 0) or 0), ReportBatch(), 0
        version = batch_version(batch)
        unknown = (held.campaign, version)
        if self.version(*unknown) is None and unknown not in self._warned:
            if self.live.refresh(force=True):  # once per unknown version; then each round
                self.retry_unknown()
        if self.version(*unknown) is None:
            if unknown not in self._warned:
                self._warned.add(unknown)
                self.warn(f"shuffle: ingress entries of unknown version {version} of "
                          f"{held.campaign!r}; left in ingress until the registry knows it")
            held.unknown[eid] = (window, batch, count)
            return
        self.hold(held, eid, window, version, batch, count)

    def hold(self, held: Held, eid: bytes, window: int, version: int, batch: ReportBatch, count: int) -> None:
        """``held.add``; a sealed envelope (a campaign version in a shuffled mode) is read as a
        ``SealedBatch`` and grouped by its analyzer key too."""
        camp = self.version(held.campaign, version)
        if camp is not None and is_shuffled(camp):
            env = SealedBatch.FromString(batch.SerializeToString())
            if camp.shards > 1 and held.shard != handoff.OWNER:  # released by shard 0 (issue 38)
                held.outgoing.append((eid, window, env, keys.ingress_group(version, window, cell_of(env))))
                return
            # one envelope is one device (issue 36): counted as 1, never as its claimed ``reports``
            held.add(eid, window, version, env, 1, key_id=env.key_id)
            return
        held.add(eid, window, version, batch, count)

    def version(self, name: str, version: int) -> Campaign | None:
        """``config.campaign_version``, looked up once per registry snapshot (per entry it was
        most of the cost of holding a one-report batch)."""
        cfg = self.config
        if self._versions_of is not cfg:
            self._versions, self._versions_of = {}, cfg
        try:
            return self._versions[name, version]
        except KeyError:
            found = self._versions[name, version] = cfg.campaign_version(name, version)
            return found

    def retry_unknown(self) -> None:
        """The registry changed: hold the entries of versions it now knows."""
        for held in self.held.values():
            waiting, held.unknown = held.unknown, {}
            for eid, (window, batch, count) in waiting.items():
                if self.config.campaign_version(held.campaign, batch_version(batch)) is None:
                    held.unknown[eid] = (window, batch, count)
                else:
                    self.hold(held, eid, window, batch_version(batch), batch, count)

    # --- release ----------------------------------------------------------------------------
    def release_due(self, latest: Campaign, held: Held, once: bool, drained: bool = False) -> int:
        """Release every due group of ``held`` (all of them with ``once``; a sealed one once
        ``drained``: every shard read to its end); the release rules use the latest version's
        shuffle keys (they change in place). Returns the entries moved."""
        now = time.monotonic()
        moved = 0
        half = self.cfg.max_ingress_batches // 2  # the collector's bound is per ingress group
        filling: dict[str, int] = {}
        marks = (handoff.marks(self.r, held.campaign)
                 if latest.shards > 1 and any(g.sealed for g in held.groups.values()) else {})
        for g in held.groups.values():
            field = g.ingress_group
            filling[field] = filling.get(field, 0) + len(g.ids)
        for key, group in list(held.groups.items()):
            if group.sealed:
                camp = self.config.campaign_version(held.campaign, group.version) or latest
                why = sealed.due(camp, group.window, group.reports, self.cfg.max_held_reports, drained,
                                 now=self.clock(), filling=filling[group.ingress_group] >= half,
                                 settled=handoff.settled(marks, camp.shards, group.window,
                                                         camp.window_seconds))
            else:
                why = "once" if once else group.due(latest, self.cfg.max_held_reports, now)
            if why is None:
                continue
            done = (self.discard(held, group) if why == "discard" else
                    self.release_sealed(held, group, once) if group.sealed else
                    self.release(held, group, why))
            if done is None:  # waits, held (its analyzer key is not published, its fakes are sealing)
                continue
            if not done:
                held.reset()  # another shuffler moved some of it: read again from the start
                return moved
            del held.groups[key]
            moved += len(group.ids)
            if group.sealed and why in sealed.EARLY_REASONS:
                self.early(self.config.campaign_version(held.campaign, group.version) or latest, group, why)
        return moved

    def early(self, camp: Campaign, group: Group, why: str) -> None:
        """A sealed group released before its window closes (``sealed.EARLY_REASONS``): counted
        (``ldptel_shuffler_early_releases_total``); one forced by a memory bound is logged as a
        warning naming its cost (issue 38)."""
        metrics.EARLY.labels(camp.name, why).inc()
        if why in sealed.FORCED_REASONS:
            bound = ("[shuffler] max_held_reports" if why == "max_held"
                     else "half of [shuffler] max_ingress_batches")
            self.warn(f"shuffle: {camp.name!r} v{group.version} window {group.window}: {group.reports:,} "
                      f"devices released before the window closes ({bound} reached): each extra "
                      "release in a window adds its own fakes, k releases give a std error per count "
                      "of about √k·√μ instead of √μ; raise the bound to keep one release per window")

    def mechanism(self, camp: Campaign) -> Mechanism:
        """The mechanism of one campaign version, built once per ``Campaign`` object (a
        registry reload makes new ones)."""
        cached = self._mechanisms.get((camp.name, camp.version))
        if cached is None or cached[0] is not camp:
            cached = self._mechanisms[camp.name, camp.version] = (camp, camp.mechanism())
        return cached[1]

    def release_sealed(self, held: Held, group: Group, once: bool = False) -> bool | None:
        """Release one sealed group as one whole batch (``shuffler.sealed.repack``): its messages of
        every analyzer key together, each with its key id, and the shuffler's fakes sealed to the
        group's newest key; None when it waits (its fakes cannot be sealed — the key is not
        published — or, unless ``once``, are still being sealed in the pool: the next rounds
        look again)."""
        camp = self.config.campaign_version(held.campaign, group.version)
        assert camp is not None and group.key_id is not None
        t0 = time.perf_counter()
        added = self.fakes(camp, group, wait=once)
        if added is None:
            return None
        messages, key_id = added
        parts, reports = sealed.repack(group.messages, group.sizes, group.key_ids, camp.name, group.version,
                                       group.window, key_id, self.cfg.batch_reports, cell=group.cell,
                                       fakes=messages)
        return self._move(held, group, camp, parts, t0, "batch")

    def fakes(self, camp: Campaign, group: Group, wait: bool = True) -> tuple[list[bytes], int] | None:
        """The shuffler's sealed fakes of one release (``shuffler.fakes``; none unless the version
        is ``shuffled-fakes`` with ``fake_source`` shuffler or both) and the analyzer key they are
        sealed to (the group's newest when they were drawn); None when the release's analyzer key
        is not published (nothing is released without its fakes) or, unless ``wait``, they are
        still being sealed on the pool (``Sealer.submit``: the loop goes on meanwhile; one set per
        (campaign, version, window, cell), drawn once and used by one release)."""
        mode = camp.mode
        assert group.key_id is not None
        if not isinstance(mode, ShuffledFakes) or mode.shuffler_fakes <= 0:
            return [], group.key_id
        slot = sealing_slot(camp.name, group)
        if slot in self._sealing:
            key_id, pending, t0 = self._sealing[slot]
            if not wait and not pending.done():
                return None
            del self._sealing[slot]
            out = pending.result()
            metrics.observe_fakes(camp.name, len(out), time.perf_counter() - t0)
            return out, key_id
        signing = self.config.shuffler.analyzer_signing_key
        public = fakes.release_public_key(self.keys_r, group.key_id,
                                          key_signing.signing_public(signing) if signing else None)
        if public is None:
            if group.key_id not in self._unpublished:  # once per key and process
                self._unpublished.add(group.key_id)
                self.warn(f"shuffle: analyzer key {group.key_id:08x} of a release of {camp.name!r} is "
                          "not published (or not signed by [shuffler] analyzer_signing_key); the release "
                          "waits (its fakes are sealed to it)")
            return None
        self._unpublished.discard(group.key_id)
        info = sealing.info(camp.name, group.version, group.window, group.key_id)
        self._sealing[slot] = (group.key_id, fakes.sealed_fakes(
            self.mechanism(camp), mode.shuffler_fakes, public, info, self.rng, seal=self.sealer.submit),
            time.perf_counter())
        return self.fakes(camp, group, wait)

    def discard(self, held: Held, group: Group) -> bool:
        """Delete a sealed group whose window closed below ``batch_min`` (``scripts.DISCARD``,
        ``release.CALL_IDS`` entries per call: deleting part of it loses nothing that the rest's
        own discard would not)."""
        step = release.CALL_IDS
        for s in range(0, len(group.ids), step):
            ids = group.ids[s:s + step]
            kids = group.key_ids[s:s + step]
            reports = len(kids)  # envelopes: one device each
            per_key: dict[int, int] = {}
            for kid in kids:
                per_key[kid] = per_key.get(kid, 0) + 1
            res: Any = self._scripts.call(
                "DISCARD", keys=[keys.ingress_key(held.campaign, held.shard),
                                 keys.shuffle_metrics_key(held.campaign, held.shard),
                                 keys.release_key(held.campaign, held.shard),
                                 keys.ingress_groups_key(held.campaign, held.shard),
                                 keys.sealed_keys_key(held.campaign, held.shard)],
                args=[reports, group.ingress_group, key_refs.spec(per_key), *ids])
            status = res[0].decode() if isinstance(res[0], bytes) else res[0]
            if status != "ok":
                self.stats.refused += 1
                held.settled = held.settled and status != "busy"
                return False
        self.warn(f"shuffle: {group.reports} reports of {held.campaign!r} v{group.version} discarded: "
                  f"their window closed below batch_min")
        return True

    def release(self, held: Held, group: Group, why: str) -> bool:
        """Permute, re-pack and move one group (``scripts.SHUFFLE``); False if refused."""
        camp = self.config.campaign_version(held.campaign, group.version)
        assert camp is not None  # only known versions are grouped
        t0 = time.perf_counter()
        out = repack(self.mechanism(camp), group.batches, camp.name, group.version,
                     self.cfg.batch_reports, cell=group.cell)
        if out.forwarded:
            self.warn(f"shuffle: {len(out.forwarded)} ingress batches of {camp.name!r} do not parse; "
                      "forwarded alone without their batch id (the aggregator rejects them)")
        return self._move(held, group, camp, out.batches, t0, why)

    def _move(self, held: Held, group: Group, camp: Campaign, batches: list[tuple[bytes, int]],
              t0: float, why: str) -> bool:
        """The new batches to the analysis stream, the ingress entries gone (``release.Mover``:
        one ``scripts.SHUFFLE``, or bounded journaled steps for a large release)."""
        mover = Mover(self.r, held.campaign, held.shard)
        status = mover.move(group.ids, group.reports, group.window, batches, group.ingress_group,
                            key_refs.spec(group.key_entries))
        if status != "ok":
            self.stats.refused += 1
            metrics.REFUSED.labels(camp.name).inc()
            if status == "busy":
                held.settled = False  # another release holds the stream: complete it next round
            self.warn(f"shuffle: release of {camp.name!r} shard {held.shard} refused (an ingress "
                      "entry was moved by another shuffler, or a release of another one holds the "
                      "stream); reading the stream again")
            return False
        self.stats.releases += 1
        self.stats.ingress_batches += len(group.ids)
        self.stats.ingress_reports += group.reports
        self.stats.analysis_batches += len(batches)
        metrics.observe(camp.name, len(group.ids), group.reports, len(batches),
                        time.perf_counter() - t0)
        LOG.debug("shuffle: released %d reports of %s v%d (%s): %d ingress → %d analysis batches",
                  group.reports, camp.name, group.version, why, len(group.ids), len(batches))
        return True
