"""OLH decoder: C_v = #{i : H_seed_i(v) = y_i}, evaluated for every item in blocks of reports
(four numpy passes per report × item; see ``ldptel.mechanisms.hashing``)."""

from __future__ import annotations

from ldptel.aggregator.decoders.base import PureAccumulator
from ldptel.mechanisms import hashing
from ldptel.mechanisms.olh import OLH


class OlhAccumulator(PureAccumulator):
    mechanism_name = "olh"
    mech: OLH

    def add_columns(self, columns: dict, count: int) -> None:
        a, b, w = hashing.olh_match_params(columns["seeds"], columns["values"], self.mech.g)
        self.state["support"] += hashing.olh_support_counts(a, b, w, self.mech.keys)
