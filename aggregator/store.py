"""Aggregated state in Redis: the only module that reads or writes it.

Layout of the state hash ``keys.state_key(campaign, shard, version)`` (one per stream shard and
campaign version: a ``Campaign`` object is one version, and every function here reads or writes
that version's state only; field names in ``ldptel.keys``):

- ``acc:<window>:<uid>``  accumulator bytes (``Accumulator.to_bytes``). A field is written once
                          and never modified; the worker replaces a set of fields by one field
                          holding their sum (atomically, with the XACK of the entries it adds),
                          so a window's state is the sum of all its ``acc:<window>:*`` fields.

Its counters, in the hash ``keys.counts_key`` (the reader role reads them, never the state),
written by the same ``scripts.COMMIT``:

- ``n:<window>``          reports counted in the window (same total as the accumulators' ``n``;
                          cheap to read for listings).
- ``entries:<window>``    stream entries counted in the window.
- ``updated:<window>``    epoch milliseconds of the last commit touching the window.
- ``rejected``            entries that could not be decoded (acknowledged, not counted; they stay
                          in the stream until retention trims them).

``move_counters`` moves them out of a state hash written before they had their own hash.

Reads: ``load_accumulator`` (sum over shards and fields: what ``ldptel.aggregator.publish``
decodes), and for the export endpoints and pages ``list_windows``, ``window_counts``,
``window_count``, ``last_updated``,
``resolve_window``, ``backlog``, ``summary``. Writes (the aggregator worker): ``check_state``,
``fold_stored``, ``commit``, ``delete_windows`` (retention, ``ldptel.aggregator.retention``).
Each takes a client from ``ldptel.store.redis_client.connect`` — one server or a Redis Cluster: every
call touches the keys of one (campaign, shard) hash tag at a time, and a campaign is read as the
sum over its shards.

Every campaign kind (frequency, heavy_hitters, range) builds its mechanism
(``Campaign.mechanism()``) and the decoders map it to its ``Accumulator`` (mergeable state,
``add``/``merge``/``to_bytes``).
"""

from __future__ import annotations

import secrets
import time
from typing import Any, cast

from ldptel import keys
from ldptel.aggregator.decoders import Accumulator, accumulator_for
from ldptel.aggregator.decoders.cells import CellAccumulator
from ldptel.campaigns.config import Campaign
from ldptel.errors import StateMismatch
from ldptel.keys import (
    ACC_PREFIX,
    ENTRIES_PREFIX,
    N_PREFIX,
    REJECTED,
    UPDATED_PREFIX,
)
from ldptel.privacy.modes import ShuffledFakes
from ldptel.store import scripts
from ldptel.store.redis_client import AnyRedis
from ldptel.store.tally import counts_keys, state_keys

TIER_SLACK_BYTES = 64 * 1024  # savez headers, and small states always merge


def new_accumulator(campaign: Campaign) -> Accumulator:
    """An empty accumulator for ``campaign`` (shuffled-fakes: the fake-message histogram; with
    dimensions: one per cell, ``CellAccumulator``)."""
    mech = campaign.mechanism()

    def make() -> Accumulator:
        if isinstance(campaign.mode, ShuffledFakes):
            from ldptel.aggregator.decoders.fakes import FakesAccumulator

            return FakesAccumulator(mech)
        return accumulator_for(mech)

    return make() if campaign.dimensions is None else CellAccumulator(make, campaign.dimensions)


def release_sizes(r: AnyRedis, campaign: Campaign, window: int) -> list[int]:
    """The real reports of each shuffled release committed in ``window`` (``rel:<window>:<id>``
    fields of every shard's counts hash; campaigns in a shuffled privacy mode), sorted."""
    prefix = f"{keys.RELEASE_PREFIX}{window}:".encode()
    sizes: list[int] = []
    for key in counts_keys(campaign):
        fields = [f for f in cast(list[bytes], r.hkeys(key)) if f.startswith(prefix)]
        if fields:
            sizes += [int(v) for v in cast(list[bytes], r.hmget(key, fields)) if v is not None]
    return sorted(sizes)


