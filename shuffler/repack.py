"""What a release does to the reports of one (campaign version, window): split every ingress batch
into its reports (columns, one row per report), permute all rows with ONE uniform permutation
(OS randomness), and re-pack them into new batches of about ``batch_reports`` reports that carry
no batch id and no trace of how the devices grouped them.

A batch that cannot be parsed with the version's mechanism (cannot happen for what the collector
accepted) is forwarded alone with its batch id cleared, so the aggregator rejects it as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.randomness import OS_RANDOM, OsRandom, permutation
from ldptel.proto import ReportBatch


@dataclass
class Release:
    """The batches to write to the analysis stream: ``shuffled`` (re-packed) and ``forwarded``
    (unparsable ingress batches, batch id cleared), as (serialized batch, reports) pairs."""

    shuffled: list[tuple[bytes, int]]
    forwarded: list[tuple[bytes, int]]

    @property
    def batches(self) -> list[tuple[bytes, int]]:
        return self.shuffled + self.forwarded


def split_sizes(n: int, batch_reports: int) -> list[int]:
    """⌈n / batch_reports⌉ batch sizes summing to n, as equal as possible (differ by ≤ 1)."""
    if n <= 0:
        return []
    k = -(-n // max(batch_reports, 1))
    base, extra = divmod(n, k)
    return [base + 1] * extra + [base] * (k - extra)


def parse_all(mech: Mechanism, batches: list[ReportBatch]
              ) -> tuple[list[tuple[dict[str, Any], int]], list[ReportBatch]]:
    """(columns, count) of every batch the mechanism reads, and the batches it cannot read.

    The collector validated every report of these batches (``Mechanism.checked_columns``), so
    they are not validated again: only their wire shape is read (``Mechanism.columns``, which
    refuses a bytes field of the wrong size) and every column's length checked against the
    batch's count (``count`` rows, or none); a batch failing either is forwarded alone."""
    parsed, bad = [], []
    for batch in batches:
        count = batch.count
        if count < 1:  # an entry the shuffler could not read at all
            bad.append(batch)
            continue
        try:
            cols = mech.columns(batch)
        except Exception:  # noqa: BLE001 - InvalidReport, ValueError, protobuf errors: forwarded
            bad.append(batch)
            continue
        if any(len(col) not in (0, count) for col in cols.values()):
            bad.append(batch)
            continue
        parsed.append((cols, int(count)))
    return parsed, bad


# a batch's fields besides its payload that a merge may drop: the re-packed batches set their own,
# and a group's batches share their window and cell (``held.Group``: the dimension values)
BATCH_FIELDS = ("campaign", "batch_id", "count", "schema_version", "campaign_version", "window", "dimensions")


def merged_columns(mech: Mechanism, batches: list[ReportBatch]) -> tuple[dict[str, Any], int] | None:
    """Every batch's columns at once (columnar: no per-batch numpy): the payloads merged into one
    (``MergeFrom`` concatenates a repeated field's values in batch order), each bytes field of
    fixed-width rows joined, then one ``Mechanism.columns``. Sizes are checked per batch (each
    repeated field holds ``count`` values or none, each row field ``count`` rows) and over the
    whole. None when that is not possible (a payload with a bit vector packed over the batch, a
    column some batches fill and others not, a batch of the wrong size): ``parse_all`` then
    reads batch by batch."""
    if not batches or any(b.count < 1 for b in batches):
        return None
    kind = batches[0].WhichOneof("payload")
    if kind is None or any(b.WhichOneof("payload") != kind for b in batches):
        return None
    try:
        probe = mech.columns(batches[0])
    except Exception:  # noqa: BLE001 - the batch-by-batch path forwards it
        return None
    fields = getattr(batches[0], kind).DESCRIPTOR.fields
    rows: dict[str, int] = {}
    for f in fields:
        if f.type == f.TYPE_BYTES:
            col = probe.get(f.name)
            if col is None or np.ndim(col) != 2:
                return None
            rows[f.name] = int(col.shape[1])
    repeated = [f.name for f in fields if f.name not in rows]
    known = {*BATCH_FIELDS, kind}
    merged = ReportBatch()
    out = getattr(merged, kind)
    total = 0
    for batch in batches:
        if any(f.name not in known for f, _ in batch.ListFields()):
            return None  # a field beyond the payload (a newer wire format): batch by batch
        payload, count = getattr(batch, kind), batch.count
        for name in repeated:
            if len(getattr(payload, name)) not in (0, count):
                return None
        for name, width in rows.items():
            if len(getattr(payload, name)) != count * width:
                return None
        out.MergeFrom(payload)
        total += count
    for name in rows:
        setattr(out, name, b"".join(getattr(getattr(b, kind), name) for b in batches))
    merged.count = total
    try:
        cols = mech.columns(merged)
    except Exception:  # noqa: BLE001
        return None
    if any(len(col) != total for col in cols.values()):
        return None
    return cols, total


def permuted_columns(parsed: list[tuple[dict[str, Any], int]], rng: np.random.Generator | OsRandom
                     ) -> tuple[dict[str, Any], int]:
    """Every column concatenated over the batches, its rows permuted by one uniform permutation
    shared by all columns; columns that no report fills stay empty. Returns (columns, n)."""
    n = sum(count for _, count in parsed)
    order = permutation(rng, n)
    out: dict[str, Any] = {}
    for name in parsed[0][0]:
        parts = [np.asarray(cols[name]) for cols, _ in parsed]
        whole = np.concatenate(parts, axis=0)
        if len(whole) == n:
            out[name] = whole[order]
        elif len(whole) == 0:
            out[name] = whole
        else:
            raise ValueError(f"column {name!r} has {len(whole)} rows for {n} reports")
    return out, n


def forwarded(batch: ReportBatch) -> tuple[bytes, int]:
    """An unparsable batch as it goes on: its batch id cleared."""
    copy = ReportBatch()
    copy.CopyFrom(batch)
    copy.batch_id = b""
    return copy.SerializeToString(), int(batch.count)


def repack(mech: Mechanism, batches: list[ReportBatch], campaign: str, version: int,
           batch_reports: int, rng: np.random.Generator | OsRandom = OS_RANDOM,
           cell: Sequence[tuple[str, str]] = ()) -> Release:
    """The release of ``batches`` (one version, window and cell of ``campaign``): their reports
    permuted and re-packed (``mech.pack`` with an empty batch id, ``campaign_version`` =
    ``version`` and the ``cell``'s dimension values) in batches of about ``batch_reports``."""
    whole = merged_columns(mech, batches)
    parsed, bad = ([whole], []) if whole is not None else parse_all(mech, batches)
    shuffled: list[tuple[bytes, int]] = []
    if parsed:
        cols, n = permuted_columns(parsed, rng)
        start = 0
        for size in split_sizes(n, batch_reports):
            part = {k: (v[start:start + size] if len(v) == n else v) for k, v in cols.items()}
            batch = mech.pack(part, size, campaign, batch_id=b"")
            batch.campaign_version = version
            for name, value in cell:
                batch.dimensions.add(name=name, value=value)
            shuffled.append((batch.SerializeToString(), size))
            start += size
    return Release(shuffled, [forwarded(b) for b in bad])
