"""The streams an aggregator worker consumes, and their entries split by campaign version.

A ``Slot`` is one (campaign, shard) stream. The stream holds the batches of every version of the
campaign (each ``ReportBatch`` names its ``campaign_version``; 0 or absent is version 1), so a
slot keeps one ``Campaign`` and one accumulator template per known version: a batch is only ever
decoded with the parameters of the version it names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ldptel.aggregator import store
from ldptel.aggregator.decoders import Accumulator
from ldptel.campaigns.config import Campaign, Config
from ldptel.keys import ENTRY_BATCH, ENTRY_WINDOW, GROUP, stream_key
from ldptel.proto import ReportBatch, batch_version

Parsed = tuple[bytes, int, ReportBatch]  # (entry id, window, batch)


@dataclass
class Slot:
    """One (campaign, shard) stream the worker consumes, with every version of the campaign."""

    versions: dict[int, Campaign]
    shard: int
    templates: dict[int, Accumulator] = field(default_factory=dict)
    history: bool = True  # entries may be pending to this consumer: read them before new ones

    def __post_init__(self) -> None:
        for v, camp in self.versions.items():
            if v not in self.templates:
                self.templates[v] = store.new_accumulator(camp)

    @property
    def campaign(self) -> Campaign:
        """The latest version."""
        return self.versions[max(self.versions)]

    @property
    def template(self) -> Accumulator:
        return self.templates[max(self.versions)]

    def fresh(self, version: int | None = None) -> Accumulator:
        """An empty accumulator of ``version`` (default: the latest), sharing its template's
        mechanism object."""
        template = self.templates[max(self.versions) if version is None else version]
        return template.blank()

    @property
    def stream(self) -> str:
        return stream_key(self.campaign.name, self.shard)


def build_slots(config: Config, old: list[Slot] | None = None) -> list[Slot]:
    """One slot per (campaign, shard) of ``config``, with every version of each campaign. An
    ``old`` slot of the same stream is updated in place (a caller holding it sees the new
    versions), keeping its ``history`` flag and the templates of versions whose parameters did
    not change."""
    kept = {(s.campaign.name, s.shard): s for s in old or []}
    slots = []
    for latest in config.campaigns:
        versions = {c.version: c for c in config.versions(latest.name)}
        for shard in range(latest.shards):
            slot = kept.get((latest.name, shard))
            if slot is None:
                slots.append(Slot(versions, shard))
                continue
            slot.templates = {v: t for v, t in slot.templates.items()
                              if v in versions and slot.versions[v].public() == versions[v].public()}
            slot.versions = versions
            slot.__post_init__()
            slots.append(slot)
    return slots


def split_by_version(entries: list[Any], warn: Callable[[str], None], stream: str
                     ) -> tuple[dict[int, list[Parsed]], list[bytes]]:
    """Stream entries → the parsed entries per campaign version, and the ids of entries that
    cannot be read (no data, no window, not a ``ReportBatch``; each logged with ``warn``)."""
    out: dict[int, list[Parsed]] = {}
    bad: list[bytes] = []
    for eid, fields in entries:
        if not fields:  # pending entry whose data is gone (cannot happen with our trimming)
            bad.append(eid)
            warn(f"aggregate: {stream} entry {eid!r} has no data; skipped")
            continue
        try:
            window = int(fields[ENTRY_WINDOW])
            batch = ReportBatch.FromString(fields[ENTRY_BATCH])
        except Exception as exc:  # noqa: BLE001 - KeyError, ValueError, protobuf's DecodeError
            bad.append(eid)
            warn(f"aggregate: {stream} entry {eid!r} unreadable ({exc}); skipped")
            continue
        out.setdefault(batch_version(batch), []).append((eid, window, batch))
    return out, bad


def every_version(config: Config) -> list[Campaign]:
    """Every version of every campaign of ``config``."""
    return [v for c in config.campaigns for v in config.versions(c.name)]


CLUSTER_BLOCK_MS = 100  # Redis Cluster: longest block on one stream while all are empty


class ClusterReads:
    """New entries of every stream on a Redis Cluster: one ``XREADGROUP`` per stream, pipelined;
    if all are empty and ``block_ms`` is set, block on one stream (each in turn) for at most
    ``CLUSTER_BLOCK_MS``."""

    def __init__(self) -> None:
        self.turn = 0  # which stream the next idle blocking read waits on

    def read(self, r: Any, consumer: str, slots: list[Slot], count: int, block_ms: int | None) -> list[Any]:
        pipe = r.pipeline(transaction=False)
        for slot in slots:
            pipe.xreadgroup(GROUP, consumer, {slot.stream: ">"}, count=count)
        new = [item for res in pipe.execute() for item in (res or [])]
        if new or not block_ms:
            return new
        slot = slots[self.turn % len(slots)]
        self.turn += 1
        resp: Any = r.xreadgroup(GROUP, consumer, {slot.stream: ">"}, count=count,
                                 block=min(block_ms, CLUSTER_BLOCK_MS))
        return resp or []
