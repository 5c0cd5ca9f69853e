"""Range queries through the Haar wavelet (Cormode, Kulkarni, Srivastava, VLDB 2019).

Domain [0, d) padded to D = 2^h. Level ℓ = 1..h has K_ℓ = D/2^ℓ blocks of 2^ℓ values; the
(unnormalized) detail coefficient of block i is θ_{ℓ,i} = #left half − #right half, and the counts
are c_v = N/D + Σ_ℓ θ_{ℓ, v>>ℓ}·σ_ℓ(v)/2^ℓ with σ_ℓ(v) = +1 if bit ℓ−1 of v is 0 (left half), −1
otherwise. One value has exactly one non-zero coefficient per level: σ_ℓ(v) at i = v >> ℓ.

Device: samples a level ℓ uniformly (probability 1/h) and reports its coefficient's sign through
Hadamard randomized response over the level's K_ℓ coefficients: j uniform in [K_ℓ],
b = σ·H[j, i] kept w.p. e^ε/(e^ε + 1), else −b; the report is (ℓ − 1, j, b).

Aggregator: with k = (e^ε+1)/(e^ε−1), θ̂_{ℓ,i} = h·k·Σ_{reports at ℓ} b·H[j, i] is unbiased
(the h undoes the level sampling) — one fast Walsh–Hadamard transform per level.
A prefix [0, x] needs one coefficient per level, with weight Ψ_ℓ(x) = min(r, 2^ℓ − r)/2^ℓ,
r = (x mod 2^ℓ) + 1; a range [lo, hi] = S(hi) − S(lo − 1) needs ≤ 2h coefficients plus N·|R|/D,
with weights w (same-block weights of the two ends subtract). Each device contributes
Y = h·k·b·Σ_i w_{ℓ,i}H[j,i] with E[Y²] = h·k²·W2, W2 = Σ w², and mean 1[v ∈ R] − ρ, ρ = |R|/D, so
exactly (devices are independent):

    Var[R̂] = N·h·k²·W2 − c_R(1 − ρ)² − (N − c_R)·ρ²,    W2 ≤ 2·h·(1/2)² = h/2,

O(h²·N·k²) = O(log²D·N/ε²) whatever the range length (W2 ≈ (#levels with 2^ℓ ≤ |R|)/6 grows
like log|R| and saturates at ≈ h/6 once |R| ≥ D/2).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.checks import (
    check_lengths,
    out_of_range,
    packed_bits,
    per_level,
    reject_first,
)
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.hadamard import SignResponse, hadamard_entry
from ldptel.proto import RangePayload, ReportBatch


class RangeHaar(SignResponse, Mechanism):
    """Haar-wavelet range mechanism over the ordered integers [0, ``domain_size``)."""

    name = "range_haar"
    payload = "range"

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        self.h = max(1, (self.domain_size - 1).bit_length())
        self.D = 1 << self.h
        self.K = self.D >> np.arange(1, self.h + 1)  # coefficients per level ℓ = 1..h
        self.offsets = np.concatenate(([0], np.cumsum(self.K)))  # level ℓ at offsets[ℓ−1]

    def variance_star(self) -> float:
        """Per-report variance of one rescaled coefficient: h·k²."""
        return self.h * self.scale**2

    def count_variance(self, counts: np.ndarray, n: int) -> np.ndarray:
        """Variance of each single-value estimate ([v, v] ranges) given the true counts."""
        return self.value_variance(counts, n)

    def value_variance(self, counts: np.ndarray, n: int) -> np.ndarray:
        """Var[ĉ_v] of every single value in O(d): a range [v, v] has one coefficient per level,
        of weight ±1/2^ℓ, so W2 = Σ_ℓ 4^−ℓ = (1 − 4^−h)/3 for every v, ρ = 1/D, c_R = c_v."""
        c = np.clip(np.asarray(counts, dtype=np.float64), 0, n)
        w2 = (1.0 - 4.0**-self.h) / 3.0
        rho = 1.0 / self.D
        return n * self.h * self.scale**2 * w2 - c * (1 - rho) ** 2 - (n - c) * rho**2

    # --- range weights and variance ---------------------------------------------------------
    def prefix_weights(self, x: np.ndarray) -> np.ndarray:
        """Ψ_ℓ(x) for ℓ = 1..h: shape (len(x), h); 0 where x < 0 (the empty prefix)."""
        x = np.asarray(x, dtype=np.int64)[:, None]
        size = 1 << np.arange(1, self.h + 1, dtype=np.int64)[None, :]
        r = x % size + 1
        psi = np.minimum(r, size - r) / size
        return np.where(x >= 0, psi, 0.0)

    def range_w2(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """W2 = Σ_ℓ Σ_i w_{ℓ,i}² of the ranges [lo, hi] (arrays)."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        ph, pl = self.prefix_weights(hi), self.prefix_weights(lo - 1)
        shift = np.arange(1, self.h + 1, dtype=np.int64)[None, :]
        same = ((hi[:, None] >> shift) == ((lo - 1)[:, None] >> shift)) & (lo[:, None] >= 1)
        return cast("np.ndarray", np.where(same, (ph - pl) ** 2, ph**2 + pl**2).sum(axis=1))

    def range_variance(self, lo: np.ndarray, hi: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
        """Var[R̂] = N·h·k²·W2 − c_R(1−ρ)² − (N − c_R)ρ², with c_R from ``counts`` (per value,
        true or estimated; clipped to [0, N])."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        cum = np.concatenate(([0.0], np.cumsum(np.asarray(counts, dtype=np.float64))))
        c_r = np.clip(cum[hi + 1] - cum[lo], 0, n)
        rho = (hi - lo + 1) / self.D
        return cast("np.ndarray", n * self.h * self.scale**2 * self.range_w2(lo, hi) - c_r * (1 - rho) ** 2 \
            - (n - c_r) * rho**2)

    # --- encoding -------------------------------------------------------------------------
    def randomize(self, values: np.ndarray, rng) -> dict[str, Any]:
        n = values.size
        lev = rng.integers(1, self.h + 1, n).astype(np.int64)
        i = values >> lev
        sigma = 1 - 2 * ((values >> (lev - 1)) & 1)
        j = rng.integers(0, self.K[lev - 1], n).astype(np.int64) if n else np.zeros(0, np.int64)
        b = sigma * hadamard_entry(j, i)
        keep = rng.random(n) < self.p_keep
        return {"levels": (lev - 1).astype(np.uint32), "indices": j.astype(np.uint32),
                "signs": (b > 0) == keep}

    def randomize_one(self, value: int, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        lev = draws.below(self.h) + 1
        i, sigma = value >> lev, 1 - 2 * ((value >> (lev - 1)) & 1)
        j = draws.below(int(self.K[lev - 1]))
        positive = (sigma > 0) == ((i & j).bit_count() % 2 == 0)
        keep = draws.uniform() < self.p_keep
        return {"levels": [lev - 1], "indices": [j], "signs": [positive == keep]}

    def payload_message(self, columns: dict[str, Any]) -> RangePayload:
        return RangePayload(levels=np.asarray(columns["levels"]).tolist(),
                            indices=np.asarray(columns["indices"]).tolist(),
                            signs=np.packbits(np.asarray(columns["signs"], dtype=bool)).tobytes())

    def columns(self, batch: ReportBatch) -> dict[str, Any]:
        return range_columns(batch, packed_bits(batch.range.signs, batch.count))

    def validate_columns(self, columns: dict[str, Any], count: int) -> None:
        """``count`` levels, indices and sign bits; level < h; index < K_level; no seeds or
        values."""
        why = "the haar method sends none"
        check_lengths(columns, count, ("levels", "indices", "signs"), {"seeds": why, "values": why})
        lev = columns["levels"]
        reject_first([out_of_range(lev, self.h, "level", f"h = {self.h}"),
                      out_of_range(columns["indices"], per_level(lev, self.K), "index")])

    def public_params(self) -> dict[str, Any]:
        return {"method": "haar", "epsilon": self.epsilon, "domain_size": self.domain_size,
                "D": self.D}



def range_columns(batch: ReportBatch, signs: np.ndarray) -> dict[str, Any]:
    """The ``RangePayload`` as numpy columns, with its sign bits unpacked by the method
    (``packed_bits`` for the Haar method; the hierarchical method sends none)."""
    p = batch.range
    return {"levels": np.asarray(p.levels, dtype=np.int64),
            "indices": np.asarray(p.indices, dtype=np.int64), "signs": signs,
            "seeds": np.asarray(p.seeds, dtype=np.uint32),
            "values": np.asarray(p.values, dtype=np.int64)}
