"""Aggregated state in Redis: how the worker stores it and how everyone else reads it.

Layout of the state hash ``{ldptel:<campaign>:<shard>}:state`` (one per stream shard, see
``ldptel.streams``):

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

The functions here are the read API for the export endpoints, the heavy-hitter/range queries
and the operator pages: ``load_accumulator`` (sum over shards and fields), ``list_windows``,
``window_counts``, ``last_updated``, ``resolve_window``, ``backlog``, ``summary``.
Each takes a client from ``ldptel.redis_client.connect`` — one server or a Redis Cluster: every
read touches the keys of one (campaign, shard) hash tag at a time, and a campaign is read as the
sum over its shards.

Every campaign kind (frequency, heavy_hitters, range) is aggregated through
``ACCUMULATOR_FACTORIES`` (campaign → empty ``Accumulator``: mergeable state, ``add``/``merge``/
``to_bytes``); ``register_accumulator(kind, factory)`` replaces or adds one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import redis as redis_lib

from ldptel.aggregator.decoders import Accumulator, accumulator_for
from ldptel.config import Campaign
from ldptel.streams import metrics_key, state_key, window_start

ACC_PREFIX = "acc:"

AccumulatorFactory = Callable[[Campaign], Accumulator]


def _mechanism_accumulator(campaign: Campaign) -> Accumulator:
    return accumulator_for(campaign.mechanism())


# kind → factory of an empty accumulator: every kind's campaign builds its mechanism
# (``Campaign.mechanism()``) and the decoders map it to its accumulator.
ACCUMULATOR_FACTORIES: dict[str, AccumulatorFactory] = {
    "frequency": _mechanism_accumulator,
    "heavy_hitters": _mechanism_accumulator,
    "range": _mechanism_accumulator,
}


def register_accumulator(kind: str, factory: AccumulatorFactory) -> None:
    """Make campaigns of ``kind`` aggregatable: ``factory(campaign)`` → empty ``Accumulator``."""
    ACCUMULATOR_FACTORIES[kind] = factory


def has_accumulator(campaign: Campaign) -> bool:
    return campaign.kind in ACCUMULATOR_FACTORIES


def new_accumulator(campaign: Campaign) -> Accumulator:
    """An empty accumulator for ``campaign``; ``ValueError`` if its kind has no decoder yet."""
    try:
        factory = ACCUMULATOR_FACTORIES[campaign.kind]
    except KeyError:
        raise ValueError(f"campaign {campaign.name!r}: no aggregator for kind {campaign.kind!r}") from None
    return factory(campaign)


def decode_accumulator(campaign: Campaign, data: bytes, template: Accumulator | None = None) -> Accumulator:
    """Accumulator bytes of ``campaign`` back into an object (``ValueError`` if they do not fit
    the campaign's current parameters, e.g. a changed domain size)."""
    template = template if template is not None else new_accumulator(campaign)
    return type(template).from_bytes(template.mech, data)


# --- field names ---------------------------------------------------------------------------

def acc_field(window: int, uid: str) -> str:
    return f"{ACC_PREFIX}{window}:{uid}"


def field_window(field: str | bytes) -> int | None:
    """The window of an ``acc:<window>:<uid>`` field name, else None."""
    if isinstance(field, bytes):
        field = field.decode()
    if not field.startswith(ACC_PREFIX):
        return None
    try:
        return int(field[len(ACC_PREFIX):].split(":", 1)[0])
    except ValueError:
        return None


def _state_keys(campaign: Campaign) -> list[str]:
    return [state_key(campaign.name, s) for s in range(campaign.shards)]


# --- reads ---------------------------------------------------------------------------------

_READ_WINDOW = """
local out = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(field, 1, #ARGV[1]) == ARGV[1] then
    out[#out + 1] = redis.call('HGET', KEYS[1], field)
  end
end
return out
"""


def load_accumulator(r: redis_lib.Redis, campaign: Campaign, window: int) -> tuple[Accumulator, int]:
    """Everything counted for ``campaign`` in ``window`` (epoch start; 0 for "all" campaigns):
    the sum of all accumulator fields of all shards, and its report count (an empty accumulator
    and 0 when nothing was counted). Each shard's fields are read atomically, so the result
    includes exactly the entries the workers had acknowledged at that moment."""
    acc = new_accumulator(campaign)
    prefix = f"{ACC_PREFIX}{window}:"
    for key in _state_keys(campaign):
        for data in r.eval(_READ_WINDOW, 1, key, prefix):
            acc.merge(decode_accumulator(campaign, data, acc))
    return acc, acc.n


def window_counts(r: redis_lib.Redis, campaign: Campaign) -> dict[int, int]:
    """Reports counted per window (summed over shards), ascending by window."""
    out: dict[int, int] = {}
    for key in _state_keys(campaign):
        for field, value in _hscan_prefix(r, key, "n:"):
            w = int(field[2:])
            out[w] = out.get(w, 0) + int(value)
    return dict(sorted(out.items()))


def _hscan_prefix(r: redis_lib.Redis, key: str, prefix: str) -> list[tuple[str, bytes]]:
    return [(f.decode(), v) for f, v in r.hscan_iter(key, match=f"{prefix}*", count=1000)]


def list_windows(r: redis_lib.Redis, campaign: Campaign) -> list[int]:
    """Windows with at least one counted report, ascending."""
    return [w for w, n in window_counts(r, campaign).items() if n > 0]


def last_updated(r: redis_lib.Redis, campaign: Campaign, window: int | None = None) -> float | None:
    """Epoch seconds of the last commit (touching ``window`` if given), or None."""
    best: int | None = None
    for key in _state_keys(campaign):
        if window is not None:
            values = [r.hget(key, f"updated:{window}")]
        else:
            values = [v for _, v in _hscan_prefix(r, key, "updated:")]
        for v in values:
            if v is not None and (best is None or int(v) > best):
                best = int(v)
    return None if best is None else best / 1000.0


def current_window(campaign: Campaign, now: float | None = None) -> int:
    """The window a report received ``now`` falls in (0 for "all" campaigns)."""
    return window_start(time.time() if now is None else now, campaign.window_seconds)


class WindowError(ValueError):
    """An invalid ``window`` query value (the export API answers 400)."""


def resolve_window(r: redis_lib.Redis, campaign: Campaign, spec: str | None) -> int:
    """A ``window=`` query value → window start. ``None``/``""``/``"latest"``: the newest window
    with counted reports (the current window if none); otherwise an epoch start aligned to the
    campaign's window length ("all" campaigns: only 0). Raises ``WindowError``."""
    if spec is None or spec == "" or spec == "latest":
        windows = list_windows(r, campaign)
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


def backlog(r: redis_lib.Redis, campaign: Campaign) -> int:
    """Stream entries (batches) the collector accepted that no worker has counted yet: the
    collector's ``accepted_batches`` counter minus the entries the workers committed or rejected,
    per shard. (Entries written to a stream by other means are not known here.)"""
    lag = 0
    for s in range(campaign.shards):
        accepted = int(r.hget(metrics_key(campaign.name, s), "accepted_batches") or 0)
        key = state_key(campaign.name, s)
        done = sum(int(v) for _, v in _hscan_prefix(r, key, "entries:")) + int(r.hget(key, "rejected") or 0)
        lag += max(accepted - done, 0)
    return lag


@dataclass
class WindowSummary:
    """Cheap per-campaign numbers for listings (no decoding)."""

    windows: dict[int, int]  # window → reports counted
    rejected: int  # entries that could not be decoded
    updated: float | None  # epoch seconds of the last commit
    backlog: int  # accepted entries not yet counted
    accepted_batches: int  # the collector's counters, summed over shards
    accepted_reports: int
    lag_entries: int  # accepted batches − counted entries − rejected entries (≥ 0)
    lag_reports: int | None  # accepted − counted reports (≥ 0); None once an entry was rejected


def summary(r: redis_lib.Redis, campaign: Campaign) -> WindowSummary:
    keys = _state_keys(campaign)
    rejected = sum(int(r.hget(k, "rejected") or 0) for k in keys)
    windows = window_counts(r, campaign)
    pipe = r.pipeline(transaction=False)
    for s in range(campaign.shards):
        pipe.hmget(metrics_key(campaign.name, s), "accepted_batches", "accepted_reports")
    accepted = pipe.execute()
    batches = sum(int(b or 0) for b, _ in accepted)
    reports = sum(int(n or 0) for _, n in accepted)
    entries = sum(int(v) for key in keys for _, v in _hscan_prefix(r, key, "entries:"))
    counted = sum(windows.values())
    return WindowSummary(windows=windows, rejected=rejected, updated=last_updated(r, campaign),
                         backlog=backlog(r, campaign), accepted_batches=batches, accepted_reports=reports,
                         lag_entries=max(0, batches - entries - rejected),
                         lag_reports=max(0, reports - counted) if rejected == 0 else None)
