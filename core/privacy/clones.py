"""Central (ε, δ) of n shuffled ε₀-LDP reports: privacy amplification by shuffling.

Reference: V. Feldman, A. McMillan, K. Talwar, "Hiding Among the Clones: A Simple and Nearly
Optimal Analysis of Privacy Amplification by Shuffling", FOCS 2021 (arXiv:2012.12803): the clone
reduction of its Section 3 and the numerical method of its Appendix E; the authors' code is
https://github.com/apple/ml-shuffling-amplification (``computeamplification.py``).

The bound. Let α = e^ε₀/(1+e^ε₀), C ~ Bin(n−1, e^−ε₀) (the "clones" of the differing user) and,
given C = c, A ~ Bin(c, ½). The shuffled output of n ε₀-LDP reports is (ε, δ)-DP whenever

    δ ≥ M(ε) = E_C[ D_{e^ε}(P_C ‖ Q_C) ],   P_c = α·A + (1−α)·(A+1),   Q_c = (1−α)·A + α·(A+1)

(mixtures of the laws of A and A+1; D_{e^ε}(P‖Q) = Σ_x max(0, P(x) − e^ε Q(x)) is the hockey-stick
divergence, symmetric here because a ↦ c+1−a swaps P_c and Q_c). P_c/Q_c falls in a, so with
u = α − e^ε(1−α), v = e^ε α − (1−α) and K = ⌊(c+1)·u / ((1+e^ε)(2α−1))⌋ (the last a with
P_c(a) > e^ε Q_c(a)), with F, f the Bin(c, ½) cdf and pmf:

    D_c(ε) = u·F(K) − v·F(K−1) = (1 − e^ε)·F(K) + v·f(K).

D_c is non-increasing in c (P_{c+1}, Q_{c+1} are P_c, Q_c plus the same fair coin: post-processing),
so M(ε) is non-increasing in n, and M falls in ε. ``shuffle_epsilon`` evaluates M over the bulk of C
(each tail ≤ 10⁻⁶·δ) vectorized, exactly per c up to 2,048 values of c and in blocks bounded by
their first c beyond; c outside the bulk is bounded by D_0 below and D_hi above. It returns the
smallest ε on a fixed geometric grid (relative step 10⁻⁴) with that bound ≤ δ: a certified upper
bound, tight to the grid. The authors' code computes the same M with c in blocks bounded by their
endpoints; its lower and upper modes bracket the value returned here (tests/test_shuffle_epsilon.py).
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache

import numpy as np
from scipy import special, stats

__all__ = ["closed_form_epsilon", "default_central_delta", "n_bucket", "shuffle_epsilon"]

_GRID_STEP = math.log1p(1e-4)  # ε is returned on the grid {e^(j·_GRID_STEP)}: 10⁻⁴ relative resolution
_EPS_FLOOR = 1e-12  # smallest ε the search considers
_MAX_POINTS = 2_048  # above this many values of C, C is taken in blocks (bounded by their first c)
_EPS0_MAX = 700.0  # e^ε₀ overflows above ~709; an ε₀ this large has no amplification for any real n
_N_MAX = 10**9  # n_bucket: larger n are computed as this (an upper bound: M falls in n)
_N_EXACT_BELOW = 1_000  # n below this is used as is; above, rounded down to 3 significant digits


def default_central_delta(n: int) -> float:
    """The central δ used when a campaign sets none: min(1/(10·n), 10⁻⁶)."""
    n = _check_n(n)
    return min(1.0 / (10 * n), 1e-6)


def closed_form_epsilon(epsilon0: float, n: int, delta: float) -> float | None:
    """Theorem 3.1 of Feldman–McMillan–Talwar 2021, or None outside its range of validity.

    ε ≤ log(1 + (e^ε₀−1)/(e^ε₀+1)·(8·√(e^ε₀·log(4/δ))/√n + 8·e^ε₀/n)), valid for
    ε₀ ≤ log(n / (16·log(4/δ))) (the condition the authors' code checks).
    """
    epsilon0, n, delta = _check_args(epsilon0, n, delta)
    if epsilon0 > math.log(n / (16 * math.log(4 / delta))):
        return None
    e0 = math.exp(epsilon0)
    gain = 8 * math.sqrt(e0 * math.log(4 / delta)) / math.sqrt(n) + 8 * e0 / n
    return math.log1p((e0 - 1) / (e0 + 1) * gain)


def n_bucket(n: int) -> int:
    """n rounded down to the cache grid: exact below 1,000, else to 3 significant digits, and at
    most ``_N_MAX``.

    Rounding *down* keeps the cached ε an upper bound for every n in the bucket, because the bound
    is non-increasing in n (more reports, more clones; see the module docstring). The loss is at
    most 1 % of n, about 0.5 % of ε (ε ∝ 1/√n). Above ``_N_MAX`` scipy's binomial quantiles of C
    lose their precision (n = 10¹⁰ certified nothing, 9·10¹⁵ raised): n is taken as ``_N_MAX``,
    still an upper bound, and a window never holds that many reports of one release anyway.
    """
    n = min(_check_n(n), _N_MAX)
    if n < _N_EXACT_BELOW:
        return n
    unit = int(10 ** (len(str(n)) - 3))
    return n // unit * unit


def shuffle_epsilon(epsilon0: float, n: int, delta: float) -> float | None:
    """Central ε of n uniformly shuffled ε₀-LDP reports at central δ (FMT 2021 numerical bound).

    Returns the smallest ε (10⁻⁴ relative grid) with M(ε) ≤ δ for n rounded down to its
    ``n_bucket`` (see the module docstring for M), never above the closed form of Theorem 3.1 where
    that is valid; None where the bound certifies no amplification (no grid ε below ε₀ has
    M(ε) ≤ δ). Covers one release of one report per device. Cached per (ε₀, n-bucket, δ).
    Raises ValueError naming the argument for ε₀ ≤ 0, n < 1, δ ∉ (0, 1).
    """
    epsilon0, n, delta = _check_args(epsilon0, n, delta)
    return _shuffle_epsilon_cached(epsilon0, n_bucket(n), delta)


@lru_cache(maxsize=4096)
def _shuffle_epsilon_cached(epsilon0: float, n: int, delta: float) -> float | None:
    if epsilon0 > _EPS0_MAX:
        return None
    bulk = _Clones(epsilon0, n, delta)
    j_top = math.ceil(math.log(epsilon0) / _GRID_STEP) - 1  # the last grid point below ε₀
    if not bulk.certifies(_grid(j_top), delta):
        return None
    closed = closed_form_epsilon(epsilon0, n, delta)
    j_hi = j_top
    if closed is not None and closed < epsilon0:
        j_closed = math.ceil(math.log(closed) / _GRID_STEP)
        if j_closed < j_top and bulk.certifies(_grid(j_closed), delta):
            j_hi = j_closed
    j_floor, halving = math.floor(math.log(_EPS_FLOOR) / _GRID_STEP), round(math.log(2) / _GRID_STEP)
    while True:  # halve ε until a grid point is not certified
        j_lo = max(j_hi - halving, j_floor)
        if not bulk.certifies(_grid(j_lo), delta):
            break
        if j_lo == j_floor:
            return _grid(j_floor)
        j_hi = j_lo
    while j_hi - j_lo > 1:  # invariant: j_hi certified, j_lo not; M falls in ε
        j_mid = (j_lo + j_hi) // 2
        if bulk.certifies(_grid(j_mid), delta):
            j_hi = j_mid
        else:
            j_lo = j_mid
    result = _grid(j_hi)
    return min(result, closed) if closed is not None else result


def _grid(j: int) -> float:
    return math.exp(j * _GRID_STEP)


class _Clones:
    """C ~ Bin(n−1, e^−ε₀) restricted to its bulk [lo, hi] (each tail ≤ δ·10⁻⁶), maybe in blocks."""

    def __init__(self, epsilon0: float, n: int, delta: float) -> None:
        self.alpha = 1.0 / (1.0 + math.exp(-epsilon0))
        self.alpha_bar = 1.0 / (1.0 + math.exp(epsilon0))
        trials, p = n - 1, math.exp(-epsilon0)
        tail = delta * 1e-6
        lo = int(stats.binom.ppf(tail, trials, p))
        hi = int(stats.binom.isf(tail, trials, p))
        block = max(1, math.ceil((hi - lo + 1) / _MAX_POINTS))
        # Block starts; block i is [starts[i], starts[i+1]−1] and its D is bounded by D at its start.
        self.c = np.arange(lo, hi + 1, block, dtype=np.int64)
        if block == 1:
            self.weight = stats.binom.pmf(self.c, trials, p)
        else:
            ends = np.append(self.c[1:] - 1, hi)
            mass = stats.binom.cdf(ends, trials, p) - stats.binom.cdf(self.c - 1, trials, p)
            self.weight = np.maximum(mass, 0.0)
        self.mass_below = float(stats.binom.cdf(lo - 1, trials, p)) if lo > 0 else 0.0
        self.mass_above = float(stats.binom.sf(hi, trials, p))
        self.hi = hi

    def divergence(self, c: np.ndarray, epsilon: float) -> np.ndarray:
        """D_c(ε) = (1 − e^ε)·F(K) + v·f(K) per c (module docstring), clipped at 0."""
        e = math.exp(epsilon)
        u = self.alpha - e * self.alpha_bar
        v = e * self.alpha - self.alpha_bar
        k = np.floor((c + 1) * (u / ((1 + e) * (self.alpha - self.alpha_bar)))).astype(np.int64)
        k = np.clip(k, 0, c)
        d = (1 - e) * special.bdtr(k, c, 0.5) + v * stats.binom.pmf(k, c, 0.5)
        clipped: np.ndarray = np.maximum(d, 0.0)
        return clipped

    def delta_bound(self, epsilon: float) -> float:
        """Upper bound on M(ε): exact over the bulk; c < lo bounded by D_0, c > hi by D_hi."""
        d = self.divergence(self.c, epsilon)
        edges = self.divergence(np.array([0, self.hi], dtype=np.int64), epsilon)
        return float(np.dot(self.weight, d) + self.mass_below * edges[0] + self.mass_above * edges[1])

    def certifies(self, epsilon: float, delta: float) -> bool:
        return self.delta_bound(epsilon) <= delta


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n must be an integer ≥ 1, got {n!r}")
    return int(n)


def _check_args(epsilon0: float, n: int, delta: float) -> tuple[float, int, float]:
    if isinstance(epsilon0, bool) or not isinstance(epsilon0, numbers.Real) or not (
        math.isfinite(epsilon0) and epsilon0 > 0
    ):
        raise ValueError(f"epsilon0 must be a finite number > 0, got {epsilon0!r}")
    n = _check_n(n)
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return float(epsilon0), n, float(delta)