def replayed_messages(r: AnyRedis, campaign: Campaign, window: int) -> int:
    """Sealed messages of ``window`` dropped as replays (``replayed:<window>:<release id>`` fields
    of every shard's counts hash, ``aggregator.sealed``)."""
    prefix = f"{keys.REPLAYED_PREFIX}{window}:".encode()
    total = 0
    for key in counts_keys(campaign):
        fields = [f for f in cast(list[bytes], r.hkeys(key)) if f.startswith(prefix)]
        if fields:
            total += sum(int(v) for v in cast(list[bytes], r.hmget(key, fields)) if v is not None)
    return total


def decode_accumulator(campaign: Campaign, data: bytes, template: Accumulator | None = None) -> Accumulator:
    """Accumulator bytes of ``campaign`` back into an object (``ValueError`` if they do not fit
    the campaign's current parameters, e.g. a changed domain size)."""
    template = template if template is not None else new_accumulator(campaign)
    return template.load(data)


# --- reads ---------------------------------------------------------------------------------

def load_accumulator(r: AnyRedis, campaign: Campaign, window: int) -> tuple[Accumulator, int]:
    """Everything counted for ``campaign`` in ``window`` (epoch start; 0 for "all" campaigns):
    the sum of all accumulator fields of all shards, and its report count (an empty accumulator
    and 0 when nothing was counted). Each shard's fields are read atomically, so the result
    includes exactly the entries the workers had acknowledged at that moment."""
    acc = new_accumulator(campaign)
    prefix = keys.acc_field(window, "")
    for key in state_keys(campaign):
        for data in scripts.of(r).call("READ_WINDOW", keys=[key], args=[prefix]):
            acc.merge(decode_accumulator(campaign, data, acc))
    return acc, acc.n


# --- writes (the aggregator worker) ---------------------------------------------------------

def delete_windows(r: AnyRedis, campaign: Campaign, windows: list[int]) -> int:
    """Delete every state field of ``windows`` (accumulators and counters) in every shard, each
    shard in one ``scripts.EXPIRE_WINDOWS`` call that adds the windows' report and entry counts
    to ``expired_reports`` / ``expired_entries`` (so ``summary``'s lag stays right). Returns the
    number of fields deleted."""
    if not windows:
        return 0
    run = scripts.of(r)
    return sum(int(run.call("EXPIRE_WINDOWS", keys=[keys.state_key(campaign.name, s, campaign.version),
                                                    keys.counts_key(campaign.name, s, campaign.version)],
                            args=windows)) for s in range(campaign.shards))


def check_state(r: AnyRedis, campaign: Campaign, shard: int, template: Accumulator) -> None:
    """Decode every stored accumulator of a shard: state written under other campaign parameters
    (changed domain, ε, oracle) must not be merged silently. Raises ``StateMismatch``."""
    key = keys.state_key(campaign.name, shard, campaign.version)
    for fld, data in r.hscan_iter(key, match=f"{ACC_PREFIX}*", count=100):
        try:
            decode_accumulator(campaign, data, template)
        except (ValueError, OSError) as exc:
            raise StateMismatch(
                f"campaign {campaign.name!r}: stored state {key} field "
                f"{fld.decode()} does not fit the configured mechanism ({exc}); the campaign's "
                "parameters changed — give it a new name or delete its state") from None


def fold_stored(r: AnyRedis, campaign: Campaign, shard: int, deltas: dict[int, Accumulator],
                template: Accumulator) -> tuple[dict[int, Accumulator], list[bytes]]:
    """Per window, ``deltas`` plus the stored fields chosen by ``_pick_fields``: (totals, the
    fields they replace). A field gone meanwhile (another worker replaced it) is left out."""
    key = keys.state_key(campaign.name, shard, campaign.version)
    stored: dict[int, list[bytes]] = {}
    for f in cast(list[bytes], r.hkeys(key)):
        w = keys.field_window(f)
        if w is not None:
            stored.setdefault(w, []).append(f)
    totals: dict[int, Accumulator] = {}
    replaced: list[bytes] = []
    for w, acc in deltas.items():
        totals[w] = acc
        old = _pick_fields(r, key, stored.get(w, []), acc)
        if old:
            totals[w] = template.blank().merge(acc)
            for f, data in zip(old, cast(list[bytes | None], r.hmget(key, old)), strict=True):
                if data is None:
                    continue  # replaced meanwhile by another worker's field: left alone
                totals[w].merge(decode_accumulator(campaign, data, template))
                replaced.append(f)
    return totals, replaced


