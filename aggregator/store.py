"""Aggregated state in Redis: the only module that reads or writes it.

Layout of the state hash ``keys.state_key(campaign, shard, version)`` (one per stream shard and
campaign version: a ``Campaign`` object is one version, and every function here reads or writes
that version's state only; field names in ``ldptel.keys``):

- ``acc:<window>:<uid>``  accumulator bytes (``Accumulator.to_bytes``). A field is written once
                          and never modified; the worker replaces a set of fields by one field
                          holding their sum (atomically, with the XACK of the entries it adds),
                          so a window's state is the sum of all its ``acc:<window>:*`` fields.
- ``n:<window>``          reports counted in the window (same total as the accumulators' ``n``;
                          cheap to read for listings).
- ``entries:<window>``    stream entries counted in the window.
- ``updated:<window>``    epoch milliseconds of the last commit touching the window.
- ``rejected``            entries that could not be decoded (acknowledged, not counted; they stay
                          in the stream until retention trims them).

Reads: ``load_accumulator`` (sum over shards and fields: what ``ldptel.aggregator.publish``
decodes), and for the export endpoints and pages ``list_windows``, ``window_counts``,
``window_count``, ``last_updated``,
``resolve_window``, ``backlog``, ``summary``. Writes (the aggregator worker): ``check_state``,
``fold_stored``, ``commit``, ``delete_windows`` (retention, ``ldptel.aggregator.retention``).
Each takes a client from ``ldptel.redis_client.connect`` — one server or a Redis Cluster: every
call touches the keys of one (campaign, shard) hash tag at a time, and a campaign is read as the
sum over its shards.

Every campaign kind (frequency, heavy_hitters, range) builds its mechanism
(``Campaign.mechanism()``) and the decoders map it to its ``Accumulator`` (mergeable state,
``add``/``merge``/``to_bytes``).
"""

from __future__ import annotations

import operator
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from ldptel import keys, scripts
from ldptel.aggregator.decoders import Accumulator, accumulator_for
from ldptel.aggregator.errors import StateMismatch, WindowError
from ldptel.config import Campaign
from ldptel.keys import (
    ACC_PREFIX,
    ENTRIES_PREFIX,
    EXPIRED_ENTRIES,
    EXPIRED_REPORTS,
    N_PREFIX,
    REJECTED,
    UPDATED_PREFIX,
)
from ldptel.redis_client import AnyRedis

TIER_SLACK_BYTES = 64 * 1024  # savez headers, and small states always merge


def new_accumulator(campaign: Campaign) -> Accumulator:
    """An empty accumulator for ``campaign``."""
    return accumulator_for(campaign.mechanism())


def decode_accumulator(campaign: Campaign, data: bytes, template: Accumulator | None = None) -> Accumulator:
    """Accumulator bytes of ``campaign`` back into an object (``ValueError`` if they do not fit
    the campaign's current parameters, e.g. a changed domain size)."""
    template = template if template is not None else new_accumulator(campaign)
    return type(template).from_bytes(template.mech, data)


def _state_keys(campaign: Campaign) -> list[str]:
    return [keys.state_key(campaign.name, s, campaign.version) for s in range(campaign.shards)]


# --- reads ---------------------------------------------------------------------------------

def load_accumulator(r: AnyRedis, campaign: Campaign, window: int) -> tuple[Accumulator, int]:
    """Everything counted for ``campaign`` in ``window`` (epoch start; 0 for "all" campaigns):
    the sum of all accumulator fields of all shards, and its report count (an empty accumulator
    and 0 when nothing was counted). Each shard's fields are read atomically, so the result
    includes exactly the entries the workers had acknowledged at that moment."""
    acc = new_accumulator(campaign)
    prefix = keys.acc_field(window, "")
    for key in _state_keys(campaign):
        for data in r.eval(scripts.READ_WINDOW, 1, key, prefix):
            acc.merge(decode_accumulator(campaign, data, acc))
    return acc, acc.n


def window_counts(r: AnyRedis, campaign: Campaign) -> dict[int, int]:
    """Reports counted per window (summed over shards), ascending by window."""
    return _window_counts([_counters(r, key) for key in _state_keys(campaign)])


def _window_counts(shards: list[dict[str, int]]) -> dict[int, int]:
    return _per_window(shards, N_PREFIX, operator.add)


def _per_window(shards: list[dict[str, int]], prefix: str,
                combine: Callable[[int, int], int]) -> dict[int, int]:
    """The ``prefix`` counters of every shard, by window (ascending), combined over shards."""
    out: dict[int, int] = {}
    for counters in shards:
        for w, n in _with_prefix(counters, prefix).items():
            out[int(w)] = combine(out[int(w)], n) if int(w) in out else n
    return dict(sorted(out.items()))


def window_count(r: AnyRedis, campaign: Campaign, window: int) -> int:
    """Reports counted in one window (summed over shards)."""
    return sum(int(r.hget(key, f"{N_PREFIX}{window}") or 0) for key in _state_keys(campaign))


