"""Memoized (longitudinal) randomized response: the math and the device machinery shared by every
memoized mechanism (``longitudinal.py``, ``longitudinal_kinds.py``).

A device first maps its value to a *memo key* m in an alphabet [k] through parts of its report
that are fixed for its life and independent of the value (OLH's seed, a Hadamard row, a heavy
hitter's level and pool seed): GRR uses m = v (k = d), local hashing m = H_seed(v) (k = g), the
sign responses m = the ±1 entry (k = 2). Then

- permanent randomized response (PRR), memoized: m' = m w.p. p₁ = e^{ε∞}/(e^{ε∞} + k − 1), else
  one of the k − 1 others uniformly (q₁ = (1 − p₁)/(k − 1) each). Its randomness is
  HMAC-SHA256(device secret, label ‖ m) (``permanent``), so the same (secret, m) always gives the
  same m' and no table of raw values is stored;
- instantaneous randomized response (IRR), fresh per report: y = m' w.p. p₂, else one of the k − 1
  others (q₂ = (1 − p₂)/(k − 1)).

Chained, one report is GRR over [k] again (a composition of symmetric channels is symmetric):

    p* = P(y = m | m) = p₁p₂ + (1 − p₁)q₂,    q* = P(y = m'' | m) = q₁p₂ + (1 − q₁)q₂ = (1 − p*)/(k − 1)

and p₂ is chosen so that p*/q* = e^{ε₁}: p* = e^{ε₁}/(e^{ε₁} + k − 1), p₂ = (p* − q₁)/(p₁ − q₁)
(``instant_keep``; p₂ ≤ 1 iff ε₁ ≤ ε∞). So one report is ε₁-LDP with exactly the plain
mechanism's p*, q* at ε₁, and the decoders reuse the pure estimators and exact variances
unchanged. All reports of one value are post-processing of its PRR (and of value-independent
parts), so a device that keeps its value reveals at most ε∞ however often it reports; one whose
value changes reveals at most ε∞ per distinct memo key, i.e. ``epsilon_lifetime`` = min(d, k)·ε∞.

Unary encoding (L-OSUE, ``longitudinal.LOSUE``) memoizes a d-bit vector instead: OUE's PRR at ε∞
per bit, SUE's IRR per bit (``unary_instant_keep``).
"""

from __future__ import annotations

import hashlib
import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import numpy as np

from ldptel.mechanisms.base import Mechanism, check_epsilon
from ldptel.mechanisms.device_secret import derive, derive_index, device_secret
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.grr import perturb_categorical, perturb_one
from ldptel.mechanisms.randomness import resolve
from ldptel.proto import ReportBatch

U64 = float(1 << 64)


def check_memo_epsilons(epsilon: float, epsilon_inf: Any) -> float:
    """ε∞ as a float: required, 0 < ε∞ ≤ 10 and ε∞ > ε (a PRR at ε∞ ≤ ε₁ leaves nothing for the
    IRR); else ``ValueError`` naming epsilon_inf."""
    if epsilon_inf is None:
        raise ValueError("epsilon_inf is required with memoize=True (the lifetime ε per value)")
    eps_inf = check_epsilon(epsilon_inf, "epsilon_inf")
    if not eps_inf > epsilon:
        raise ValueError(f"epsilon_inf must be greater than epsilon, got epsilon = {epsilon:g} "
                         f">= epsilon_inf = {eps_inf:g}")
    return eps_inf


def grr_keep(epsilon: float, k: int) -> float:
    """e^ε/(e^ε + k − 1): GRR's keep probability over k symbols."""
    e = math.exp(epsilon)
    return e / (e + k - 1)


def instant_keep(epsilon: float, epsilon_inf: float, k: int) -> float:
    """p₂ = (p* − q₁)/(p₁ − q₁): the IRR keep probability making PRR(ε∞) → IRR one ε-LDP GRR."""
    p1 = grr_keep(epsilon_inf, k)
    q1 = (1 - p1) / (k - 1)
    return (grr_keep(epsilon, k) - q1) / (p1 - q1)


