"""Hadamard response (one-bit Hadamard randomized response).

D = next power of two ≥ d, H[j, v] = (−1)^popcount(j & v). The device draws j uniform in [D]
and reports (j, b) with b = H[j, v] w.p. e^ε/(e^ε+1), else −b. With k = (e^ε+1)/(e^ε−1),
c(v) = k·Σ_i b_i·H[j_i, v] is unbiased (E_j[H[j,u]H[j,v]] = δ_uv); the aggregator keeps
A[j] = Σ_{i: j_i=j} b_i and gets every c(v) from one fast Walsh–Hadamard transform of A.
Var[c(v)] = N·k² − c_v exactly; Var* = k².
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.checks import check_lengths, out_of_range, packed_bits, reject_first
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.proto import HadamardPayload, ReportBatch


def hadamard_entry(j: np.ndarray, v: np.ndarray) -> np.ndarray:
    """H[j, v] ∈ {+1, −1} elementwise."""
    parity = np.bitwise_count(np.bitwise_and(j, v)) & 1
    return cast("np.ndarray", 1 - 2 * parity.astype(np.int64))


def keep_probability(epsilon: float) -> float:
    """Binary randomized response keeps the bit w.p. e^ε/(e^ε + 1)."""
    e = math.exp(epsilon)
    return e / (e + 1)


def debias_scale(epsilon: float) -> float:
    """k = (e^ε + 1)/(e^ε − 1): E[k·b] = the true sign; Var[k·b] = k² − 1 for one report."""
    e = math.exp(epsilon)
    return (e + 1) / (e - 1)


class SignResponse:
    """Binary randomized response of a ±1 Hadamard/Haar entry at ``epsilon`` (Hadamard response
    and the Haar range mechanism)."""

    epsilon: float

    @property
    def p_keep(self) -> float:
        return keep_probability(self.epsilon)

    @property
    def scale(self) -> float:
        """k = (e^ε + 1)/(e^ε − 1)."""
        return debias_scale(self.epsilon)


class Hadamard(SignResponse, Mechanism):
    name = "hadamard"
    payload = "hadamard"

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        self.D = 1 << (self.domain_size - 1).bit_length()

    def variance_star(self) -> float:
        return self.scale**2

    def count_variance(self, counts: np.ndarray, n: int) -> np.ndarray:
        # linear in c: at the raw estimate (|ĉ| ≤ N·k) an unbiased variance estimate ≥ N·k(k − 1)
        c = np.asarray(counts, dtype=np.float64)
        return n * self.scale**2 - c

    def randomize(self, values: np.ndarray, rng) -> dict[str, Any]:
        j = rng.integers(0, self.D, values.size).astype(np.int64)
        positive = hadamard_entry(j, values) > 0
        keep = rng.random(values.size) < self.p_keep
        return {"indices": j.astype(np.uint32), "signs": positive == keep}

    def randomize_one(self, value: int, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        j = draws.below(self.D)
        positive = (j & value).bit_count() % 2 == 0
        keep = draws.uniform() < self.p_keep
        return {"indices": [j], "signs": [positive == keep]}

    def payload_message(self, columns: dict[str, Any]) -> HadamardPayload:
        return HadamardPayload(
            indices=np.asarray(columns["indices"]).tolist(),
            signs=np.packbits(np.asarray(columns["signs"], dtype=bool)).tobytes(),
        )

    def columns(self, batch: ReportBatch) -> dict[str, Any]:
        return {"indices": np.asarray(batch.hadamard.indices, dtype=np.int64),
                "signs": packed_bits(batch.hadamard.signs, batch.count)}

    def validate_columns(self, columns: dict[str, Any], count: int) -> None:
        """``count`` (j, sign) pairs with j in [0, D) (``columns`` checked the sign bytes)."""
        check_lengths(columns, count, ["indices", "signs"])
        reject_first(self.report_checks(columns))

    def report_checks(self, columns: dict[str, Any]) -> list[Any]:
        return [out_of_range(columns["indices"], self.D, "index", f"D = {self.D}")]

    def public_params(self) -> dict[str, Any]:
        return {**super().public_params(), "D": self.D}
