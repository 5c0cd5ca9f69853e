"""Haar range decoder: A[ℓ, j] = Σ_{reports (ℓ, j, b)} b (one additive vector of D − 1 entries,
the levels' K_ℓ = D/2^ℓ slots laid end to end); θ̂_ℓ = h·k·(H A_ℓ) by one fast Walsh–Hadamard
transform per level; the per-value counts ĉ_v = N/D + Σ_ℓ θ̂_{ℓ, v>>ℓ}·σ_ℓ(v)/2^ℓ (O(D·h)),
whose partial sums are exactly the ≤ 2h+1-coefficient range answers. Std errors:
``RangeHaar.range_variance`` with the estimated range count plugged in."""

from __future__ import annotations

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.aggregator.decoders.hadamard import fwht
from ldptel.mechanisms.range_haar import RangeHaar
from ldptel.mechanisms.ranges import RangeEstimate


class RangeHaarAccumulator(Accumulator):
    mechanism_name = "range_haar"
    mech: RangeHaar

    def empty(self) -> dict[str, np.ndarray]:
        return {"signs": np.zeros(int(self.mech.offsets[-1]), dtype=np.int64)}

    def add_columns(self, columns: dict, count: int) -> None:
        slot = self.mech.offsets[columns["levels"]] + columns["indices"]
        b = np.where(columns["signs"], 1, -1)
        self.state["signs"] += np.bincount(slot, weights=b, minlength=self.state["signs"].size
                                           ).astype(np.int64)

    def coefficients(self) -> list[np.ndarray]:
        """θ̂_ℓ for ℓ = 1..h."""
        m = self.mech
        A = self.state["signs"]
        return [m.h * m.scale * fwht(A[m.offsets[i] : m.offsets[i + 1]]) for i in range(m.h)]

    def estimate(self) -> RangeEstimate:
        m, n = self.mech, self.n
        counts = np.full(m.D, n / m.D)
        for i, theta in enumerate(self.coefficients()):
            size = 2 << i  # block of level ℓ = i + 1
            half = np.concatenate((np.ones(size // 2), -np.ones(size // 2))) / size
            counts += (theta[:, None] * half[None, :]).reshape(-1)
        counts = counts[: m.domain_size]
        v = np.arange(m.domain_size)
        se = np.sqrt(np.maximum(m.range_variance(v, v, counts, n), 0.0)) if n else np.zeros(m.domain_size)
        return RangeEstimate(n=n, counts=counts, std_error=se, range_variance=m.range_variance,
                             plug_in=counts, method="haar")
