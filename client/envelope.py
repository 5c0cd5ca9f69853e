"""A batch's envelope beyond its reports: the window it aggregates (device-level kinds) and its
dimension values (``ReportBatch.window``, ``ReportBatch.dimensions``; issue 28). Every report of a
batch shares them, so the SDK queues rows by envelope (``group_of``) and keeps it when it packs
rows into a chunk or splits a batch (``copy_envelope``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ldptel.proto import ReportBatch


def group_of(batch: ReportBatch) -> str:
    """The queue's grouping of a row (``ReportQueue``'s ``grp``): rows of one chunk share their
    window and dimension values, which are the batch's envelope (empty for neither)."""
    if not batch.window and not batch.dimensions:
        return ""
    return json.dumps([int(batch.window), [[d.name, d.value] for d in batch.dimensions]])


def set_envelope(batch: ReportBatch, window: int, dims: Sequence[tuple[str, str]]) -> ReportBatch:
    """Set ``batch``'s window and dimension values (the rows of one chunk share them)."""
    batch.window = window
    del batch.dimensions[:]
    for name, v in dims:
        batch.dimensions.add(name=name, value=v)
    return batch


def copy_envelope(src: ReportBatch, dst: ReportBatch) -> ReportBatch:
    """``dst`` with ``src``'s window and dimension values (a re-packed or split batch keeps them)."""
    return set_envelope(dst, src.window, [(d.name, d.value) for d in src.dimensions])


__all__ = ["copy_envelope", "group_of", "set_envelope"]
