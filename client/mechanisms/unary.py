"""Unary encoding: the value as a one-hot d-bit vector, each bit flipped independently.

SUE (symmetric, basic RAPPOR): 1→1 w.p. p = e^{ε/2}/(e^{ε/2}+1), 0→1 w.p. q = 1/(e^{ε/2}+1);
Var* = e^{ε/2}/(e^{ε/2}−1)².
OUE (optimized): 1→1 w.p. p = ½, 0→1 w.p. q = 1/(e^ε+1); Var* = 4e^ε/(e^ε−1)².
"""

from __future__ import annotations

import math

import numpy as np

from ldptel.client.mechanisms.base import PureMechanism, pack_rows, unpack_rows
from ldptel.proto import ReportBatch, UnaryPayload

CHUNK_BITS = 1 << 24  # random draws per chunk in encode_batch (bounded memory)


class UnaryEncoding(PureMechanism):
    payload = "unary"

    def randomize(self, values: np.ndarray, rng) -> dict:
        d = self.domain_size
        rows = max(1, CHUNK_BITS // d)
        # thresholds on uint32 draws: P(bit) = round(prob·2^32)/2^32 (exact to 2^-32)
        tq = np.uint32(min(round(self.q * 2**32), 2**32 - 1))
        tp = np.uint32(min(round(self.p * 2**32), 2**32 - 1))
        parts = []
        for start in range(0, values.size, rows):
            v = values[start : start + rows]
            if isinstance(rng, np.random.Generator):
                draws = rng.integers(0, 2**32, size=(v.size, d), dtype=np.uint32)
            else:
                draws = (rng.random((v.size, d)) * 2**32).astype(np.uint32)
            bits = draws < tq
            idx = np.arange(v.size)
            bits[idx, v] = draws[idx, v] < tp
            parts.append(np.packbits(bits, axis=1))
        packed = np.concatenate(parts) if parts else np.zeros((0, (d + 7) // 8), np.uint8)
        return {"bits": packed}

    def payload_message(self, columns: dict) -> UnaryPayload:
        return UnaryPayload(bits=np.ascontiguousarray(columns["bits"]).tobytes())

    def columns(self, batch: ReportBatch) -> dict:
        return {"bits": unpack_rows(batch.unary.bits, batch.count, self.domain_size)}


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


__all__ = ["SUE", "OUE", "UnaryEncoding", "pack_rows"]
