"""SUE / OUE decoder: C_v = number of reports with bit v set."""

from __future__ import annotations

import numpy as np

from ldptel.aggregator.decoders.base import PureAccumulator

ROWS = 255  # a uint8 lane of the uint64 row sum holds at most 255 ones


def column_popcount(packed: np.ndarray, width: int) -> np.ndarray:
    """Ones per column of a row-packed bit matrix ((n, ceil(width/8)) uint8) → int64[width].

    Unpacks 255 rows at a time and sums them as uint64 words (8 byte-counters per word)."""
    out = np.zeros(width, dtype=np.int64)
    row_bytes = packed.shape[1]
    pad = (-row_bytes * 8) % 64
    scratch = np.zeros((ROWS, row_bytes * 8 + pad), dtype=np.uint8)
    for start in range(0, packed.shape[0], ROWS):
        block = packed[start : start + ROWS]
        m = block.shape[0]
        scratch[:m, : row_bytes * 8] = np.unpackbits(block, axis=1)
        lanes = scratch[:m].view(np.uint64).sum(axis=0, dtype=np.uint64)
        out += lanes.view(np.uint8)[:width]
    return out


class UnaryAccumulator(PureAccumulator):
    mechanism_name = "unary"

    def add_columns(self, columns: dict, count: int) -> None:
        self.state["support"] += column_popcount(columns["bits"], self.mech.domain_size)
