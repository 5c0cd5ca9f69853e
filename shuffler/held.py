"""What a shuffler holds in memory for one (campaign, shard) ingress stream: the entries it has read
and not yet released, grouped by (campaign version, window, cell), each group with the time it was
first seen (this process's monotonic clock: nothing about it is stored), and when a group is due.
A cell is the batches' dimension values (issue 28, ``ldptel.dimensions``; none for a campaign
without dimensions, the collector having stored them canonical): reports are shuffled and released
within a cell only, so each cell's release threshold holds for that cell.

The entries themselves stay in the ingress stream until their release (``scripts.SHUFFLE``), so
dropping this state (a refused release, a lost lease, a restart) loses nothing: the stream is read
again from its start.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from ldptel import keys
from ldptel.campaigns.config import Campaign
from ldptel.proto import ReportBatch, SealedBatch


@dataclass
class Group:
    """The held entries of one (version, window, cell)."""

    version: int
    window: int
    cell: tuple[tuple[str, str], ...] = ()  # the dimension values (name, value) of its batches
    first_seen: float = field(default_factory=time.monotonic)
    ids: list[bytes] = field(default_factory=list)
    batches: list[ReportBatch] = field(default_factory=list)  # not sealed: the batches as read
    reports: int = 0
    sealed: bool = False  # sealed envelopes (privacy_mode shuffled*), of any analyzer key
    key_id: int | None = None  # sealed: the analyzer key of the envelope read last (the newest)
    key_entries: dict[int, int] = field(default_factory=dict)  # sealed: analyzer key id → entries
    # sealed, held compactly (a window of 10⁶ devices is one group, issue 38): every envelope's
    # messages (the sealed bytes, in read order), and per envelope its message count and key id —
    # never the parsed envelopes
    messages: list[bytes] = field(default_factory=list)
    sizes: array[int] = field(default_factory=lambda: array("I"))
    key_ids: array[int] = field(default_factory=lambda: array("I"))

    @property
    def ingress_group(self) -> str:
        """The collector's group of these entries (``keys.ingress_group``: its bound, lowered
        with each move or discard): the same (version, window, cell)."""
        return keys.ingress_group(self.version, self.window, self.cell)

    def add(self, eid: bytes, batch: Any, count: int, key_id: int | None = None) -> None:
        """Hold one entry; a sealed envelope (``key_id``: its analyzer key) as its messages."""
        self.ids.append(eid)
        self.reports += count
        if key_id is None:
            self.batches.append(batch)
            return
        self.messages.extend(batch.messages)
        self.sizes.append(len(batch.messages))
        self.key_ids.append(key_id)
        self.key_id = key_id
        self.key_entries[key_id] = self.key_entries.get(key_id, 0) + 1

    def due(self, campaign: Campaign, max_held: int, now: float) -> str | None:
        """Why the group is released now (``min_reports``, ``max_delay``, ``max_held``), or None:
        it holds ≥ the campaign's ``shuffle_min_reports``, its first report waited
        ``shuffle_max_delay``, or it holds ``[shuffler] max_held_reports``."""
        if self.reports >= campaign.shuffle_min_reports:
            return "min_reports"
        if self.reports >= max_held:
            return "max_held"
        if now - self.first_seen >= campaign.shuffle_max_delay_seconds:
            return "max_delay"
        return None


@dataclass
class Held:
    """One ingress stream's read position and held groups."""

    campaign: str
    shard: int
    cursor: str = "-"  # the last entry id read ("-": read from the start)
    groups: dict[tuple[Any, ...], Group] = field(default_factory=dict)
    unknown: dict[bytes, tuple[int, ReportBatch, int]] = field(default_factory=dict)  # version unknown
    settled: bool = False  # no journaled release of another shuffler holds the stream (``release``)
    # sealed envelopes read on a shard ≠ 0 of a campaign with several shards, to hand to shard 0
    # (``shuffler.handoff``): (entry id, window, envelope, ingress group)
    outgoing: list[tuple[bytes, int, Any, str]] = field(default_factory=list)
    read_start: float = 0.0  # epoch s at which the last read began
    read_all: bool = False  # whether it reached the stream's end

    def reset(self) -> None:
        """Forget everything (it is all still in ingress): read again from the start, after
        settling any release that holds the stream."""
        self.settled = False
        self.cursor = "-"
        self.groups.clear()
        self.unknown.clear()
        self.outgoing.clear()

    def add(self, eid: bytes, window: int, version: int, batch, count: int,
            key_id: int | None = None) -> None:
        """Hold one entry in its (version, window, cell) group. A sealed envelope (``key_id``: the
        analyzer key it is sealed to) joins the same group whatever its key: a key rotation never
        splits a group (issue 36), the release carries each message's key id."""
        cell = cell_of(batch)
        key = (version, window, cell)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(version, window, cell, sealed=key_id is not None)
        group.add(eid, batch, count, key_id)

    @property
    def reports(self) -> int:
        return sum(g.reports for g in self.groups.values())


def cell_of(batch: ReportBatch | SealedBatch) -> tuple[tuple[str, str], ...]:
    """A batch's cell: its dimension values as (name, value) pairs (empty without)."""
    return tuple((d.name, d.value) for d in batch.dimensions)
