"""Common contract of the frequency oracles.

A mechanism holds its parameters and its math (p, q, variance), randomizes values into columnar
payload arrays, and packs them into a ``ReportBatch``. The aggregator's decoder for a mechanism
reads the same object, so the math lives in one place.
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.errors import bad_argument
from ldptel.mechanisms.randomness import OS_RANDOM, OsRandom, resolve
from ldptel.proto import SCHEMA_VERSION, ReportBatch

MAX_EPSILON = 10.0
# The floor of ε (per report, and every ε a mechanism derives). Numerically: the formulas divide
# by p − q, e^ε − 1 or tanh(ε/2), computed from exp(ε), whose rounding leaves a relative error of
# about 2⁻⁵³/ε in e^ε − 1: at ε = 1e-17 exp(ε) is exactly 1 and the central-ε bound divided by
# zero (issue 24); at 0.01 the error is 1.1e-14. Statistically: the count variance grows as
# 1/(e^ε − 1)² ≈ 1/ε², 10⁴ times that of ε = 1 at 0.01, so an estimate within 1 % of n already
# needs ~10⁸·d reports; below that no campaign produces a usable estimate.
MIN_EPSILON = 0.01
Z95 = 1.959963984540054  # two-sided 95% normal quantile


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """ε must be a real number with ``MIN_EPSILON`` (0.01) ≤ ε ≤ ``MAX_EPSILON`` (10)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.integer, np.floating)):
        raise bad_argument(f"{name} must be a number, got {type(epsilon).__name__}", name)
    eps = float(epsilon)
    if not math.isfinite(eps) or not MIN_EPSILON <= eps <= MAX_EPSILON:
        raise bad_argument(f"{name} must satisfy {MIN_EPSILON:g} <= {name} <= {MAX_EPSILON:g}, "
                          f"got {epsilon!r}", name)
    return eps


