"""Haar range decoder: A[ℓ, j] = Σ_{reports (ℓ, j, b)} b (one additive vector of D − 1 entries,
the levels' K_ℓ = D/2^ℓ slots laid end to end; the compiled signed histogram); θ̂_ℓ = h·k·(H A_ℓ)
by one compiled fast Walsh–Hadamard transform per level; the per-value counts by the inverse Haar
transform from the root down, in O(D): a block sum S of level ℓ splits into its halves
(S + θ̂_{ℓ,i})/2 and (S − θ̂_{ℓ,i})/2, starting from S = N over the whole of [0, D) — the same as
ĉ_v = N/D + Σ_ℓ θ̂_{ℓ, v>>ℓ}·σ_ℓ(v)/2^ℓ. Std errors in closed form
(``RangeHaar.value_variance``), ranges by ``RangeHaar.range_variance``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.mechanisms.range_haar import RangeHaar
from ldptel.mechanisms.ranges import RangeEstimate


class RangeHaarAccumulator(Accumulator):
    mechanism_name = "range_haar"
    mech: RangeHaar

    def empty(self) -> dict[str, np.ndarray]:
        return {"signs": np.zeros(int(self.mech.offsets[-1]), dtype=np.int64)}

    def add_columns(self, columns: dict[str, Any], count: int) -> None:
        # numba loads on the first decode: ldptel.aggregator imports without it
        from ldptel.mechanisms.kernels.signed import signed_histogram

        slot = self.mech.offsets[columns["levels"]] + columns["indices"]
        self.state["signs"] += signed_histogram(slot, columns["signs"], self.state["signs"].size)

    def coefficients(self) -> list[np.ndarray]:
        """θ̂_ℓ for ℓ = 1..h."""
        from ldptel.mechanisms.kernels.signed import fwht

        m = self.mech
        A = self.state["signs"]
        return [m.h * m.scale * fwht(A[m.offsets[i] : m.offsets[i + 1]]) for i in range(m.h)]

    def estimate(self) -> RangeEstimate:
        m, n = self.mech, self.n
        sums = np.full(1, float(n))  # the one block of level h
        for theta in reversed(self.coefficients()):
            halves = np.empty(2 * sums.size)
            halves[0::2] = (sums + theta) / 2
            halves[1::2] = (sums - theta) / 2
            sums = halves
        counts = sums[: m.domain_size]
        se = np.sqrt(np.maximum(m.value_variance(counts, n), 0.0)) if n else np.zeros(m.domain_size)
        return RangeEstimate(n=n, counts=counts, std_error=se, range_variance=m.range_variance,
                             plug_in=counts, method="haar")