def unary_instant_keep(epsilon: float, epsilon_inf: float) -> float:
    """L-OSUE: PRR is OUE at ε∞ (1 → 1 w.p. ½, 0 → 1 w.p. q₁ = 1/(e^{ε∞} + 1)), IRR keeps each
    bit w.p. p₂ (flips it otherwise). Chained P(1 | 1) = ½ and P(1 | 0) = q₁p₂ + (1 − q₁)(1 − p₂);
    setting the latter to OUE's q* = 1/(e^{ε₁} + 1) gives p₂ = (1 − q₁ − q*)/(1 − 2q₁)."""
    q1 = 1 / (math.exp(epsilon_inf) + 1)
    q_star = 1 / (math.exp(epsilon) + 1)
    return (1 - q1 - q_star) / (1 - 2 * q1)


class Chain:
    """PRR then IRR over the alphabet [k] (module docstring)."""

    def __init__(self, epsilon: float, epsilon_inf: float, k: int, label: bytes) -> None:
        self.k = k
        self.p1 = grr_keep(epsilon_inf, k)
        self.q1 = (1 - self.p1) / (k - 1)
        self.p2 = instant_keep(epsilon, epsilon_inf, k)
        self.q2 = (1 - self.p2) / (k - 1)
        self.label = label

    @property
    def p_star(self) -> float:
        return self.p1 * self.p2 + (1 - self.p1) * self.q2

    @property
    def q_star(self) -> float:
        return self.q1 * self.p2 + (1 - self.q1) * self.q2

    def permanent(self, secret: bytes, key: int) -> int:
        """m' for memo key ``key``: keep iff u < p₁ with u = the digest's first 8 bytes / 2^64,
        else the other symbol r mod (k − 1) (skipping ``key``), r = the next 8 bytes."""
        digest = derive(secret, self.label + int(key).to_bytes(8, "little"))
        if int.from_bytes(digest[:8], "little") / U64 < self.p1:
            return int(key)
        other = int.from_bytes(digest[8:16], "little") % (self.k - 1)
        return other + (other >= key)

    def permanent_random(self, keys: np.ndarray, rng) -> np.ndarray:
        """PRR of fresh simulated devices (``rng`` instead of the HMAC)."""
        return perturb_categorical(keys, self.k, self.p1, rng).astype(np.int64)

    def instant(self, prr: np.ndarray, rng) -> np.ndarray:
        return perturb_categorical(np.asarray(prr, dtype=np.int64), self.k, self.p2, rng)

    def instant_one(self, prr: int, draws: Draws = SYSTEM_DRAWS) -> int:
        return perturb_one(prr, self.k, self.p2, draws)


def secret_list(secrets: bytes | Sequence[bytes], n: int) -> tuple[list[bytes], np.ndarray]:
    """Distinct device secrets and each report's index into them: one ``bytes`` is one device
    for all ``n`` reports, else one secret per report (each ≥ 16 bytes)."""
    if isinstance(secrets, bytes):
        return [device_secret(secrets)], np.zeros(n, dtype=np.int64)
    items = list(secrets)
    if len(items) != n:
        raise ValueError(f"secrets must hold one secret per value ({n}), got {len(items)}")
    index: dict[bytes, int] = {}
    inverse = np.fromiter((index.setdefault(s, len(index)) for s in items), np.int64, n)
    distinct = list(index)
    for s in distinct:
        device_secret(s)
    return distinct, inverse


def derived_indices(secrets: list[bytes], label: bytes, size: int) -> np.ndarray:
    """``derive_index(secret, label, size)`` of each secret (int64)."""
    return np.fromiter((derive_index(s, label, size) for s in secrets), np.int64, len(secrets))


def shake_uniforms(secret: bytes, label: bytes, count: int) -> np.ndarray:
    """``count`` uniforms in [0, 1) from SHAKE-256 of HMAC-SHA256(secret, label)."""
    stream = hashlib.shake_256(derive(secret, label)).digest(4 * count)
    return np.frombuffer(stream, dtype="<u4").astype(np.float64) / 2**32


