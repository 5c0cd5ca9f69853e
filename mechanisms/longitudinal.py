"""Memoized frequency oracles (Arcolezi et al. 2022–23), each the plain oracle's wire shape and
decoder with a permanent randomized response at ε∞ chained to an instantaneous one (the chain's
math: ``memoize``). One report is ε₁-LDP (ε₁ = ``epsilon``) with the plain oracle's p*, q* at ε₁:

- ``LGRR`` (L-GRR): memo key = the value, k = d.
- ``LOSUE`` (L-OSUE, for ``oue`` and ``sue``): PRR = OUE at ε∞ per bit, IRR = SUE per bit;
  chained p* = ½, q* = 1/(e^{ε₁} + 1) (OUE at ε₁), memoized per (secret, value).
- ``LOLOHA`` (LOLOHA): the seed is fixed per device (HMAC of its secret), memo key = H_seed(v),
  k = g = round(e^{ε₁}) + 1 (OLH's g at ε₁: the chained variance is OLH's at that g), so a device
  whose value changes reveals at most min(d, g)·ε∞.
- ``LHadamard``: the Hadamard row j is fixed per device, memo key = the sign H[j, v] (k = 2);
  chained keep probability e^{ε₁}/(e^{ε₁} + 1), so the lifetime bound is 2·ε∞.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from ldptel.mechanisms import hashing
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.grr import GRR
from ldptel.mechanisms.hadamard import Hadamard, hadamard_entry
from ldptel.mechanisms.memoize import (
    MemoizedOracle,
    MemoizedSign,
    derived_indices,
    shake_uniforms,
    unary_instant_keep,
)
from ldptel.mechanisms.olh import OLH
from ldptel.mechanisms.randomness import bernoulli_packed
from ldptel.mechanisms.unary import CHUNK_BITS, OUE, os_bernoulli_row
from ldptel.proto import ReportBatch


class LGRR(MemoizedOracle, GRR):
    """L-GRR: GRR's PRR at ε∞ on the value, GRR's IRR calibrated to ε₁."""

    label = b"ldptel/memo/grr\0"

    @property
    def p(self) -> float:
        return self.chain.p_star

    @property
    def q(self) -> float:
        return self.chain.q_star

    def report_columns(self, values: np.ndarray, parts: dict[str, Any], irr: Any) -> dict[str, Any]:
        return {"values": irr}

    def columns_one(self, parts: dict[str, Any], irr: int) -> dict[str, Any]:
        return {"values": [irr]}


class LOSUE(MemoizedOracle, OUE):
    """L-OSUE: OUE's PRR at ε∞ per bit (memoized per value), SUE's IRR per bit."""

    def __init__(self, epsilon: float, domain_size: int, epsilon_inf: Any = None,
                 secret: bytes | None = None) -> None:
        super().__init__(epsilon, domain_size, epsilon_inf, secret)
        self.q1 = 1 / (np.exp(self.epsilon_inf) + 1)
        self.p2 = unary_instant_keep(self.epsilon, self.epsilon_inf)

    @property
    def p(self) -> float:
        """½ (OUE's p): P(PRR bit = 1 | true bit) = ½ and the symmetric IRR keeps ½."""
        return 0.5 * self.p2 + 0.5 * (1 - self.p2)

    @property
    def q(self) -> float:
        """q₁p₂ + (1 − q₁)(1 − p₂) = 1/(e^{ε₁} + 1)."""
        return cast("float", self.q1 * self.p2 + (1 - self.q1) * (1 - self.p2))

    def permanent(self, secret: bytes, key: int) -> np.ndarray:
        """The PRR row (packed bits): bit v is 1 w.p. ½ if v = key else q₁, from d uniforms of
        SHAKE-256(HMAC(secret, label ‖ key))."""
        u = shake_uniforms(secret, b"ldptel/memo/unary\0" + key.to_bytes(8, "little"),
                           self.domain_size)
        threshold = np.full(self.domain_size, self.q1)
        threshold[key] = 0.5
        return np.packbits(u < threshold)

    def encode_batch(self, values: Any, rng: np.random.Generator | None = None,
                     campaign: str = "", batch_id: bytes | None = None,
                     secrets: bytes | Sequence[bytes] | None = None) -> ReportBatch:
        """As ``Memoized.encode_batch``; for fresh simulated devices (no ``secrets``) the chained
        bits — Bernoulli(½) at the value, Bernoulli(q*) elsewhere, independently — are drawn in
        one stage (``UnaryEncoding.randomize`` at p*, q*: the same distribution as PRR then IRR,
        at the plain oracle's cost, as ``RAPPOR.randomize`` does)."""
        if secrets is None:
            return OUE.encode_batch(self, values, rng, campaign, batch_id)
        return super().encode_batch(values, rng, campaign, batch_id, secrets)

    def chunks(self, n: int) -> list[slice]:
        """Row ranges of about ``CHUNK_BITS`` random bits (bounded scratch, as ``randomize``)."""
        step = max(1, CHUNK_BITS // self.domain_size)
        return [slice(i, min(n, i + step)) for i in range(0, n, step)]

    def stack_permanent(self, prrs: list[Any]) -> np.ndarray:
        return np.stack(prrs) if prrs else np.zeros((0, (self.domain_size + 7) // 8), np.uint8)

    def instant(self, prr: np.ndarray, rng) -> np.ndarray:
        """Flip each bit w.p. 1 − p₂ (XOR with a Bernoulli(1 − p₂) row; padding stays zero)."""
        out = np.empty_like(prr)
        for rows in self.chunks(prr.shape[0]):
            flips = bernoulli_packed(rng, 1 - self.p2, rows.stop - rows.start, self.domain_size)
            np.bitwise_xor(prr[rows], flips, out=out[rows])
        return out

    def instant_one(self, prr: np.ndarray, draws: Draws = SYSTEM_DRAWS) -> np.ndarray:
        flips = np.packbits(os_bernoulli_row(1 - self.p2, self.domain_size, draws))
        return cast("np.ndarray", np.bitwise_xor(prr, flips)[None, :])

    def report_columns(self, values: np.ndarray, parts: dict[str, Any], irr: np.ndarray) -> dict[str, Any]:
        return {"bits": irr}

    def columns_one(self, parts: dict[str, Any], irr: np.ndarray) -> dict[str, Any]:
        return {"bits": irr}


class LOSUEFromSue(LOSUE):
    """``sue`` with memoize = true: L-OSUE (the chained report is OUE-shaped at ε₁)."""

    name = "sue"


class LOLOHA(MemoizedOracle, OLH):
    """LOLOHA: seed fixed per device, PRR at ε∞ on the hashed value in [g], IRR to ε₁."""

    label = b"ldptel/memo/olh\0"

    def memo_alphabet(self) -> int:
        return self.g

    @property
    def p(self) -> float:
        return self.chain.p_star

    def device_parts(self, secrets: list[bytes]) -> dict[str, np.ndarray]:
        return {"seeds": derived_indices(secrets, b"ldptel/memo/olh-seed", 1 << 32)}

    def draw_device_parts(self, n: int, rng) -> dict[str, np.ndarray]:
        return {"seeds": rng.integers(0, 2**32, n).astype(np.int64)}

    def memo_keys(self, values: np.ndarray, parts: dict[str, Any]) -> np.ndarray:
        keys = hashing.xxh32_u32(values.astype(np.uint32))
        return hashing.olh_hash_batch(parts["seeds"].astype(np.uint32), keys, self.g).astype(np.int64)

    def key_one(self, value: int, parts: dict[str, int]) -> int:
        return hashing.olh_hash(parts["seeds"], hashing.xxh32_int(value), self.g)

    def report_columns(self, values: np.ndarray, parts: dict[str, Any], irr: Any) -> dict[str, Any]:
        return {"seeds": parts["seeds"].astype(np.uint32), "values": irr}

    def columns_one(self, parts: dict[str, Any], irr: int) -> dict[str, Any]:
        return {"seeds": [parts["seeds"]], "values": [irr]}


class LHadamard(MemoizedSign, Hadamard):
    """Memoized Hadamard response: row j fixed per device, PRR at ε∞ on the sign H[j, v]."""

    label = b"ldptel/memo/hadamard\0"

    def device_parts(self, secrets: list[bytes]) -> dict[str, np.ndarray]:
        return {"indices": derived_indices(secrets, b"ldptel/memo/hadamard-row", self.D)}

    def draw_device_parts(self, n: int, rng) -> dict[str, np.ndarray]:
        return {"indices": rng.integers(0, self.D, n).astype(np.int64)}

    def memo_keys(self, values: np.ndarray, parts: dict[str, Any]) -> np.ndarray:
        return (hadamard_entry(parts["indices"], values) > 0).astype(np.int64)

    def key_one(self, value: int, parts: dict[str, int]) -> int:
        return int((parts["indices"] & value).bit_count() % 2 == 0)

    def report_columns(self, values: np.ndarray, parts: dict[str, Any], irr: Any) -> dict[str, Any]:
        return {"indices": parts["indices"].astype(np.uint32), "signs": irr == 1}

    def columns_one(self, parts: dict[str, Any], irr: int) -> dict[str, Any]:
        return {"indices": [parts["indices"]], "signs": [irr == 1]}


MEMOIZED: dict[str, Callable[..., Mechanism]] = {
    "grr": LGRR, "sue": LOSUEFromSue, "oue": LOSUE, "olh": LOLOHA, "hadamard": LHadamard}

__all__ = ["LGRR", "LHadamard", "LOLOHA", "LOSUE", "LOSUEFromSue", "MEMOIZED"]