def _pick_fields(r: AnyRedis, key: str, fields: list[bytes], delta: Accumulator) -> list[bytes]:
    """The stored fields of a window to fold into a commit's new field: smallest first, while a
    field is at most twice the size gathered so far (size-tiered; sizes as stored,
    ``Accumulator.stored_nbytes``). Dense states (every frequency oracle) thus always end up as
    one field per window; a state stored sparsely while it is small (the heavy-hitter count
    table) keeps O(log N) fields until it is dense, and is rewritten O(log N) times, not on
    every commit."""
    if not fields:
        return []
    pipe = r.pipeline(transaction=False)
    for f in fields:
        pipe.hstrlen(key, f)
    gathered = delta.stored_nbytes()
    chosen = []
    for size, f in sorted(zip(pipe.execute(), fields, strict=True)):
        if size == 0:
            continue  # already replaced by another worker
        if size > 2 * gathered + TIER_SLACK_BYTES:
            break
        chosen.append(f)
        gathered += size
    return chosen


def commit(r: AnyRedis, campaign: Campaign, shard: int, consumer: str, ids: list[Any],
           replaced: list[bytes], totals: dict[int, Accumulator], deltas: dict[int, Accumulator],
           entries: dict[int, int], rejected: int, extra: list[Any] | None = None) -> bytes:
    """Run ``scripts.COMMIT`` on one shard: if every entry of ``ids`` is still pending to
    ``consumer`` (in group ``keys.GROUP``) and every ``replaced`` field still exists,
    delete those fields, write each window's ``totals`` as one new field, add the ``deltas``'
    reports and ``entries`` to the window counters and ``rejected`` to the rejected count, and
    XACK ``ids``; ``extra``: more (field, value) pairs to set (a shuffled release's
    ``rel:<window>:<id>``). Returns ``b"ok"``, ``b"lost"`` (an entry was claimed by another consumer) or
    ``b"stale"`` (a field was replaced meanwhile); nothing is written unless ``b"ok"``."""
    now_ms = str(int(time.time() * 1000))
    sets: list[Any] = []
    cset: list[Any] = []
    for w, total in totals.items():
        sets += [keys.acc_field(w, secrets.token_hex(8)), total.to_bytes()]
        cset += [f"{UPDATED_PREFIX}{w}", now_ms]
    cset += list(extra or [])  # a shuffled release's rel:<window>:<id> (a counter, beside n:)
    incr: list[Any] = []
    for w, acc in deltas.items():
        incr += [f"{N_PREFIX}{w}", acc.n, f"{ENTRIES_PREFIX}{w}", entries.get(w, 0)]
    if rejected:
        incr += [REJECTED, rejected]
    args = [keys.GROUP, consumer, len(ids), len(replaced), len(sets) // 2, len(incr) // 2, len(cset) // 2,
            *ids, *replaced, *sets, *incr, *cset]
    stream = keys.stream_key(campaign.name, shard)
    state = keys.state_key(campaign.name, shard, campaign.version)
    counts = keys.counts_key(campaign.name, shard, campaign.version)
    return cast("bytes", scripts.of(r).call("COMMIT", keys=[stream, state, counts], args=args)[0])


def move_counters(r: AnyRedis, campaign: Campaign, shard: int) -> int:
    """Move the counters a state hash written before ``keys.counts_key`` existed still holds
    (``scripts.MOVE_COUNTERS``, atomic and idempotent); the number of fields moved."""
    state = keys.state_key(campaign.name, shard, campaign.version)
    counts = keys.counts_key(campaign.name, shard, campaign.version)
    return int(scripts.of(r).call("MOVE_COUNTERS", keys=[state, counts]))
