"""OLH decoder: C_v = #{i : H_seed_i(v) = y_i} for every item, by the compiled fused
hash-and-count kernel (``ldptel.mechanisms.kernels.olh``)."""

from __future__ import annotations

from typing import Any

from ldptel.aggregator.decoders.base import PureAccumulator
from ldptel.mechanisms.olh import OLH


class OlhAccumulator(PureAccumulator):
    mechanism_name = "olh"
    mech: OLH

    def add_columns(self, columns: dict[str, Any], count: int) -> None:
        # numba loads on the first decode: ldptel.aggregator imports without it
        from ldptel.mechanisms.kernels.olh import olh_support

        self.state["support"] += olh_support(columns["seeds"], columns["values"], self.mech.g,
                                             self.mech.keys64)
