"""Hadamard response decoder: A[j] = Σ_{i: j_i = j} b_i, then c = k·(H A)[:d] with one fast
Walsh–Hadamard transform, O(N + D log D)."""

from __future__ import annotations

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.mechanisms.estimates import FrequencyEstimate
from ldptel.mechanisms.hadamard import Hadamard


def fwht(a: np.ndarray) -> np.ndarray:
    """Unnormalized fast Walsh–Hadamard transform: (H a)[v] = Σ_j (−1)^popcount(j&v) a[j]."""
    x = np.array(a, dtype=np.float64)
    n = x.size
    h = 1
    while h < n:
        y = x.reshape(-1, 2, h)
        x = np.concatenate((y[:, 0] + y[:, 1], y[:, 0] - y[:, 1]), axis=1).reshape(n)
        h *= 2
    return x


class HadamardAccumulator(Accumulator):
    mechanism_name = "hadamard"
    mech: Hadamard

    def empty(self) -> dict[str, np.ndarray]:
        return {"signs": np.zeros(self.mech.D, dtype=np.int64)}

    def add_columns(self, columns: dict, count: int) -> None:
        b = np.where(columns["signs"], 1, -1)
        self.state["signs"] += np.bincount(columns["indices"], weights=b,
                                           minlength=self.mech.D).astype(np.int64)

    def estimate(self) -> FrequencyEstimate:
        n = self.n
        counts = self.mech.scale * fwht(self.state["signs"])[: self.mech.domain_size]
        se = np.sqrt(self.mech.count_variance(counts, n))
        return FrequencyEstimate(n=n, counts=counts, std_error=se)