_COUNTER_PREFIXES = (N_PREFIX.encode(), ENTRIES_PREFIX.encode(), UPDATED_PREFIX.encode(), REJECTED.encode(),
                     EXPIRED_ENTRIES.encode(), EXPIRED_REPORTS.encode())


def _counters(r: AnyRedis, key: str) -> dict[str, int]:
    """Every counter field of a state hash (``n:``, ``entries:``, ``updated:``, ``rejected``; not
    the accumulator blobs). HKEYS + HMGET, not HSCAN: HSCAN's MATCH filters after the server has
    copied every visited value, accumulator blobs included, which made every page view and
    ``window=latest`` cost O(state bytes) in Redis (45 ms per call at 80 MB)."""
    names = [f for f in cast(list[bytes], r.hkeys(key)) if f.startswith(_COUNTER_PREFIXES)]
    values = cast(list[bytes | None], r.hmget(key, names)) if names else []
    return {f.decode(): int(v) for f, v in zip(names, values, strict=True) if v is not None}


def _with_prefix(counters: dict[str, int], prefix: str) -> dict[str, int]:
    """The counters whose field starts with ``prefix``, by the rest of the field name."""
    return {f[len(prefix):]: v for f, v in counters.items() if f.startswith(prefix)}


def list_windows(r: AnyRedis, campaign: Campaign) -> list[int]:
    """Windows with at least one counted report, ascending."""
    return [w for w, n in window_counts(r, campaign).items() if n > 0]


def last_updated(r: AnyRedis, campaign: Campaign, window: int | None = None) -> float | None:
    """Epoch seconds of the last commit (touching ``window`` if given), or None."""
    if window is None:
        return _last_updated([_counters(r, key) for key in _state_keys(campaign)])
    stamps = [r.hget(key, f"{UPDATED_PREFIX}{window}") for key in _state_keys(campaign)]
    best = max((int(v) for v in stamps if v is not None), default=None)
    return None if best is None else best / 1000.0


def _last_updated(shards: list[dict[str, int]]) -> float | None:
    best = max((v for c in shards for v in _with_prefix(c, UPDATED_PREFIX).values()), default=None)
    return None if best is None else best / 1000.0


def current_window(campaign: Campaign, now: float | None = None) -> int:
    """The window a report received ``now`` falls in (0 for "all" campaigns)."""
    return keys.window_start(time.time() if now is None else now, campaign.window_seconds)


def resolve_window(r: AnyRedis, campaign: Campaign, spec: str | None,
                   counts: dict[int, int] | None = None) -> int:
    """A ``window=`` query value → window start. ``None``/``""``/``"latest"``: the newest window
    with counted reports (the current window if none; "all" campaigns: 0, read from nothing;
    ``counts``: the reports per window already read, e.g. ``summary(…).windows``); otherwise an
    epoch start aligned to the campaign's window length ("all" campaigns: only 0). Raises
    ``WindowError``."""
    if spec is None or spec == "" or spec == "latest":
        if campaign.window_seconds == 0:
            return 0
        if counts is None:
            counts = window_counts(r, campaign)
        windows = [w for w, n in sorted(counts.items()) if n > 0]
        return windows[-1] if windows else current_window(campaign)
    if not spec.isdigit() or len(spec) > 12:
        raise WindowError(f"window must be 'latest' or an epoch start in seconds, got {spec!r}")
    w = int(spec)
    length = campaign.window_seconds
    if length == 0 and w != 0:
        raise WindowError(f"campaign {campaign.name!r} has window 'all': the only window is 0")
    if length and w % length:
        raise WindowError(f"window {w} is not the start of a {campaign.window} window "
                          f"(a multiple of {length})")
    return w


def backlog(r: AnyRedis, campaign: Campaign, older: Sequence[Campaign] = ()) -> int:
    """Stream entries (batches) the collector accepted that no worker has counted yet: the
    collector's ``accepted_batches`` counter, with the ingress batches the shuffler took replaced
    by the analysis batches it wrote (``keys.shuffle_metrics_key``), minus the entries the workers
    committed or rejected, per shard. (Entries written to a stream by other means are not known
    here.)"""
    return summary(r, campaign, older).backlog


@dataclass
class WindowSummary:
    """Cheap per-campaign numbers for listings (no decoding)."""

    windows: dict[int, int]  # window → reports counted
    rejected: int  # entries that could not be decoded
    updated: float | None  # epoch seconds of the last commit
    backlog: int  # accepted entries not yet counted
    accepted_batches: int  # the collector's counters (batches: as the shuffler re-packed them), summed
    accepted_reports: int
    lag_entries: int  # accepted batches − counted entries − rejected entries (≥ 0)
    lag_reports: int | None  # accepted − counted reports (≥ 0); None once an entry was rejected
    window_updated: dict[int, float] = field(default_factory=dict)  # window → epoch s of its last commit


