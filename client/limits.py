"""The collector's request limits as the SDK knows them, and splitting a batch to fit them.

``GET /v1/campaigns`` publishes ``max_body_bytes`` and ``max_reports_per_batch``; until the SDK
has heard them it assumes the collector's defaults. A chunk is built from rows whose serialized
sizes add up to at most ``Limits.row_budget``; a body that still comes out over the limit, a 413,
or a connection cut while a large body was being written make the SDK split the chunk (a single
row is split into halves by ``split_batch``) instead of re-sending it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ldptel.client.envelope import copy_envelope
from ldptel.mechanisms.base import Mechanism
from ldptel.proto import ReportBatch

ENVELOPE_BYTES = 64  # schema version, batch_id, count and field headers of one ReportBatch
LARGE_BODY = 64 << 10  # a connection cut while writing a body this large: split, don't retry


@dataclass(frozen=True)
class Limits:
    """``max_body_bytes`` and ``max_reports_per_batch`` of the collector (defaults: its own)."""

    max_body_bytes: int = 1 << 20
    max_reports_per_batch: int = 10_000

    @classmethod
    def from_answer(cls, data: dict[str, Any]) -> Limits:
        """The limits of a ``GET /v1/campaigns`` answer; a missing or bad value keeps the default."""
        def positive(key: str, default: int) -> int:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
        return cls(positive("max_body_bytes", cls.max_body_bytes),
                   positive("max_reports_per_batch", cls.max_reports_per_batch))

    def row_budget(self, campaign: str) -> int:
        """Bytes of queued rows that fit in one body of ``campaign``."""
        return max(1, self.max_body_bytes - ENVELOPE_BYTES - len(campaign.encode()))


def split_batch(mech: Mechanism, batch: ReportBatch, parts: int = 2) -> list[ReportBatch]:
    """``batch`` as up to ``parts`` batches of consecutive reports (same campaign and envelope, no
    batch_id)."""
    columns = mech.columns(batch)
    bounds = np.linspace(0, batch.count, min(parts, batch.count) + 1).astype(int)
    return [copy_envelope(batch, mech.pack({k: v[a:b] for k, v in columns.items()}, int(b - a),
                                           batch.campaign, b""))
            for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def fit_rows(mech: Mechanism, batch: ReportBatch, budget: int) -> list[tuple[int, bytes]]:
    """``batch`` as serialized rows ``(count, bytes)`` of at most ``budget`` bytes each (halving;
    a single report larger than the budget stays one row)."""
    data = batch.SerializeToString()
    if len(data) <= budget or batch.count <= 1:
        return [(int(batch.count), data)]
    return [row for part in split_batch(mech, batch) for row in fit_rows(mech, part, budget)]


__all__ = ["ENVELOPE_BYTES", "LARGE_BODY", "Limits", "fit_rows", "split_batch"]
