"""1BitMean with α-point rounding and memoization (Ding, Kulkarni, Yekhanin, NeurIPS 2017).

A value's fraction f = (x − lower)/(upper − lower) in [0, 1] is reported as one bit, 1 w.p.
1/(e^ε + 1) + f·(e^ε − 1)/(e^ε + 1): in t = 2f − 1 units that is Duchi's mechanism (bit 1 ↔ +C,
C = (e^ε + 1)/(e^ε − 1)), so the unbiased value, the estimator and Var[y | t] = C² − t² are
``Duchi``'s.

With ``memoize`` (repeated collection), f is first α-point rounded to a bucket boundary k/B
(B = ``buckets``): with k = ⌊f·B⌋ and frac = f·B − k, the device reports boundary k + 1 if
frac > α, else k, where α is uniform in [0, 1) and drawn once per device; over devices
E[k/B] = f, so the mean stays unbiased. The bit of boundary k is memoized: it is 1 iff
u_k < P(1 | k/B) with u_k uniform and fixed per (device, k). α and every u_k come from
HMAC-SHA256 of the device's campaign secret (``device_secret.derive``), as RAPPOR's permanent
response does, so the memo needs no stored table and survives restarts. A device whose value
stays put sends the same bit every time (averaging its reports learns one ε-report); over its
whole life it reveals at most B + 1 bits, and while its value stays within one bucket at most 2.
Rounding does not change the one-report variance: Var[y | t] = E[C² − r²] + Var[r] = C² − t² for
the rounded r.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldptel.mechanisms.base import check_int
from ldptel.mechanisms.device_secret import derive, device_secret
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.numeric import Duchi

DEFAULT_BUCKETS = 8
MAX_BUCKETS = 1024


def _uniform(secret: bytes, label: bytes) -> float:
    """A uniform in [0, 1) from the first 53 bits of HMAC-SHA256(secret, label)."""
    return (int.from_bytes(derive(secret, label)[:8], "little") >> 11) * (1.0 / (1 << 53))


class OneBitMean(Duchi):
    name = "1bitmean"
    column = "bits"

    def __init__(self, epsilon: float, lower: float, upper: float, memoize: bool = True,
                 buckets: int = DEFAULT_BUCKETS, secret: bytes | None = None) -> None:
        super().__init__(epsilon, lower, upper)
        if not isinstance(memoize, bool):
            raise ValueError(f"memoize must be true or false, got {memoize!r}")
        self.memoize = memoize
        self.buckets = check_int(buckets, "buckets", 1, MAX_BUCKETS)
        self.secret = device_secret(secret)

    @property
    def epsilon_inf(self) -> float | None:
        """With ``memoize``: what every report of one value reveals together, ε (one memoized
        bit: α and the value fix the boundary); None for fresh bits."""
        return self.epsilon if self.memoize else None

    @property
    def epsilon_lifetime(self) -> float | None:
        """With ``memoize``: (B + 1)·ε over a device's life (one bit per boundary)."""
        return (self.buckets + 1) * self.epsilon if self.memoize else None

    @property
    def alpha(self) -> float:
        """This device's rounding point α in [0, 1) (from its secret)."""
        return _uniform(self.secret, b"ldptel/1bitmean/alpha")

    def rounded(self, t: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        """The α-point rounded bucket boundary k in [0, B] of each t (int64)."""
        pos = (np.asarray(t, dtype=np.float64) + 1.0) / 2 * self.buckets
        k = np.minimum(np.floor(pos), self.buckets - 1)
        return (k + (pos - k > alpha)).astype(np.int64)

    def boundary_t(self, k: Any) -> Any:
        """Boundary k (an int or an array) as t = 2k/B − 1."""
        return 2 * k / self.buckets - 1

    def randomize_unit(self, t: np.ndarray, rng) -> dict[str, Any]:
        """Each t an independent device (its own α and bits) — simulations and tests."""
        if not self.memoize:
            return super().randomize_unit(t, rng)
        k = self.rounded(t, rng.random(t.size))
        return {"bits": rng.random(t.size) < self.p_plus(self.boundary_t(k))}

    def memo_bit(self, k: int) -> bool:
        """This device's memoized bit of boundary k: u_k < P(1 | k/B), u_k from its secret (a
        deterministic function of (secret, k): memoized without a stored table)."""
        u = _uniform(self.secret, b"ldptel/1bitmean/bit\0" + str(k).encode())
        return u < float(self.p_plus(self.boundary_t(k)))

    def randomize_one(self, value: Any, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        """This device's report of ``value``: memoized (its α, its bit per boundary), or a fresh
        Duchi bit without ``memoize``."""
        if not self.memoize:
            return super().randomize_one(value, draws)
        pos = (self.unit_one(value) + 1.0) / 2 * self.buckets
        k = min(math.floor(pos), self.buckets - 1)
        k += pos - k > self.alpha
        return {"bits": [self.memo_bit(k)]}

    def public_params(self) -> dict[str, Any]:
        return {**super().public_params(), "memoize": self.memoize, "buckets": self.buckets}
