"""Counters of the aggregator state, read for listings, pages and the export API (no decoding).

The counts hash ``keys.counts_key(campaign, shard, version)`` (layout: ``ldptel.aggregator.store``,
its only writer; the accumulator blobs are in the state hash, which only the aggregator reads)
holds per window ``n:<window>`` (reports counted),
``entries:<window>`` (stream entries counted) and ``updated:<window>`` (epoch ms of the last
commit), and ``rejected``, ``expired_entries``, ``expired_reports``. This module reads those
counters, never the blobs: ``window_counts``, ``window_count``, ``list_windows``,
``last_updated``, ``current_window``, ``resolve_window``, ``backlog``, ``summary``. A campaign is
read as the sum over its shards; a ``Campaign`` is one version.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from ldptel import keys
from ldptel.campaigns.config import Campaign
from ldptel.errors import WindowError
from ldptel.keys import (
    ENTRIES_PREFIX,
    EXPIRED_ENTRIES,
    EXPIRED_REPORTS,
    N_PREFIX,
    REJECTED,
    UPDATED_PREFIX,
)
from ldptel.numbers import ascii_int
from ldptel.store.redis_client import AnyRedis


def state_keys(campaign: Campaign) -> list[str]:
    """The version's state hashes, one per shard (the aggregator's alone)."""
    return [keys.state_key(campaign.name, s, campaign.version) for s in range(campaign.shards)]


def counts_keys(campaign: Campaign) -> list[str]:
    """The version's counter hashes, one per shard (what this module reads)."""
    return [keys.counts_key(campaign.name, s, campaign.version) for s in range(campaign.shards)]


def window_counts(r: AnyRedis, campaign: Campaign) -> dict[int, int]:
    """Reports counted per window (summed over shards), ascending by window."""
    return _window_counts([_counters(r, key) for key in counts_keys(campaign)])


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
    return sum(int(r.hget(key, f"{N_PREFIX}{window}") or 0) for key in counts_keys(campaign))


_COUNTER_PREFIXES = (N_PREFIX.encode(), ENTRIES_PREFIX.encode(), UPDATED_PREFIX.encode(), REJECTED.encode(),
                     EXPIRED_ENTRIES.encode(), EXPIRED_REPORTS.encode())


def _counters(r: AnyRedis, key: str) -> dict[str, int]:
    """Every counter field of a counts hash (``n:``, ``entries:``, ``updated:``, ``rejected``,
    ``expired_*``): one HGETALL of small numbers (the accumulator blobs are in the state hash,
    which no reader reads)."""
    raw = cast(dict[bytes, bytes], r.hgetall(key))
    return {f.decode(): int(v) for f, v in raw.items() if f.startswith(_COUNTER_PREFIXES)}


def _with_prefix(counters: dict[str, int], prefix: str) -> dict[str, int]:
    """The counters whose field starts with ``prefix``, by the rest of the field name."""
    return {f[len(prefix):]: v for f, v in counters.items() if f.startswith(prefix)}


def list_windows(r: AnyRedis, campaign: Campaign) -> list[int]:
    """Windows with at least one counted report, ascending."""
    return [w for w, n in window_counts(r, campaign).items() if n > 0]


def last_updated(r: AnyRedis, campaign: Campaign, window: int | None = None) -> float | None:
    """Epoch seconds of the last commit (touching ``window`` if given), or None."""
    if window is None:
        return _last_updated([_counters(r, key) for key in counts_keys(campaign)])
    stamps = [r.hget(key, f"{UPDATED_PREFIX}{window}") for key in counts_keys(campaign)]
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
    parsed = ascii_int(spec, 12)
    if parsed is None:
        raise WindowError(f"window must be 'latest', 'current' or an epoch start in seconds, got {spec!r}")
    w = parsed
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
    # accepted batches / reports not yet taken from the ingress stream by a shuffler (with
    # ``[shuffler] enabled``: held by it, normally until ``shuffle_min_reports`` or
    # ``shuffle_max_delay``; with the shuffler off these are simply the accepted ones)
    held_batches: int = 0
    held_reports: int = 0


def summary(r: AnyRedis, campaign: Campaign, older: Sequence[Campaign] = ()) -> WindowSummary:
    """Each shard's counters and the collector's counters read once, everything derived from them.
    ``windows`` and ``updated`` are ``campaign``'s (one version); the collector's counters are the
    campaign's streams', which hold every version's batches, so the lag also subtracts what the
    ``older`` versions counted."""
    shards = [_counters(r, key) for key in counts_keys(campaign)]
    others = [[_counters(r, key) for key in counts_keys(old)] for old in older]
    pipe = r.pipeline(transaction=False)
    for s in range(campaign.shards):
        pipe.hmget(keys.metrics_key(campaign.name, s), keys.ACCEPTED_BATCHES, keys.ACCEPTED_REPORTS)
        pipe.hmget(keys.shuffle_metrics_key(campaign.name, s), keys.INGRESS_BATCHES, keys.ANALYSIS_BATCHES,
                   keys.INGRESS_REPORTS, keys.SHUFFLE_DISCARDED)
    res = pipe.execute()
    held = [(max(0, int(b or 0) - int(took or 0)), max(0, int(n or 0) - int(took_n or 0)))
            for (b, n), (took, _, took_n, _) in zip(res[::2], res[1::2], strict=True)]
    # batches bound for the analysis stream: the shuffler replaced the ingress batches it took by
    # the batches it wrote (the ones still in ingress count as one entry each); the reports it
    # discarded (a shuffled campaign's window closed below batch_min) will never be counted
    accepted = [(int(b or 0) - int(took or 0) + int(wrote or 0), int(n or 0) - int(gone or 0))
                for (b, n), (took, wrote, _, gone) in zip(res[::2], res[1::2], strict=True)]
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
        window_updated={w: ms / 1000.0 for w, ms in _per_window(shards, UPDATED_PREFIX, max).items()},
        held_batches=sum(b for b, _ in held), held_reports=sum(n for _, n in held))