NO_PARTS: dict[str, np.ndarray] = {}


class Memoized(Mechanism):
    """The memoized API on top of a mechanism class (``class LGRR(Memoized, GRR)``).

    Hooks a memoized mechanism defines (defaults: no fixed parts, memo key = the value, the GRR
    chain): ``device_parts(secrets)`` / ``draw_device_parts(n, rng)`` (the per-device fixed
    columns, from secrets or drawn for fresh devices), ``memo_keys(values, parts)`` and
    ``key_one`` (memo keys; values as ``prepare`` / ``check_value`` return them),
    ``permanent(secret, key)``, ``permanent_random(keys, rng)``, ``instant(prr, rng)``,
    ``instant_one(prr)``, ``report_columns(values, parts, irr)`` and ``columns_one``;
    ``alphabet`` (k, for ``epsilon_lifetime``)."""

    memoize = True
    epsilon_inf: float
    alphabet: int
    chain: Chain

    def init_memo(self, epsilon_inf: Any, secret: bytes | None, alphabet: int,
                  label: bytes | None = None) -> None:
        """Check ε∞, keep the device ``secret`` (random if None), and build the chain over
        ``alphabet`` symbols with the HMAC ``label`` (mechanisms with their own chains pass none)."""
        self.epsilon_inf = check_memo_epsilons(self.epsilon, epsilon_inf)
        self.secret = device_secret(secret)
        self._device: Device | None = None
        self.alphabet = alphabet
        if label is not None:
            self.chain = Chain(self.epsilon, self.epsilon_inf, alphabet, label)

    @property
    def epsilon_lifetime(self) -> float:
        """min(d, k)·ε∞: what a device whose value changes can reveal over its whole life."""
        d = self.domain_size or self.alphabet
        return min(d, self.alphabet) * self.epsilon_inf

    def device(self, secret: bytes) -> Device:
        """The reporting state of one device (its fixed parts and memoized PRRs)."""
        return Device(self, device_secret(secret))

    def public_params(self) -> dict[str, Any]:
        return {**super().public_params(), "memoize": True, "epsilon_inf": self.epsilon_inf}

    # --- hooks with defaults --------------------------------------------------------------
    def prepare(self, values: Any) -> Any:
        return self.check_values(values)

    def device_parts(self, secrets: list[bytes]) -> dict[str, np.ndarray]:
        return NO_PARTS

    def draw_device_parts(self, n: int, rng) -> dict[str, np.ndarray]:
        return NO_PARTS

    def memo_keys(self, values: Any, parts: dict[str, Any]) -> np.ndarray:
        return cast("np.ndarray", values)

    @abstractmethod
    def report_columns(self, values: Any, parts: dict[str, Any], irr: Any) -> dict[str, Any]:
        """The payload columns of reports with IRR outputs ``irr``."""

    @abstractmethod
    def columns_one(self, parts: dict[str, Any], irr: Any) -> dict[str, Any]:
        """The payload columns of one report (Python scalars in lists)."""

    def permanent(self, secret: bytes, key: int) -> Any:
        return self.chain.permanent(secret, key)

    def permanent_random(self, keys: np.ndarray, rng) -> np.ndarray:
        return self.chain.permanent_random(keys, rng)

    def instant(self, prr: Any, rng) -> np.ndarray:
        return self.chain.instant(prr, rng)

    def instant_one(self, prr: Any, draws: Draws = SYSTEM_DRAWS) -> Any:
        return self.chain.instant_one(prr, draws)

    def stack_permanent(self, prrs: list[Any]) -> np.ndarray:
        return np.asarray(prrs, dtype=np.int64)

    def check_value(self, value: Any) -> Any:
        """One value for ``Device.encode``: an integer in [0, d), else ``ValueError``."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"value must be an integer in [0, {self.domain_size}), got {value!r}")
        if not 0 <= value < self.domain_size:
            raise ValueError(f"value must be in [0, {self.domain_size}), got {value}")
        return int(value)

    def key_one(self, value: Any, parts: dict[str, int]) -> int:
        """The memo key of one checked value (scalar ``memo_keys``)."""
        return int(value)

    # --- encoding -------------------------------------------------------------------------
    def encode(self, value: Any, campaign: str = "", draws: Draws = SYSTEM_DRAWS) -> ReportBatch:
        """One report of the device of ``self.secret`` (``device(secret).encode``)."""
        if self._device is None or self._device.secret != self.secret:
            self._device = Device(self, self.secret)
        return self._device.encode(value, campaign, draws)

    def encode_batch(self, values: Any, rng: np.random.Generator | None = None,
                     campaign: str = "", batch_id: bytes | None = None,
                     secrets: bytes | Sequence[bytes] | None = None) -> ReportBatch:
        """Reports of many values (vectorized). Without ``secrets`` every value is a fresh
        simulated device (fixed parts and PRR drawn from ``rng``); with ``secrets`` (one per
        value, or one ``bytes`` for a single device) the PRR is each (secret, memo key)'s HMAC
        derivation, as on the device, and only the IRR uses ``rng``."""
        arr = self.prepare(values)
        n = len(arr)
        gen = resolve(rng)
        if secrets is None:
            parts = self.draw_device_parts(n, gen)
            keys = self.memo_keys(arr, parts)
            prr = self.permanent_random(keys, gen)
        else:
            distinct, inverse = secret_list(secrets, n)
            parts = {k: v[inverse] for k, v in self.device_parts(distinct).items()}
            keys = self.memo_keys(arr, parts)
            pair = inverse * np.int64(self.alphabet) + keys
            uniq, back = np.unique(pair, return_inverse=True)
            prr = self.stack_permanent([self.permanent(distinct[int(u) // self.alphabet],
                                                       int(u) % self.alphabet) for u in uniq])
            prr = prr[back.reshape(-1)]
        cols = self.report_columns(arr, parts, self.instant(prr, gen))
        return self.pack(cols, n, campaign, batch_id)


class MemoizedOracle(Memoized):
    """A memoized mechanism built from ``(epsilon, domain_size)`` like its plain class, plus
    ``epsilon_inf`` and the device ``secret``; one chain over ``memo_alphabet()`` symbols with
    the HMAC label ``label`` (None: the class draws its own permanent response)."""

    label: ClassVar[bytes | None] = None

    def __init__(self, epsilon: float, domain_size: int, epsilon_inf: Any = None,
                 secret: bytes | None = None) -> None:
        super().__init__(epsilon, domain_size)
        self.init_memo(epsilon_inf, secret, self.memo_alphabet(), self.label)

    def memo_alphabet(self) -> int:
        return self.domain_size


class MemoizedSign(MemoizedOracle):
    """A memoized binary sign response (Hadamard response, Haar ranges): memo key = the ±1
    entry as 0/1, k = 2, chained keep probability p₁p₂ + (1 − p₁)(1 − p₂) = e^{ε₁}/(e^{ε₁} + 1)."""

    def memo_alphabet(self) -> int:
        return 2

    @property
    def p_keep(self) -> float:
        return self.chain.p_star


class Device:
    """One device of a memoized mechanism: ``encode(value)`` → a ``ReportBatch`` of one report.
    Its fixed parts are derived once; each memo key's PRR once (kept in memory; recomputing it
    from the secret gives the same answer). Scalar path: OS randomness, no numpy per report
    where the mechanism avoids it."""

    def __init__(self, mech: Memoized, secret: bytes) -> None:
        self.mech = mech
        self.secret = secret
        parts = mech.device_parts([secret])
        self.parts = {k: int(v[0]) for k, v in parts.items()}
        self._memo: dict[int, Any] = {}

    def encode(self, value: Any, campaign: str = "", draws: Draws = SYSTEM_DRAWS) -> ReportBatch:
        m = self.mech
        key = m.key_one(m.check_value(value), self.parts)
        prr = self._memo.get(key)
        if prr is None:
            prr = m.permanent(self.secret, key)
            if len(self._memo) < 10_000:
                self._memo[key] = prr
        return m.pack(m.columns_one(self.parts, m.instant_one(prr, draws)), 1, campaign)
