"""The aggregator's side of campaigns in a shuffled privacy mode: whole releases of sealed
messages, decrypted here — the only process that holds the analyzer's private keys
(``aggregator.keyring``) — after the shuffler permuted them.

A release reaches the analysis stream as ``release_parts`` entries (``shuffler.sealed``), each a
``SealedBatch`` part naming the release. ``SealedReleases.take`` keeps a release's parts (pending
to this consumer, never acknowledged) until it holds them all, then:

1. opens every message with the key of its key id (the part's ``key_ids``, parallel to its
   messages, when the release holds messages sealed to several keys around a rotation; else the
   part's ``key_id``: ``message_keys``) and the ``info`` of (campaign, version, window, key id)
   (``sealing.open_keyed``, on every core for a large release: ``aggregator.opening``; a message
   that does not open — tampered, or sealed under another binding — is counted as rejected and left
   out), and keeps each message once, ever (``open_once``): the encapsulated keys (``enc``) of the
   messages it opened are recorded per analyzer key in Redis (``ldptel.store.opened``), and a
   message whose ``enc`` another release recorded (re-posted under a new batch id: a replay) or
   that a release holds twice is dropped and counted (``replayed:<window>:<release id>``, the
   metric ``ldptel_aggregator_replayed_messages``, a warning); the release's real reports are
   lowered by the replays dropped;
2. turns all plaintexts into the mechanism's columns with one ``np.frombuffer``
   (``mechanisms.rows.from_rows``) and drops rows the mechanism refuses (``valid_rows``: a device
   can put anything inside its ciphertext; the collector could not check it);
3. re-checks the release's size (issue 36, ``below_batch_min``): fewer than ``batch_min``
   envelopes (``release_reports``: the shuffler counts envelopes, one device each, less the replays
   dropped) or fewer than ``batch_min`` messages opened once, and the release is never published:
   its entries are acknowledged as rejected, counted (``ldptel_aggregator_refused_releases``) and
   logged. It never learns which messages shared an envelope (that would link a device's real
   message with its own fakes);
4. decodes them into a fresh accumulator (shuffled: the oracle's; shuffled-fakes: the fake-message
   histogram, ``decoders.fakes``; with dimensions: the inner accumulator of the release's cell,
   whose values every part carries in the clear) counting the release's real reports as its devices,
   and commits the whole release at once (``store.commit``: one ``COMMIT`` that acknowledges every
   part and sets ``rel:<window>:<release id>`` = its real reports, the batch sizes a window's claim
   rests on). A window's state therefore changes only by whole releases.

Several workers: the parts of one release may be delivered to two of them. The worker holding part
0 claims the others (``claim_rest``: their entry ids follow part 0's); the other worker's copies are
then no longer pending to it and are forgotten after ``claim_idle_ms``. A release whose key this
worker lacks stays pending (logged once): a worker holding the key (a shared keys directory)
claims it once idle (a release needs every key it names).

``SealedReleases`` is given what it uses and nothing more: the Redis client and consumer name (to
claim parts), the idle time after which a partial release is forgotten, the key lookup, a warning
sink, the opener (``aggregator.opening``: a large release opens on every core), and the worker's
two commits (``reject``: acknowledge entries as rejected; ``commit``: one whole release's
accumulator, ``Worker.commit_release``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldptel import keys, sealing
from ldptel.aggregator import metrics as agg_metrics
from ldptel.aggregator import retention
from ldptel.aggregator.decoders.cells import CellAccumulator
from ldptel.aggregator.decoders.fakes import FakesAccumulator
from ldptel.mechanisms.rows import from_rows, row_dtype, select, valid_rows
from ldptel.proto import ReportBatch, SealedBatch
from ldptel.store import opened

if TYPE_CHECKING:
    from ldptel.aggregator.decoders import Accumulator
    from ldptel.aggregator.slots import Parsed, Slot
    from ldptel.campaigns.campaign import Campaign
    from ldptel.store.redis_client import AnyRedis


OpenKeyed = Callable[[Sequence[bytes], Sequence[int], Mapping[int, X25519PrivateKey], Mapping[int, bytes],
                      int], list[bytes | None]]


class CommitRelease(Protocol):
    """``Worker.commit_release``: commit one whole release (its entry ids, the window's
    accumulator, the messages rejected, the ``extra`` of ``store.commit``, the decode's seconds);
    returns the entries committed, 0 when lost."""

    def __call__(self, slot: Slot, camp: Campaign, window: int, ids: list[bytes], acc: Accumulator,
                 rejected: int, extra: list[Any], decode_s: float) -> int: ...


@dataclass
class Partial:
    parts: dict[bytes, SealedBatch] = field(default_factory=dict)  # entry id → part
    seen: float = field(default_factory=time.monotonic)
    first: bytes | None = None  # the entry id of part 0, if this worker holds it
    slot: Any = None  # the ``Slot`` and campaign version the parts came from
    version: int = 0


class SealedReleases:
    """Releases being assembled by one worker (module docstring)."""

    def __init__(self, r: AnyRedis, consumer: str, idle_s: float,
                 private_key: Callable[[int], X25519PrivateKey | None], warn: Callable[[str], None],
                 reject: Callable[[Slot, int, list[bytes]], int], commit: CommitRelease,
                 forget_at: Callable[[int], float | None] = lambda _key_id: None,
                 open_keyed: OpenKeyed = sealing.open_keyed) -> None:
        self.r, self.consumer, self.idle_s = r, consumer, idle_s
        self.open_keyed = open_keyed  # ``aggregator.opening.Opener.open_keyed``: every core
        self.forget_at = forget_at  # key id → epoch s of its deletion (``Keyring.forget_at``)
        self.private_key, self.warn, self.reject, self.commit_release = private_key, warn, reject, commit
        self.partial: dict[tuple[str, bytes], Partial] = {}
        self.refused = 0  # releases refused below batch_min (``below_batch_min``)
        self._warned: set[int] = set()

    def take(self, slot: Slot, version: int, items: list[Parsed]) -> int:
        """Hold ``items`` (parts of releases); decode and commit every complete release. Returns
        the entries committed."""
        now = time.monotonic()
        for key in [k for k, p in self.partial.items() if now - p.seen > self.idle_s]:
            del self.partial[key]
        done = 0
        bad: list[bytes] = []
        for eid, _window, batch in items:
            part = _part(batch)
            if part is None or not part.release or part.release_parts < 1:
                bad.append(eid)
                continue
            held = self.partial.setdefault((slot.stream, bytes(part.release)), Partial())
            held.parts[eid] = part
            held.slot, held.version = slot, version
            if part.release_part == 0:
                held.first = eid
        if bad:  # not a release part: acknowledged as rejected
            done += self.reject(slot, version, bad)
        return done + self.poll(slot.stream)

    def poll(self, stream: str | None = None) -> int:
        """Claim the missing parts of every release whose part 0 this worker holds (of
        ``stream``, or of every stream) and commit every complete release; the worker calls it
        each round, so a release completes even when no new entry arrives. Returns the entries
        committed."""
        done = 0
        for key, held in list(self.partial.items()):
            if stream is not None and key[0] != stream:
                continue
            if held.first is not None:
                self.claim_rest(held.slot, held)
            first = next(iter(held.parts.values()))
            if len(held.parts) < first.release_parts:
                continue
            committed = self.commit(held.slot, held.version, held)
            if committed is not None:
                del self.partial[key]
                done += committed
        return done

    def claim_rest(self, slot: Slot, held: Partial) -> None:
        """This worker holds part 0 of an incomplete release: take the other parts (consecutive
        entry ids after part 0's) from whichever consumer they were delivered to (``XCLAIM``). Only
        the holder of part 0 claims, so two workers never trade parts back and forth; a part not
        yet delivered comes with a later read."""
        assert held.first is not None
        first = next(iter(held.parts.values()))
        if len(held.parts) >= first.release_parts:
            return
        ms, seq = (held.first.decode() if isinstance(held.first, bytes) else held.first).split("-")
        wanted = [f"{ms}-{int(seq) + j}" for j in range(1, first.release_parts)]
        have = {(e.decode() if isinstance(e, bytes) else e) for e in held.parts}
        missing: list[Any] = [w for w in wanted if w not in have]
        if not missing:
            return
        claimed: Any = self.r.xclaim(slot.stream, keys.GROUP, self.consumer, 0, missing)
        for eid, fields in claimed or []:
            if not fields:
                continue
            part = SealedBatch.FromString(fields[keys.ENTRY_BATCH])
            if bytes(part.release) == bytes(first.release):
                held.parts[eid] = part

    def commit(self, slot: Slot, version: int, held: Partial) -> int | None:
        """Decode and commit one whole release; None when its key is missing (left pending)."""
        camp = slot.versions[version]
        parts = list(held.parts.values())
        first = parts[0]
        key_ids = message_keys(parts)
        private = {kid: self.private_key(kid) for kid in sorted(set(key_ids))}
        missing = [kid for kid, key in private.items() if key is None]
        if missing:
            for kid in missing:
                if kid not in self._warned:
                    self._warned.add(kid)
                    self.warn(f"aggregate: a release of {camp.name!r} is sealed to analyzer key "
                              f"{kid:08x}, which this worker does not hold; left pending for a worker "
                              "that does")
            return None
        window = int(first.window)
        ids = list(held.parts)
        if retention.expired(camp, window):  # never counted (nor brought back)
            return self.reject(slot, version, ids)
        t0 = time.perf_counter()
        acc = whole = slot.fresh(version)
        if isinstance(whole, CellAccumulator):  # a release is one cell's (issue 28)
            acc = whole.cell(whole.cells.cell_of({d.name: d.value for d in first.dimensions}))
        width = row_dtype(acc.mech).itemsize
        infos = {kid: sealing.info(camp.name, version, window, kid) for kid in private}
        plain, failed, replayed = self.open_once([m for p in parts for m in p.messages], key_ids,
                                                 {k: v for k, v in private.items() if v is not None}, infos,
                                                 width, opened.release_tag(slot.stream, _first_id(ids),
                                                                           bytes(first.release)))
        cols, m = from_rows(acc.mech, plain)
        # the release's devices: its envelopes (the shuffler's count) less the replays dropped:
        # exact when every message is one report (shuffled), a lower bound with fakes (a dropped
        # envelope took its fakes along)
        reports = max(int(first.release_reports) - replayed, 0)
        short = below_batch_min(camp, reports, m)
        if short is not None:  # never published; its messages stay recorded as opened (burnt)
            return self.refuse(slot, camp, version, window, ids, first, failed + m, replayed, short, t0)
        ok = valid_rows(acc.mech, cols, m)
        good = int(ok.sum())
        cols = select(cols, ok) if good < m else cols
        if isinstance(acc, FakesAccumulator):
            acc.add_release(cols, good, reports)
        else:
            acc.add_columns(cols, good)
            acc.state["n"][0] += good  # every message is one device's report
        if isinstance(whole, CellAccumulator):
            whole.sync()
        acc = whole
        rejected = failed + (m - good)
        # a release of replays only counted nothing: no batch of the window's claim
        extra: list[Any] = [f"{keys.RELEASE_PREFIX}{window}:{bytes(first.release).hex()}", reports] \
            if reports or not replayed else []
        if replayed:
            extra += [f"{keys.REPLAYED_PREFIX}{window}:{bytes(first.release).hex()}", replayed]
        done = self.commit_release(slot, camp, window, ids, acc, rejected, extra, time.perf_counter() - t0)
        if replayed and done:
            agg_metrics.REPLAYED.labels(camp.name).inc(replayed)
            self.warn(f"aggregate: a release of {camp.name!r} (window {window}) held {replayed} "
                      "messages opened before (replayed under new batch ids): dropped, counted once")
        return done

    def refuse(self, slot: Slot, camp: Campaign, version: int, window: int, ids: list[bytes],
               first: SealedBatch, rejected: int, replayed: int, why: str, t0: float) -> int:
        """Commit a release below ``batch_min`` as nothing (an empty accumulator: no batch of the
        window's claim, every message rejected, its replays counted), counted and logged."""
        extra: list[Any] = [f"{keys.REPLAYED_PREFIX}{window}:{bytes(first.release).hex()}", replayed] \
            if replayed else []
        done = self.commit_release(slot, camp, window, ids, slot.fresh(version), rejected, extra,
                                   time.perf_counter() - t0)
        if done:
            self.refused += 1
            agg_metrics.REFUSED_RELEASES.labels(camp.name).inc()
            if replayed:
                agg_metrics.REPLAYED.labels(camp.name).inc(replayed)
            self.warn(f"aggregate: a release of {camp.name!r} (window {window}) refused, never published: "
                      f"{why}")
        return done

    def open_once(self, messages: list[bytes], key_ids: list[int], private: dict[int, X25519PrivateKey],
                  infos: dict[int, bytes], width: int, tag: bytes) -> tuple[bytes, int, int]:
        """Open ``messages`` (message i with the key of ``key_ids[i]``: ``sealing.open_keyed``)
        and keep each message once, ever (``ldptel.store.opened``, per key): the plaintexts kept
        (concatenated), the messages that did not open, and the replays dropped (opened before by
        another release, or twice in this one)."""
        plain = self.open_keyed(messages, key_ids, private, infos, width)
        first: dict[int, dict[bytes, bytes]] = {}  # key id → enc → plaintext of its first copy
        for message, kid, p in zip(messages, key_ids, plain, strict=True):
            if p is not None:
                first.setdefault(kid, {}).setdefault(sealing.enc_of(message), p)
        kept: list[bytes] = []
        for kid, by_enc in first.items():
            mine = opened.claim(self.r, kid, tag, list(by_enc), self.forget_at(kid))
            kept += [p for p, ok in zip(by_enc.values(), mine, strict=True) if ok]
        failed = sum(p is None for p in plain)
        return b"".join(kept), failed, len(messages) - failed - len(kept)


def message_keys(parts: list[SealedBatch]) -> list[int]:
    """The analyzer key id of each message of ``parts`` in order: a part's ``key_ids`` (a release
    holding several keys), else its ``key_id`` for every message; a part whose ``key_ids`` does
    not match its messages names key 0 for them (they do not open: rejected)."""
    out: list[int] = []
    for p in parts:
        if not p.key_ids:
            out += [int(p.key_id)] * len(p.messages)
        elif len(p.key_ids) == len(p.messages):
            out += [int(k) for k in p.key_ids]
        else:
            out += [0] * len(p.messages)
    return out


def below_batch_min(camp: Campaign, envelopes: int, opened_messages: int) -> str | None:
    """Why a release must not be published, or None: it holds fewer than the campaign's
    ``batch_min`` envelopes (the shuffler's count, less the replays dropped) or fewer messages that
    opened once. The aggregator never learns which messages shared an envelope, only how many
    envelopes the release had (issue 36)."""
    batch_min = int(getattr(camp.mode, "batch_min", 0) or 0)
    if envelopes < batch_min:
        return f"{envelopes} envelopes (devices) < batch_min {batch_min}"
    if opened_messages < batch_min:
        return f"{opened_messages} messages opened once < batch_min {batch_min}"
    return None


def _first_id(ids: list[bytes]) -> bytes:
    """The smallest of stream entry ids ``<ms>-<seq>`` (a release's part 0: its ids are consecutive)."""
    def order(e: bytes | str) -> tuple[int, int]:
        ms, seq = (e.decode() if isinstance(e, bytes) else e).split("-")
        return int(ms), int(seq)
    low = min(ids, key=order)
    return low if isinstance(low, bytes) else str(low).encode()


def _part(batch: ReportBatch) -> SealedBatch | None:
    try:
        return SealedBatch.FromString(batch.SerializeToString())
    except Exception:  # noqa: BLE001 - DecodeError
        return None


__all__ = ["CommitRelease", "SealedReleases", "below_batch_min"]
