"""Mean estimation of bounded real values: Duchi's one-bit mechanism, Wang et al.'s piecewise and
hybrid mechanisms (the math of each; 1BitMean is in ``onebitmean.py``).

A value x is clipped to [lower, upper] and mapped to t = (2x − lower − upper)/(upper − lower) in
[−1, 1]; each mechanism turns t into a report whose unbiased value y has E[y | t] = t and
Var[y | t] = ``output_variance(t)``:

- Duchi et al. (2013/2018): y = ±C_D, C_D = (e^ε + 1)/(e^ε − 1), +C_D w.p.
  1/2 + t(e^ε − 1)/(2(e^ε + 1)); Var = C_D² − t².
- piecewise (Wang et al., ICDE 2019), with s = e^{ε/2}: C = (s + 1)/(s − 1),
  l(t) = (C + 1)t/2 − (C − 1)/2, r(t) = l(t) + C − 1; y uniform on [l, r] w.p. s/(s + 1), else
  uniform on [−C, l) ∪ (r, C] (the density ratio between the two parts is e^ε);
  Var = t²/(s − 1) + (s + 3)/(3(s − 1)²).
- hybrid: piecewise w.p. α, else Duchi, with α = 1 − e^{−ε/2} for ε > ε* ≈ 0.61 and α = 0 below;
  both branches are unbiased, so Var = α·Var_PM + (1 − α)·Var_D, which for ε > ε* is the
  constant α(s + 3)/(3(s − 1)²) + (1 − α)C_D² (the t² terms cancel).

The mean of N reports is ȳ (unbiased for the mean of the devices' t). Its published variance is
s²/N with s² the sample variance of the y's: exactly unbiased for Var[ȳ] when the N devices are
a random sample of the population whose mean is estimated (Var[y] = E[Var(y | t)] + Var(t)); for
a fixed set of devices, whose exact variance is Σ Var(y | tᵢ)/N², it is larger by Var(t)/N
(Duchi's y² = C_D² carries nothing about Σ tᵢ², so no unbiased estimate of that exists).
The mechanism with the lowest worst-case variance ``worst_variance`` is the default
(``default_numeric_mechanism``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ldptel.mechanisms.base import Mechanism, check_epsilon
from ldptel.mechanisms.checks import check_lengths, packed_bits, reject_first
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.errors import bad_argument
from ldptel.mechanisms.randomness import OS_RANDOM
from ldptel.proto import NumericPayload, ReportBatch

# Wang et al.'s threshold below which the hybrid mechanism is Duchi's (α = 0)
HYBRID_EPSILON = math.log((-5 + 2 * (6353 - 405 * math.sqrt(241)) ** (1 / 3)
                           + 2 * (6353 + 405 * math.sqrt(241)) ** (1 / 3)) / 27)


# Limits of [lower, upper], derived from every formula on the path (float64 overflows above
# 1.8e308). With M = max(|lower|, |upper|), h = (upper − lower)/2 ≤ M, C ≤ 401 the largest |y| of
# a report (piecewise at ε = 0.01: (e^0.005 + 1)/(e^0.005 − 1)) and n ≤ 2⁵³ reports:
# - encode: (v − lower)/h − 1 needs upper − lower finite: 2M < 1.8e308;
# - the mean: lower + (ȳ + 1)·h with |ȳ| ≤ C: |mean| ≤ (C + 2)·M;
# - its variance s²/n · h² with s² ≤ C²: C²·h² < 1.8e308, so h < 1.8e308^½ / C = 3.3e151;
# - the published sum n·mean, its std error n·se and CI: ≤ 2⁵³·(C + 2 + 1.96·C)·M = 1.1e19·M.
# The square binds: |lower|, |upper| ≤ MAX_BOUND = 1e150 keeps every one finite (C²·h² ≤ 1.6e305).
# Below, t = (v − lower)/h − 1 carries a rounding error of about 2⁻⁵³·M/h; the span must keep it
# under 2⁻²¹ (far below one report's noise, whose std error is ≥ 1 in t units) and h² normal:
# upper − lower ≥ max(2⁻³⁰·M, MIN_SPAN = 1e-150).
MAX_BOUND = 1e150
MIN_SPAN = 1e-150
MIN_RELATIVE_SPAN = 2.0 ** -30


def check_bounds(lower: Any, upper: Any) -> tuple[float, float]:
    """Finite real ``lower`` < ``upper`` within the limits above (``MAX_BOUND``, ``MIN_SPAN``,
    ``MIN_RELATIVE_SPAN``), else ``ValueError`` naming the key."""
    for name, v in (("lower", lower), ("upper", upper)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise bad_argument(f"{name} must be a finite number, got {v!r}", name)
        try:
            finite = math.isfinite(v)
        except OverflowError:  # an int beyond float64
            finite = True
        if not finite:
            raise bad_argument(f"{name} must be a finite number, got {v!r}", name)
        if abs(v) > MAX_BOUND:  # type: ignore[operator]
            raise bad_argument(f"{name} must be within ±{MAX_BOUND:g} (larger values overflow the "
                              f"variance of the mean), got {v!r}", name)
    lo, hi = float(lower), float(upper)
    if not lo < hi:
        raise bad_argument(f"upper must be above lower, got lower = {lower!r}, upper = {upper!r}", "upper")
    least = max(MIN_SPAN, MIN_RELATIVE_SPAN * max(abs(lo), abs(hi)))
    if hi - lo < least:
        raise bad_argument(f"upper must exceed lower by at least {least:.3g} (2^-30 of their magnitude, "
                          f"at least {MIN_SPAN:g}), got upper − lower = {hi - lo:.3g}", "upper")
    return lo, hi


class NumericMechanism(Mechanism):
    """An ε-LDP randomizer of a real value in [lower, upper] for estimating means.

    Subclasses give the report's unbiased value y of t (``unbiased_unit``), ``output_variance``
    and ``bound`` (the largest |y|); the column they fill is ``column`` ("bits" or "values")."""

    payload = "numeric"
    column: ClassVar[str]

    def __init__(self, epsilon: float, lower: float, upper: float) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.lower, self.upper = check_bounds(lower, upper)
        self.domain_size = 0  # not a categorical domain

    # --- math -----------------------------------------------------------------------------
    @property
    def bound(self) -> float:
        """The largest |y| of a report (the collector refuses anything beyond)."""
        raise NotImplementedError

    def output_variance(self, t: np.ndarray | float) -> np.ndarray:
        """Var[y | t] for t in [−1, 1]."""
        raise NotImplementedError

    def worst_variance(self) -> float:
        """max over t in [−1, 1] of ``output_variance`` (every formula here is a quadratic in t,
        so the maximum is at t = 0 or |t| = 1)."""
        return float(np.max(self.output_variance(np.array([-1.0, 0.0, 1.0]))))

    def variance_star(self) -> float:
        """The worst-case variance of one report's unbiased value (in t units)."""
        return self.worst_variance()

    def count_variance(self, counts: np.ndarray, n: int) -> np.ndarray:
        raise TypeError("a numeric mechanism estimates means, not counts: see output_variance")

    @property
    def half_width(self) -> float:
        """(upper − lower)/2: one unit of t in the value's units."""
        return (self.upper - self.lower) / 2

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        """Values clipped to [lower, upper] and mapped to t in [−1, 1]."""
        v = np.clip(np.asarray(values, dtype=np.float64), self.lower, self.upper)
        return np.clip((v - self.lower) / self.half_width - 1.0, -1.0, 1.0)

    def from_unit(self, t: float) -> float:
        """t back in the value's units (a mean of t's gives a mean of values)."""
        return self.lower + (t + 1.0) * self.half_width

    def unit_one(self, value: Any) -> float:
        """``to_unit`` of one value, in plain Python (the device's one-report path)."""
        v = min(max(float(value), self.lower), self.upper)
        return min(max((v - self.lower) / self.half_width - 1.0, -1.0), 1.0)

    def clipped(self, values: np.ndarray) -> int:
        """How many of ``values`` lie outside [lower, upper] (the SDK counts them)."""
        v = np.asarray(values, dtype=np.float64)
        return int(np.count_nonzero((v < self.lower) | (v > self.upper)))

    def mean_variance(self, values: np.ndarray) -> float:
        """Var[ȳ] for the fixed devices' ``values`` (in t units): Σ Var(y | tᵢ)/N²."""
        t = self.to_unit(values)
        return float(np.mean(self.output_variance(t)) / t.size)

    def mean_estimate(self, n: int, total: float, total_sq: float) -> tuple[float, float]:
        """(mean, variance of the mean) in the value's units from n reports with Σy = ``total``
        and Σy² = ``total_sq``: ȳ and s²/n (see the module docstring), s² = (Σy² − (Σy)²/n)/(n − 1)."""
        if n < 1:
            return math.nan, math.nan
        mean_t = total / n
        var_t = max(total_sq - total * total / n, 0.0) / (n - 1) / n if n > 1 else math.inf
        return float(self.from_unit(mean_t)), var_t * self.half_width ** 2

    # --- encoding -------------------------------------------------------------------------
    def unbiased_unit(self, columns: dict[str, Any]) -> np.ndarray:
        """Each report's unbiased value y of t (float64)."""
        raise NotImplementedError

    def randomize_unit(self, t: np.ndarray, rng) -> dict[str, Any]:
        """Randomize t in [−1, 1] (vectorized) into the payload's columns."""
        raise NotImplementedError

    def check_values(self, values: Any) -> np.ndarray:
        """Finite real numbers as a float64 array (clipping happens in ``randomize``), else
        ``ValueError`` naming ``value``."""
        arr = np.asarray(values)
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.number) or arr.size == 0):
            raise ValueError(f"value must be a real number, got {arr.dtype}")
        arr = arr.astype(np.float64, copy=False).reshape(-1)
        if arr.size and not np.isfinite(arr).all():
            raise ValueError(f"value must be a finite number, got {arr[~np.isfinite(arr)][0]}")
        return arr

    def encode(self, value: Any, campaign: str = "", draws: Draws = SYSTEM_DRAWS) -> ReportBatch:
        """Randomize one value (clipped to [lower, upper]) with OS randomness (``draws``)."""
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not math.isfinite(value):
            raise ValueError(f"value must be a finite real number, got {value!r}")
        return self.pack(self.randomize_one(value, draws), 1, campaign)

    def randomize(self, values: np.ndarray, rng) -> dict[str, Any]:
        return self.randomize_unit(self.to_unit(values), rng)

    def randomize_one(self, value: Any, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        if draws is not SYSTEM_DRAWS:
            raise NotImplementedError(f"{type(self).__name__} has no scalar encode from draws")
        return self.randomize(np.array([float(value)]), OS_RANDOM)

    def payload_message(self, columns: dict[str, Any]) -> NumericPayload:
        if self.column == "bits":
            return NumericPayload(bits=np.packbits(np.asarray(columns["bits"], dtype=bool)).tobytes())
        return NumericPayload(values=np.asarray(columns["values"], dtype=np.float64).tolist())

    def columns(self, batch: ReportBatch) -> dict[str, Any]:
        p = batch.numeric
        if self.column == "bits":
            return {"bits": packed_bits(p.bits, batch.count, "bits"),
                    "values": np.asarray(p.values, dtype=np.float64)}
        return {"values": np.asarray(p.values, dtype=np.float64),
                "bits": np.frombuffer(p.bits, dtype=np.uint8)}

    def validate_columns(self, columns: dict[str, Any], count: int) -> None:
        """``count`` entries in the mechanism's column, none in the other; real outputs finite
        and within [−bound, bound]."""
        other = "values" if self.column == "bits" else "bits"
        check_lengths(columns, count, [self.column],
                      empty={other: f"{self.name} reports carry {self.column}"})
        if self.column == "values":
            y = columns["values"]
            c = self.bound
            reject_first([(~(np.abs(y) <= c),
                           lambda i: f"value {y[i]!r} is outside the output range [-{c!r}, {c!r}]")])

    def public_params(self) -> dict[str, Any]:
        return {"mechanism": self.name, "epsilon": self.epsilon, "lower": self.lower,
                "upper": self.upper}


class Duchi(NumericMechanism):
    name = "duchi"
    column = "bits"

    @property
    def bound(self) -> float:
        e = math.exp(self.epsilon)
        return (e + 1) / (e - 1)

    def p_plus(self, t: np.ndarray | float) -> np.ndarray | float:
        """P(report +C | t) = 1/2 + t(e^ε − 1)/(2(e^ε + 1))."""
        return 0.5 + t / (2 * self.bound)

    def output_variance(self, t: np.ndarray | float) -> np.ndarray:
        return np.asarray(self.bound ** 2 - np.square(t), dtype=np.float64)

    def unbiased_unit(self, columns: dict[str, Any]) -> np.ndarray:
        return np.where(columns["bits"], self.bound, -self.bound)

    def randomize_unit(self, t: np.ndarray, rng) -> dict[str, Any]:
        return {"bits": rng.random(t.size) < self.p_plus(t)}

    def randomize_one(self, value: Any, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        return {"bits": [draws.uniform() < self.p_plus(self.unit_one(value))]}


class Piecewise(NumericMechanism):
    name = "piecewise"
    column = "values"

    @property
    def s(self) -> float:
        return math.exp(self.epsilon / 2)

    @property
    def bound(self) -> float:
        return (self.s + 1) / (self.s - 1)

    def output_variance(self, t: np.ndarray | float) -> np.ndarray:
        s = self.s
        return np.asarray(np.square(t) / (s - 1) + (s + 3) / (3 * (s - 1) ** 2), dtype=np.float64)

    def unbiased_unit(self, columns: dict[str, Any]) -> np.ndarray:
        return np.asarray(columns["values"], dtype=np.float64)

    def piece(self, t: np.ndarray, inside: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The output for t given the branch (``inside``: [l, r]) and a uniform ``u`` in [0, 1)."""
        c = self.bound
        left = (c + 1) / 2 * t - (c - 1) / 2
        right = left + c - 1
        outside = u * (c + 1)  # a point of [−C, l) ∪ (r, C], laid end to end from −C
        out = np.where(outside < left + c, outside - c, right + (outside - (left + c)))
        return np.clip(np.where(inside, left + u * (c - 1), out), -c, c)

    def randomize_unit(self, t: np.ndarray, rng) -> dict[str, Any]:
        inside = rng.random(t.size) < self.s / (self.s + 1)
        return {"values": self.piece(t, inside, rng.random(t.size))}

    def piece_one(self, t: float, draws: Draws = SYSTEM_DRAWS) -> float:
        """``piece`` of one t with OS randomness, in plain Python (draws: u, then the branch's
        uniform)."""
        c, u = self.bound, draws.uniform()
        left = (c + 1) / 2 * t - (c - 1) / 2
        if draws.uniform() < self.s / (self.s + 1):
            y = left + u * (c - 1)
        else:
            out = u * (c + 1)
            y = out - c if out < left + c else left + c - 1 + (out - (left + c))
        return min(max(y, -c), c)

    def randomize_one(self, value: Any, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        return {"values": [self.piece_one(self.unit_one(value), draws)]}


class Hybrid(Piecewise):
    name = "hybrid"
    column = "values"

    @property
    def alpha(self) -> float:
        """P(piecewise branch): 1 − e^{−ε/2} above ``HYBRID_EPSILON``, else 0 (Duchi only)."""
        return 1 - math.exp(-self.epsilon / 2) if self.epsilon > HYBRID_EPSILON else 0.0

    @property
    def duchi(self) -> Duchi:
        return Duchi(self.epsilon, self.lower, self.upper)

    @property
    def bound(self) -> float:
        return max(super().bound, self.duchi.bound) if self.alpha > 0 else self.duchi.bound

    def output_variance(self, t: np.ndarray | float) -> np.ndarray:
        a = self.alpha
        return a * super().output_variance(t) + (1 - a) * self.duchi.output_variance(t)

    def randomize_unit(self, t: np.ndarray, rng) -> dict[str, Any]:
        use_pm = rng.random(t.size) < self.alpha
        pm = super().randomize_unit(t, rng)["values"]
        duchi = self.duchi
        d = duchi.unbiased_unit(duchi.randomize_unit(t, rng))
        return {"values": np.where(use_pm, pm, d)}

    def randomize_one(self, value: Any, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        t = self.unit_one(value)
        if draws.uniform() < self.alpha:
            return {"values": [self.piece_one(t, draws)]}
        duchi = self.duchi
        return {"values": [duchi.bound if draws.uniform() < duchi.p_plus(t) else -duchi.bound]}


NUMERIC_CHOICES = (Duchi, Hybrid, Piecewise)  # the order breaks ties (Duchi = hybrid below ε*)


def default_numeric_mechanism(epsilon: float) -> str:
    """The mechanism of the lowest worst-case variance for ε (``worst_variance``)."""
    variances = [cls(epsilon, -1.0, 1.0).worst_variance() for cls in NUMERIC_CHOICES]
    return NUMERIC_CHOICES[int(np.argmin(variances))].name
