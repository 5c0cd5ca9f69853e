"""GRR decoder: C_v = #{reports equal to v}."""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.aggregator.decoders.base import PureAccumulator


class GrrAccumulator(PureAccumulator):
    mechanism_name = "grr"

    def add_columns(self, columns: dict[str, Any], count: int) -> None:
        self.state["support"] += np.bincount(columns["values"], minlength=self.mech.domain_size)
