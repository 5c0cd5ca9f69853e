"""Optimized local hashing (OLH).

g = round(e^ε) + 1. The device draws a 32-bit seed, hashes its value to y = H_seed(v) ∈ [0, g)
(see ``ldptel.mechanisms.hashing``) and reports (seed, y') where y' = y w.p. p' = e^ε/(e^ε + g − 1),
else uniform among the g − 1 others. A report supports v iff H_seed(v) = y', which happens w.p.
p' for the true value and 1/g for any other, so with q = 1/g it is a pure protocol:
Ĉ_v = (C_v − N/g)/(p' − 1/g); Var* = q(1−q)/(p'−q)² (= 4e^ε/(e^ε−1)² at g = e^ε + 1).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldptel.mechanisms import hashing
from ldptel.mechanisms.base import PureMechanism
from ldptel.mechanisms.checks import check_lengths, out_of_range, reject_first
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.grr import perturb_categorical, perturb_one
from ldptel.proto import OlhPayload, ReportBatch


def olh_g(epsilon: float) -> int:
    """Hash range g = round(e^ε) + 1 (at least 2)."""
    return max(2, int(round(math.exp(epsilon))) + 1)


def keep_probability(epsilon: float, g: int) -> float:
    """p' = e^ε/(e^ε + g − 1): the hashed value is kept, else one of the g − 1 others."""
    e = math.exp(epsilon)
    return e / (e + g - 1)


class LocalHashing(PureMechanism):
    """A pure protocol reporting a value hashed to [0, g) with GRR: p = p', q = 1/g (OLH, and the
    heavy-hitter prefixes)."""

    g: int

    @property
    def p(self) -> float:
        return keep_probability(self.epsilon, self.g)

    @property
    def q(self) -> float:
        return 1.0 / self.g


class OLH(LocalHashing):
    name = "olh"
    payload = "olh"

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        self.g = olh_g(self.epsilon)
        self._keys: np.ndarray | None = None
        self._keys64: np.ndarray | None = None

    @property
    def keys(self) -> np.ndarray:
        """x_v = xxh32(v) for the whole domain (computed once)."""
        if self._keys is None:
            self._keys = hashing.item_keys(self.domain_size)
        return self._keys

    @property
    def keys64(self) -> np.ndarray:
        """The keys widened to uint64, as the decode kernel reads them (computed once)."""
        if self._keys64 is None:
            self._keys64 = self.keys.astype(np.uint64)
        return self._keys64

    def randomize(self, values: np.ndarray, rng) -> dict[str, Any]:
        seeds = rng.integers(0, 2**32, values.size).astype(np.uint32)
        keys = hashing.xxh32_u32(values.astype(np.uint32))
        y = hashing.olh_hash_batch(seeds, keys, self.g).astype(np.int64)
        return {"seeds": seeds, "values": perturb_categorical(y, self.g, self.p, rng)}

    def randomize_one(self, value: int, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        seed = draws.u32()
        y = hashing.olh_hash(seed, hashing.xxh32_int(value), self.g)
        return {"seeds": [seed], "values": [perturb_one(y, self.g, self.p, draws)]}

    def payload_message(self, columns: dict[str, Any]) -> OlhPayload:
        return OlhPayload(seeds=np.asarray(columns["seeds"]).tolist(),
                          values=np.asarray(columns["values"]).tolist())

    def columns(self, batch: ReportBatch) -> dict[str, Any]:
        return {
            "seeds": np.asarray(batch.olh.seeds, dtype=np.uint32),
            "values": np.asarray(batch.olh.values, dtype=np.int64),
        }

    def validate_columns(self, columns: dict[str, Any], count: int) -> None:
        """``count`` (seed, y) pairs with y in [0, g); every uint32 seed is valid (the wire type
        bounds it to [0, 2^32))."""
        check_lengths(columns, count, ["seeds", "values"])
        reject_first(self.report_checks(columns))

    def report_checks(self, columns: dict[str, Any]) -> list[Any]:
        return [out_of_range(columns["values"], self.g, "hash value", f"g = {self.g}"),
                out_of_range(columns["seeds"], 1 << 32, "seed", "2^32")]

    def public_params(self) -> dict[str, Any]:
        return {**super().public_params(), "g": self.g}
