"""SUE / OUE decoder: C_v = number of reports with bit v set (the compiled bit-sliced column
count over the packed rows, ``ldptel.mechanisms.kernels.bits``)."""

from __future__ import annotations

from typing import Any

from ldptel.aggregator.decoders.base import PureAccumulator


class UnaryAccumulator(PureAccumulator):
    mechanism_name = "unary"

    def add_columns(self, columns: dict[str, Any], count: int) -> None:
        # numba loads on the first decode: ldptel.aggregator imports without it
        from ldptel.mechanisms.kernels.bits import column_ones

        self.state["support"] += column_ones(columns["bits"], self.mech.domain_size)
