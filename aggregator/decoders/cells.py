"""The accumulator of a campaign with breakdown dimensions (issue 28, ``ldptel.dimensions``): one
inner accumulator — the campaign's own — per cell, kept as a field of the state, so a commit,
its exactly-once checks and its size-tiered folding are those of every other campaign (the worker
and the store see one accumulator per window).

- ``add(batch)``: the batch's dimension values (canonical, as the collector stored them; mapped
  again with ``Dimensions.canonical``, so an odd value still lands in ``other``) pick the cell,
  whose inner accumulator adds the batch.
- merge: cell by cell (states add, as every state does).
- ``state`` (what ``publish.state_digest`` hashes): ``n`` (the total) and each non-empty cell's
  arrays under ``c<cell>:<key>``; ``to_bytes``: each non-empty cell's own ``to_bytes`` under
  ``c<cell>``, so a commit's delta holds the cells it touched only, and the stored state is at
  most cells × one campaign's state (``campaign_limits.check_cell_costs``).
- decoding is per cell (``cell_estimates``): ``aggregator.breakdown`` releases the cells that
  hold ``min_reports`` and sums them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from ldptel.aggregator.decoders.base import FINGERPRINT_KEY, Accumulator
from ldptel.dimensions import Dimensions
from ldptel.mechanisms.estimates import FrequencyEstimate, MeanEstimate
from ldptel.proto import ReportBatch


class CellAccumulator(Accumulator):
    """One ``make()`` accumulator per cell of ``cells`` (module docstring)."""

    mechanism_name = "cells"

    def __init__(self, make: Callable[[], Accumulator], cells: Dimensions) -> None:
        self.make, self.cells = make, cells
        self.inner: dict[int, Accumulator] = {}
        super().__init__(make().mech)

    def empty(self) -> dict[str, np.ndarray]:
        return {}

    def sync(self) -> None:
        """``state``: the total ``n`` and the cells' arrays (views, not copies)."""
        self.state = {"n": np.array([sum(a.n for a in self.inner.values())], dtype=np.int64),
                      **{f"c{i}:{k}": v for i in sorted(self.inner) for k, v in self.inner[i].state.items()}}

    def cell(self, index: int) -> Accumulator:
        """The inner accumulator of cell ``index`` (made empty on first use)."""
        acc = self.inner.get(index)
        if acc is None:
            acc = self.inner[index] = self.make()
        return acc

    def add_columns(self, columns: dict[str, Any], count: int) -> None:  # pragma: no cover - add() routes
        raise TypeError("a CellAccumulator adds whole batches (add), routed by their dimensions")

    def add(self, batch: ReportBatch) -> None:
        index = self.cells.cell_of({d.name: d.value for d in batch.dimensions})
        self.cell(index).add(batch)
        self.sync()

    def estimate(self) -> FrequencyEstimate | MeanEstimate:  # pragma: no cover - per cell
        raise TypeError("a CellAccumulator is decoded per cell (cell_estimates)")

    def cell_counts(self) -> dict[int, int]:
        """Reports per non-empty cell."""
        return {i: a.n for i, a in sorted(self.inner.items()) if a.n}

    def blank(self) -> CellAccumulator:
        return CellAccumulator(self.make, self.cells)

    def fingerprint(self) -> str:
        return json.dumps([self.make().fingerprint(), self.cells.public()], sort_keys=True)

    def merge(self, other: Accumulator) -> Accumulator:
        if not isinstance(other, CellAccumulator):
            raise ValueError(f"cannot merge {type(other).__name__} into CellAccumulator")
        self.check_compatible(other.fingerprint())
        for i, acc in other.inner.items():
            self.cell(i).merge(acc)
        self.sync()
        return self

    def stored_nbytes(self) -> int:
        return sum(a.stored_nbytes() for a in self.inner.values())

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        arrays: dict[str, Any] = {FINGERPRINT_KEY: np.frombuffer(self.fingerprint().encode(), dtype=np.uint8)}
        for i, acc in self.inner.items():
            if acc.n:
                arrays[f"c{i}"] = np.frombuffer(acc.to_bytes(), dtype=np.uint8)
        np.savez(buf, **arrays)
        return buf.getvalue()

    def load(self, data: bytes) -> CellAccumulator:
        """Bytes of ``to_bytes`` back into an accumulator of the same cells (``ValueError`` if
        they were made under other parameters or other dimensions)."""
        out = self.blank()
        template = self.make()
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            if FINGERPRINT_KEY not in stored:
                raise ValueError("stored state holds no cells: the campaign's dimensions changed")
            out.check_compatible(stored[FINGERPRINT_KEY].tobytes().decode())
            for key in stored.files:
                if key.startswith("c") and key[1:].isdigit():
                    index = int(key[1:])
                    if not 0 <= index < self.cells.n_cells:
                        raise ValueError(f"stored cell {index} is not a cell of the campaign")
                    out.inner[index] = template.load(stored[key].tobytes())
        out.sync()
        return out

    @classmethod
    def from_bytes(cls, mech, data: bytes) -> Accumulator:  # pragma: no cover - needs its cells
        raise TypeError("a CellAccumulator is loaded from a template of its cells (load)")


__all__ = ["CellAccumulator"]