def summary(r: AnyRedis, campaign: Campaign, older: Sequence[Campaign] = ()) -> WindowSummary:
    """Each shard's counters and the collector's counters read once, everything derived from them.
    ``windows`` and ``updated`` are ``campaign``'s (one version); the collector's counters are the
    campaign's streams', which hold every version's batches, so the lag also subtracts what the
    ``older`` versions counted."""
    shards = [_counters(r, key) for key in _state_keys(campaign)]
    others = [[_counters(r, key) for key in _state_keys(old)] for old in older]
    pipe = r.pipeline(transaction=False)
    for s in range(campaign.shards):
        pipe.hmget(keys.metrics_key(campaign.name, s), keys.ACCEPTED_BATCHES, keys.ACCEPTED_REPORTS)
        pipe.hmget(keys.shuffle_metrics_key(campaign.name, s), keys.INGRESS_BATCHES, keys.ANALYSIS_BATCHES)
    res = pipe.execute()
    # batches bound for the analysis stream: the shuffler replaced the ingress batches it took by
    # the batches it wrote (the ones still in ingress count as one entry each)
    accepted = [(int(b or 0) - int(took or 0) + int(wrote or 0), int(n or 0))
                for (b, n), (took, wrote) in zip(res[::2], res[1::2], strict=True)]
    # entries and reports of windows deleted past retention (``delete_windows``) stay counted
    every = [shards, *others]
    done = [sum(sum(_with_prefix(v[s], ENTRIES_PREFIX).values()) + v[s].get(EXPIRED_ENTRIES, 0)
                for v in every if s < len(v)) for s in range(campaign.shards)]
    rejected_per = [sum(v[s].get(REJECTED, 0) for v in every if s < len(v)) for s in range(campaign.shards)]
    counted = (sum(n for v in every for n in _window_counts(v).values())
               + sum(c.get(EXPIRED_REPORTS, 0) for v in every for c in v))
    windows = _window_counts(shards)
    batches, reports = sum(b for b, _ in accepted), sum(n for _, n in accepted)
    entries, rejected = sum(done), sum(rejected_per)
    return WindowSummary(
        windows=windows, rejected=rejected, updated=_last_updated(shards),
        backlog=sum(max(b - d - x, 0) for (b, _), d, x in zip(accepted, done, rejected_per, strict=True)),
        accepted_batches=batches, accepted_reports=reports,
        lag_entries=max(0, batches - entries - rejected),
        lag_reports=max(0, reports - counted) if rejected == 0 else None,
        window_updated={w: ms / 1000.0 for w, ms in _per_window(shards, UPDATED_PREFIX, max).items()})


# --- writes (the aggregator worker) ---------------------------------------------------------

def delete_windows(r: AnyRedis, campaign: Campaign, windows: list[int]) -> int:
    """Delete every state field of ``windows`` (accumulators and counters) in every shard, each
    shard in one ``scripts.EXPIRE_WINDOWS`` call that adds the windows' report and entry counts
    to ``expired_reports`` / ``expired_entries`` (so ``summary``'s lag stays right). Returns the
    number of fields deleted."""
    if not windows:
        return 0
    script = r.register_script(scripts.EXPIRE_WINDOWS)
    return sum(int(script(keys=[key], args=windows)) for key in _state_keys(campaign))


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
            totals[w] = type(template)(template.mech).merge(acc)
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


def commit(r: AnyRedis, campaign: Campaign, shard: int, consumer: str, ids: list,
           replaced: list[bytes], totals: dict[int, Accumulator], deltas: dict[int, Accumulator],
           entries: dict[int, int], rejected: int) -> bytes:
    """Run ``scripts.COMMIT`` on one shard: if every entry of ``ids`` is still pending to
    ``consumer`` (in group ``keys.GROUP``) and every ``replaced`` field still exists,
    delete those fields, write each window's ``totals`` as one new field, add the ``deltas``'
    reports and ``entries`` to the window counters and ``rejected`` to the rejected count, and
    XACK ``ids``. Returns ``b"ok"``, ``b"lost"`` (an entry was claimed by another consumer) or
    ``b"stale"`` (a field was replaced meanwhile); nothing is written unless ``b"ok"``."""
    now_ms = str(int(time.time() * 1000))
    sets: list = []
    for w, total in totals.items():
        sets += [keys.acc_field(w, secrets.token_hex(8)), total.to_bytes(), f"{UPDATED_PREFIX}{w}", now_ms]
    incr: list = []
    for w, acc in deltas.items():
        incr += [f"{N_PREFIX}{w}", acc.n, f"{ENTRIES_PREFIX}{w}", entries.get(w, 0)]
    if rejected:
        incr += [REJECTED, rejected]
    args = [keys.GROUP, consumer, len(ids), len(replaced), len(sets) // 2, len(incr) // 2,
            *ids, *replaced, *sets, *incr]
    stream = keys.stream_key(campaign.name, shard)
    state = keys.state_key(campaign.name, shard, campaign.version)
    return r.register_script(scripts.COMMIT)(keys=[stream, state], args=args)[0]