def check_int(value: Any, name: str, low: int, high: int | None = None) -> int:
    """An integer (not bool) with low ≤ value (≤ high)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise bad_argument(f"{name} must be an integer, got {type(value).__name__}", name)
    v = int(value)
    if v < low or (high is not None and v > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise bad_argument(f"{name} must be {bound}, got {v}", name)
    return v


class Mechanism(ABC):
    """An ε-LDP randomizer over the integer domain [0, d)."""

    name: ClassVar[str]
    payload: ClassVar[str]  # the ReportBatch oneof field this mechanism fills

    def __init__(self, epsilon: float, domain_size: int) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.domain_size = check_int(domain_size, "domain_size", 2, 1 << 31)

    # --- math -----------------------------------------------------------------------------
    @abstractmethod
    def variance_star(self) -> float:
        """Var*: per-report variance of a count estimate for an item of frequency ≈ 0."""

    @abstractmethod
    def count_variance(self, counts: np.ndarray, n: int) -> np.ndarray:
        """Exact variance of each unbiased count estimate, given the items' true counts."""

    # --- encoding -------------------------------------------------------------------------
    @abstractmethod
    def randomize(self, values: np.ndarray, rng: np.random.Generator | OsRandom) -> dict[str, Any]:
        """Randomize validated integer ``values``; return the payload's columns (numpy)."""

    @abstractmethod
    def payload_message(self, columns: dict[str, Any]) -> Any:
        """The payload protobuf message for ``columns``."""

    @abstractmethod
    def columns(self, batch: ReportBatch) -> dict[str, Any]:
        """The payload of ``batch`` as numpy columns (inverse of ``payload_message``); a bytes
        field whose size does not fit ``batch.count`` reports raises ``InvalidReport``
        (``checks.bit_rows``, ``checks.packed_bits``)."""

    @abstractmethod
    def validate_columns(self, columns: dict[str, Any], count: int) -> None:
        """Collector-side check of a batch's ``columns`` (vectorized, ``checks``): raise
        ``InvalidReport`` for the lowest-indexed report that is missing, out of range or
        implausible for an honest device."""

    def report_checks(self, columns: dict[str, Any]) -> list[Any]:
        """The per-report value checks of ``validate_columns`` (``checks.Check`` tuples: mask,
        reason), for columns of the right lengths; ``checks.rejected`` turns them into a mask."""
        raise NotImplementedError(f"{type(self).__name__} has no per-report checks")

    def checked_columns(self, batch: ReportBatch) -> dict[str, Any]:
        """The columns of a batch from an untrusted client, checked: ``columns`` (the wire shape)
        then ``validate_columns``; raises ``InvalidReport`` naming the lowest bad index."""
        columns = self.columns(batch)
        self.validate_columns(columns, batch.count)
        return columns

    def check_values(self, values: Any) -> np.ndarray:
        """Integers in [0, d) as an int64 array, else ``ValueError`` naming ``value``."""
        arr = np.asarray(values)
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise ValueError(f"value must be an integer in [0, {self.domain_size}), got {arr.dtype}")
        arr = arr.astype(np.int64, copy=False).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= self.domain_size):
            bad = arr[(arr < 0) | (arr >= self.domain_size)][0]
            raise ValueError(f"value must be in [0, {self.domain_size}), got {bad}")
        return arr

    def encode_batch(
        self,
        values: Any,
        rng: np.random.Generator | None = None,
        campaign: str = "",
        batch_id: bytes | None = None,
    ) -> ReportBatch:
        """Randomize many values into one columnar ``ReportBatch`` (vectorized).

        ``rng`` is for tests and simulations; without it randomness comes from the OS.
        """
        arr = self.check_values(values)
        return self.pack(self.randomize(arr, resolve(rng)), arr.size, campaign, batch_id)

    def encode(self, value: Any, campaign: str = "", draws: Draws = SYSTEM_DRAWS) -> ReportBatch:
        """Randomize one value with OS randomness (``draws``: another source of the same draws,
        for the cross-language test vectors) into a ``ReportBatch`` holding one report."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"value must be an integer in [0, {self.domain_size}), got {value!r}")
        v = int(value)
        if not 0 <= v < self.domain_size:
            raise ValueError(f"value must be in [0, {self.domain_size}), got {v}")
        return self.pack(self.randomize_one(v, draws), 1, campaign)

    def randomize_one(self, value: int, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        """One device's report from ``draws`` (``ldptel.mechanisms.draws``; every device-side
        mechanism overrides this with its scalar path; the vectorized fallback takes OS
        randomness only)."""
        if draws is not SYSTEM_DRAWS:
            raise NotImplementedError(f"{type(self).__name__} has no scalar encode from draws")
        return self.randomize(np.array([value], dtype=np.int64), OS_RANDOM)

    def pack(self, columns: dict[str, Any], count: int, campaign: str = "",
             batch_id: bytes | None = None) -> ReportBatch:
        batch = ReportBatch(
            campaign=campaign,
            batch_id=batch_id if batch_id is not None else os.urandom(16),
            count=count,
            schema_version=SCHEMA_VERSION,
        )
        getattr(batch, self.payload).CopyFrom(self.payload_message(columns))
        return batch

    def public_params(self) -> dict[str, Any]:
        """Parameters a client needs to build this mechanism (JSON-safe)."""
        return {"oracle": self.name, "epsilon": self.epsilon, "domain_size": self.domain_size}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.public_params().items() if k != "oracle")
        return f"{type(self).__name__}({args})"


class PureMechanism(Mechanism):
    """A 'pure' protocol (Wang et al. 2017): a report supports its true item w.p. p and any
    other item w.p. q, so Ĉ_v = (C_v − N·q)/(p − q) is unbiased with
    Var[Ĉ_v] = (c_v·p(1−p) + (N − c_v)·q(1−q)) / (p − q)².

    The variance is linear in c_v, so evaluated at the raw estimate Ĉ_v (not clipped at 0) it is
    an unbiased estimate of Var[Ĉ_v], and it stays positive: over the possible support counts
    C_v ∈ [0, N] it ranges from N·p·q/(p − q)² to N·(1−p)(1−q)/(p − q)²."""

    @property
    @abstractmethod
    def p(self) -> float: ...

    @property
    @abstractmethod
    def q(self) -> float: ...

    def variance_star(self) -> float:
        return self.q * (1 - self.q) / (self.p - self.q) ** 2

    def count_variance(self, counts: np.ndarray, n: int | np.ndarray) -> np.ndarray:
        # no clipping of c to [0, n]: E[max(Ĉ, 0)] > c for rare items inflated the std errors
        # (GRR, d = 256, N = 20 000, ε = 1: variance +4.5%, CI coverage 0.960)
        c = np.asarray(counts, dtype=np.float64)
        p, q = self.p, self.q
        return (c * p * (1 - p) + (n - c) * q * (1 - q)) / (p - q) ** 2

    def null_std_error(self, n: int | np.ndarray) -> np.ndarray:
        """√(n·q(1−q))/(p − q): the std error of Ĉ for an item nobody among the n reports holds."""
        q = self.q
        return np.sqrt(np.asarray(n, dtype=np.float64) * q * (1 - q)) / (self.p - self.q)

    def unbiased_counts(self, support: np.ndarray, n: int | np.ndarray,
                        scale: float = 1.0) -> np.ndarray:
        """Ĉ = scale·(C − n·q)/(p − q) from support counts C of n reports (``n`` may be per
        item); ``scale`` is an inverse sampling rate (a range tree level's H), else 1."""
        excess = np.asarray(support, dtype=np.float64) - n * self.q
        if scale != 1:
            excess = scale * excess
        return excess / (self.p - self.q)

