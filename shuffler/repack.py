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
              ) -> tuple[list[tuple[dict, int]], list[ReportBatch]]:
    """(columns, count) of every batch the mechanism reads (``checked_columns``: each column has
    ``count`` rows or none), and the batches it cannot read."""
    parsed, bad = [], []
    for batch in batches:
        if batch.count < 1:  # an entry the shuffler could not read at all
            bad.append(batch)
            continue
        try:
            cols = mech.checked_columns(batch)
        except Exception:  # noqa: BLE001 - InvalidReport, ValueError, protobuf errors: forwarded
            bad.append(batch)
            continue
        parsed.append((cols, int(batch.count)))
    return parsed, bad


def permuted_columns(parsed: list[tuple[dict, int]], rng: np.random.Generator | OsRandom
                     ) -> tuple[dict, int]:
    """Every column concatenated over the batches, its rows permuted by one uniform permutation
    shared by all columns; columns that no report fills stay empty. Returns (columns, n)."""
    n = sum(count for _, count in parsed)
    order = permutation(rng, n)
    out: dict = {}
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
    parsed, bad = parse_all(mech, batches)
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
