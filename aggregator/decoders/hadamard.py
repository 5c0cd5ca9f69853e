"""Hadamard response decoder: A[j] = Σ_{i: j_i = j} b_i (the compiled signed histogram), then
c = k·(H A)[:d] with one fast Walsh–Hadamard transform (compiled, in place), O(N + D log D);
both in ``ldptel.mechanisms.kernels.signed``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.mechanisms.estimates import FrequencyEstimate
from ldptel.mechanisms.hadamard import Hadamard


class HadamardAccumulator(Accumulator):
    mechanism_name = "hadamard"
    mech: Hadamard

    def empty(self) -> dict[str, np.ndarray]:
        return {"signs": np.zeros(self.mech.D, dtype=np.int64)}

    def add_columns(self, columns: dict[str, Any], count: int) -> None:
        # numba loads on the first decode: ldptel.aggregator imports without it
        from ldptel.mechanisms.kernels.signed import signed_histogram

        self.state["signs"] += signed_histogram(columns["indices"], columns["signs"], self.mech.D)

    def estimate(self) -> FrequencyEstimate:
        from ldptel.mechanisms.kernels.signed import fwht

        n = self.n
        counts = self.mech.scale * fwht(self.state["signs"])[: self.mech.domain_size]
        se = np.sqrt(self.mech.count_variance(counts, n))
        return FrequencyEstimate(n=n, counts=counts, std_error=se)
