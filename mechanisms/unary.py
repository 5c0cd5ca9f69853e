"""Unary encoding: the value as a one-hot d-bit vector, each bit flipped independently.

SUE (symmetric, basic RAPPOR): 1→1 w.p. p = e^{ε/2}/(e^{ε/2}+1), 0→1 w.p. q = 1/(e^{ε/2}+1);
Var* = e^{ε/2}/(e^{ε/2}−1)².
OUE (optimized): 1→1 w.p. p = ½, 0→1 w.p. q = 1/(e^ε+1); Var* = 4e^ε/(e^ε−1)².
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldptel.mechanisms.base import PureMechanism
from ldptel.mechanisms.checks import bit_rows, check_bit_rows, check_lengths, reject_first
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.poisoning import unary_weight_bounds
from ldptel.mechanisms.randomness import bernoulli, bernoulli_packed, set_packed_bits
from ldptel.proto import ReportBatch, UnaryPayload

CHUNK_BITS = 1 << 24  # random draws per chunk in encode_batch (bounded memory)


def os_bernoulli_row(prob: float, size: int, draws: Draws = SYSTEM_DRAWS) -> np.ndarray:
    """``size`` Bernoulli(``prob``) booleans from OS randomness: ``bernoulli()`` specialised to
    one row, a byte per bit (``draws.bytes(size)``), ties broken exactly (one uniform per tie, in
    bit order)."""
    scaled = prob * 256.0
    threshold = int(scaled)
    raw = np.frombuffer(draws.bytes(size), dtype=np.uint8)
    bits = raw < threshold
    for i in np.flatnonzero(raw == threshold).tolist():  # ~size/256 ties
        bits[i] = draws.uniform() < scaled - threshold
    return bits


class UnaryEncoding(PureMechanism):
    payload = "unary"

    def randomize(self, values: np.ndarray, rng) -> dict[str, Any]:
        d = self.domain_size
        rows = max(1, CHUNK_BITS // d)
        parts = []
        for start in range(0, values.size, rows):
            v = values[start : start + rows]
            packed = bernoulli_packed(rng, self.q, v.size, d)
            set_packed_bits(packed, v, bernoulli(rng, self.p, (v.size,)))
            parts.append(packed)
        packed = np.concatenate(parts) if parts else np.zeros((0, (d + 7) // 8), np.uint8)
        return {"bits": packed}

    def randomize_one(self, value: int, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        bits = os_bernoulli_row(self.q, self.domain_size, draws)
        bits[value] = draws.uniform() < self.p
        return {"bits": np.packbits(bits)[None, :]}

    def payload_message(self, columns: dict[str, Any]) -> UnaryPayload:
        return UnaryPayload(bits=np.ascontiguousarray(columns["bits"]).tobytes())

    def columns(self, batch: ReportBatch) -> dict[str, Any]:
        return {"bits": bit_rows(batch.unary.bits, batch.count, self.domain_size)}

    def weight_bounds(self) -> tuple[int, int]:
        """Accepted number of set bits per report: W = Bernoulli(p) + Binomial(d − 1, q) for an
        honest device, rejected outside [lo, hi] with probability < 1e-9
        (``poisoning.unary_weight_bounds``)."""
        if getattr(self, "_weight_bounds", None) is None:
            self._weight_bounds = unary_weight_bounds(self.domain_size, self.p, self.q)
        return self._weight_bounds

    def validate_columns(self, columns: dict[str, Any], count: int) -> None:
        """``count`` rows of ceil(d/8) bytes (as ``columns`` returns them), zero padding, a
        plausible number of set bits."""
        check_lengths(columns, count, ["bits"])
        reject_first(self.report_checks(columns))

    def report_checks(self, columns: dict[str, Any]) -> list[Any]:
        return check_bit_rows(columns["bits"], self.domain_size, self.weight_bounds())


class SUE(UnaryEncoding):
    name = "sue"

    @property
    def p(self) -> float:
        h = math.exp(self.epsilon / 2)
        return h / (h + 1)

    @property
    def q(self) -> float:
        return 1.0 / (math.exp(self.epsilon / 2) + 1)


class OUE(UnaryEncoding):
    name = "oue"

    @property
    def p(self) -> float:
        return 0.5

    @property
    def q(self) -> float:
        return 1.0 / (math.exp(self.epsilon) + 1)


__all__ = ["SUE", "OUE", "UnaryEncoding"]
