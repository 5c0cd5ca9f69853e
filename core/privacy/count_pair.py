"""The two-count pair that bounds n shuffled reports, and its exact hockey-stick divergence.

The pair (the "stronger clone" reduction of Feldman–McMillan–Talwar, SODA 2023, in the two-count
form of Wang et al., VLDB 2024, Lemma 4.5 — whose mechanism-specific Theorem 4.8 is unsound and not
used, ``amplification``; also the GRR blanket's and the attacks' pairs). n users; the observation
is (X, Y), two counts:

- user 1 adds (1, 0) w.p. u0, (0, 1) w.p. u1, nothing w.p. w = 1 − u0 − u1 under P; under Q u0
  and u1 swap;
- each of the n − 1 others adds (1, 0) w.p. r0, (0, 1) w.p. r1, nothing otherwise.

So C = (clones among the others) ~ Bin(n−1, R), R = r0 + r1, and given C, A ~ Bin(C, ρ), ρ = r0/R.
D_{e^ε}(P‖Q) = Σ_{x,y} max(0, P(x,y) − e^ε Q(x,y)) is computed per total t = x + y (a statistic with
the same law under P and Q): for fixed t the likelihood ratio grows in x, so the positive part is
x ≥ m_t, m_t = ⌊low_t⌋ + 1,

    low_t = [t(e^ε u0 − u1)/r1 + (e^ε − 1)·w·(n − t)/(1 − R)] / [(u0 − e^ε u1)/r0 + (e^ε u0 − u1)/r1],

and with B the pmf of C, b and S the pmf and upper tail of Bin(t−1, ρ) at m_t − 1 and m_t:

    ψ_t = b·[B(t−1)(u0 − e^ε u1) − (e^ε − 1)·w·ρ·B(t)] − (e^ε − 1)·S·[B(t−1)(u0 + u1) + w·B(t)] ≥ 0.

``CountPair.delta`` sums ψ_t over the bulk of T (each tail of C ≤ ``TAIL``); as an upper bound it
adds the tails' mass (ψ_t ≤ P(T = t)) and a floating-point allowance (10⁻¹⁰ of the magnitude of
the terms), as a lower bound it subtracts the allowance and drops the tails. Where low_t is within
rounding of an integer both candidate m_t are evaluated and the larger ψ_t kept (any m gives a
lower estimate of ψ_t; the right one gives ψ_t). ``epsilon`` returns ε on the geometric grid
e^{j·GRID_STEP} (10⁻⁴ relative): the smallest grid ε whose upper δ is ≤ δ (certified), or the
largest whose lower δ is > δ (the true ε is above it). ``pair_deltas`` evaluates one pair at many n
at once (the privacy blanket's blocks), each n's terms summed on their own as for a single pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

import numpy as np
from scipy import special, stats

GRID_STEP = math.log1p(1e-4)
TAIL = 1e-20  # each tail of C left out of the sum (added to an upper bound)
_ROUNDING = 1e-10  # floating-point allowance, relative to the magnitude of the summed terms
_EPS_FLOOR = 1e-6

try:  # the routine scipy.stats.binom.pmf calls, without its per-call argument handling
    from scipy.special._ufuncs import _binom_pmf

    _BINOM_PMF: Any = _binom_pmf
except ImportError:  # pragma: no cover - another scipy: the public (slower) path
    _BINOM_PMF = None


def binom_pmf(k: np.ndarray, n: np.ndarray | int, p: float) -> np.ndarray:
    """``scipy.stats.binom.pmf(k, n, p)`` for integer k, n (0 outside 0 ≤ k ≤ n): the same boost
    routine, called directly (the scipy.stats wrapper costs about 0.3 ms per call, which the
    bounds' thousands of small calls paid)."""
    k, n = np.asarray(k), np.asarray(n)
    if _BINOM_PMF is None or not 0 < p < 1:
        return np.asarray(stats.binom.pmf(k, n, p), dtype=np.float64)
    ok = (k >= 0) & (k <= n)
    return np.where(ok, _BINOM_PMF(np.where(ok, k, 0), n, p), 0.0)


def grid(j: int) -> float:
    """The j-th point e^{j·GRID_STEP} of the ε grid."""
    return math.exp(j * GRID_STEP)


def grid_index_below(value: float) -> int:
    """The largest j with grid(j) < value."""
    return math.ceil(math.log(value) / GRID_STEP) - 1


@dataclass(frozen=True)
class CountPair:
    """The pair of the module docstring: user 1's (u0, u1), the others' (r0, r1), n users."""

    u0: float
    u1: float
    r0: float
    r1: float
    n: int

    def __post_init__(self) -> None:
        if not (0 <= self.u1 <= self.u0 and 0 < self.u0 and self.u0 + self.u1 <= 1 + 1e-12):
            raise ValueError(f"need 0 ≤ u1 ≤ u0, u0 + u1 ≤ 1; got u0={self.u0!r}, u1={self.u1!r}")
        if not (self.r0 > 0 and self.r1 > 0 and self.r0 + self.r1 <= 1 + 1e-12):
            raise ValueError(f"need r0, r1 > 0, r0 + r1 ≤ 1; got r0={self.r0!r}, r1={self.r1!r}")
        if self.n < 1:
            raise ValueError(f"n must be ≥ 1, got {self.n!r}")

    @property
    def max_loss(self) -> float:
        """ln(u0/u1): no likelihood ratio exceeds it, so δ(ε) = 0 from there on (inf if u1 = 0)."""
        return math.log(self.u0 / self.u1) if self.u1 > 0 else math.inf

    @property
    def symmetric(self) -> bool:
        return self.r0 == self.r1

    def delta(self, epsilon: float, upper: bool = True) -> float:
        """max(D_{e^ε}(P‖Q), D_{e^ε}(Q‖P)), as a certified upper (or lower) bound."""
        return _delta(self, float(epsilon), upper)

    def epsilon(self, delta: float, upper: bool = True) -> float | None:
        """Upper: the smallest grid ε < max_loss with ``delta(ε) ≤ δ``, None if there is none
        (no amplification below user 1's own ratio). Lower: the largest grid ε with
        ``delta(ε, upper=False) > δ`` (0.0 if none), so the exact ε at δ is above it."""
        return _epsilon(self, float(delta), upper)


@lru_cache(maxsize=65536)
def _delta(pair: CountPair, epsilon: float, upper: bool) -> float:
    return float(pair_deltas(pair.u0, pair.u1, pair.r0, pair.r1, [pair.n], epsilon, upper)[0])


def pair_deltas(u0: float, u1: float, r0: float, r1: float, ns: Sequence[int] | np.ndarray,
                epsilon: float, upper: bool = True) -> np.ndarray:
    """``CountPair(u0, u1, r0, r1, n).delta(ε, upper)`` for every n of ``ns`` at once (one
    vectorized evaluation: the bulks of all n laid end to end; each n's sum is its own, in the
    same order, so the values are those of one pair at a time)."""
    n_arr = np.asarray(ns, dtype=np.int64).reshape(-1)
    if epsilon >= CountPair(u0, u1, r0, r1, 1).max_loss:
        return np.zeros(n_arr.size)
    d = _one_way(u0, u1, r0, r1, n_arr, epsilon, upper)
    if r0 != r1:  # D(Q‖P) is D(P‖Q) with the coordinates, so r0 and r1, swapped
        d = np.maximum(d, _one_way(u0, u1, r1, r0, n_arr, epsilon, upper))
    return cast("np.ndarray", np.minimum(np.maximum(d, 0.0), 1.0))


def _one_way(u0: float, u1: float, r0: float, r1: float, ns: np.ndarray, epsilon: float,
             upper: bool) -> np.ndarray:
    e = math.exp(epsilon)
    w = 1.0 - u0 - u1
    w = w if w > 1e-12 else 0.0
    big_r = r0 + r1
    big_r = big_r if big_r < 1 - 1e-12 else 1.0
    rho = r0 / (r0 + r1)
    trials = ns - 1
    if big_r >= 1.0:
        lo, hi = trials.copy(), trials.copy()
        below, above = np.zeros(ns.size), np.zeros(ns.size)
    else:
        lo, hi = binomial_bulk_many(trials, big_r, TAIL)
        below = np.where(lo > 0, special.bdtr(np.maximum(lo - 1, 0), trials, big_r), 0.0)
        above = np.where(hi < trials, special.bdtrc(hi, trials, big_r), 0.0)
    # ψ_0 = 0 (only the leftover, ratio 1): t runs over [lo + 1, hi + 1] for each n
    sizes = hi - lo + 1
    first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    seg = np.repeat(np.arange(ns.size), sizes)
    t = (lo + 1)[seg] + np.arange(int(sizes.sum()), dtype=np.int64) - first[seg]
    tr, n = trials[seg], ns[seg]
    b_prev = binom_pmf(t - 1, tr, big_r) if big_r < 1 else (t - 1 == tr).astype(float)
    b_here = binom_pmf(t, tr, big_r) if big_r < 1 else np.zeros(t.size)
    denominator = (u0 - e * u1) / r0 + (e * u0 - u1) / r1
    numerator = t * (e * u0 - u1) / r1
    if w > 0:
        numerator = numerator + (e - 1) * w * (n - t) / (1 - big_r)
    low = numerator / denominator
    m_a = np.floor(low * (1 - 1e-12) - 1e-9).astype(np.int64) + 1
    m_b = np.floor(low * (1 + 1e-12) + 1e-9).astype(np.int64) + 1
    psi, size = _psi(m_a, t, b_prev, b_here, u0, u1, w, rho, e)
    differ = m_b != m_a
    if differ.any():
        psi_b, size_b = _psi(m_b[differ], t[differ], b_prev[differ], b_here[differ], u0, u1, w, rho, e)
        psi[differ] = np.maximum(psi[differ], psi_b)
        size[differ] = np.maximum(size[differ], size_b)
    positive = np.maximum(psi, 0.0)
    out = np.empty(ns.size)
    for i, (a, b) in enumerate(zip(first.tolist(), (first + sizes).tolist(), strict=True)):
        total = float(np.sum(positive[a:b]))
        allowance = _ROUNDING * float(np.sum(size[a:b]))
        out[i] = total + allowance + float(below[i]) + float(above[i]) if upper else total - allowance
    return out


def _search_up(delta_of: Callable[[float], float], delta: float, j_start: int, j_top: int) -> float | None:
    """The smallest grid index ≥ j_start with δ ≤ ``delta`` (j_start − 1 is not certified): steps
    of 1, 2, 4, … up to j_top, then bisection within the last step."""
    bad, step = j_start - 1, 1
    while True:
        j = min(bad + step, j_top)
        if delta_of(grid(j)) <= delta:
            good = j
            break
        if j == j_top:
            return None
        bad, step = j, step * 2
    return _bisect(delta_of, delta, good, bad)


def _bisect(delta_of: Callable[[float], float], delta: float, good: int, bad: int) -> float:
    """grid(the smallest index in (bad, good] with δ ≤ ``delta``), for a non-increasing δ: grid(good)
    is certified, grid(bad) is not."""
    while good - bad > 1:
        mid = (good + bad) // 2
        if delta_of(grid(mid)) <= delta:
            good = mid
        else:
            bad = mid
    return grid(good)


def binomial_bulk(trials: int, p: float, tail: float) -> tuple[int, int]:
    """[lo, hi] with P(Bin(trials, p) < lo) ≤ tail and P(Bin > hi) ≤ tail (bisection on the
    incomplete-beta tails; scipy's ppf/isf are unreliable this far out)."""
    lo, hi = binomial_bulk_many(np.array([trials], dtype=np.int64), p, tail)
    return int(lo[0]), int(hi[0])


def binomial_bulk_many(trials: np.ndarray, p: float, tail: float) -> tuple[np.ndarray, np.ndarray]:
    """``binomial_bulk`` of every entry of ``trials`` (one bisection, vectorized)."""
    trials = np.asarray(trials, dtype=np.int64)
    mean = np.floor(trials * p).astype(np.int64)
    # a first guess 15 standard deviations (+ 40) out narrows each bisection to ~10 steps; where
    # the guess is not beyond the bulk the bracket stays the whole range (same result either way)
    reach = np.ceil(15 * np.sqrt(trials * p * (1 - p))).astype(np.int64) + 40
    hi_ok, hi_bad = trials.copy(), np.maximum(mean, 0)  # sf(hi_ok) ≤ tail; sf(hi_bad) may not be
    guess = np.minimum(mean + reach, trials)
    hi_ok = np.where(special.bdtrc(guess, trials, p) <= tail, guess, hi_ok)
    hi_ok = np.where(special.bdtrc(hi_bad, trials, p) <= tail, hi_bad, hi_ok)
    while np.any(hi_ok - hi_bad > 1):
        mid = (hi_ok + hi_bad) // 2
        active = hi_ok - hi_bad > 1
        ok = special.bdtrc(mid, trials, p) <= tail
        hi_ok, hi_bad = np.where(active & ok, mid, hi_ok), np.where(active & ~ok, mid, hi_bad)
    lo_ok, lo_bad = np.zeros_like(trials), np.minimum(mean + 1, trials)  # cdf(lo_ok − 1) ≤ tail
    guess = np.maximum(lo_bad - reach, 0)
    lo_ok = np.where((guess > 0) & (special.bdtr(np.maximum(guess - 1, 0), trials, p) <= tail), guess, lo_ok)
    first = (lo_bad > 0) & (special.bdtr(np.maximum(lo_bad - 1, 0), trials, p) <= tail)
    lo_ok = np.where(first, lo_bad, lo_ok)
    while np.any(lo_bad - lo_ok > 1):
        mid = (lo_ok + lo_bad) // 2
        active = lo_bad - lo_ok > 1
        ok = special.bdtr(mid - 1, trials, p) <= tail
        lo_ok, lo_bad = np.where(active & ok, mid, lo_ok), np.where(active & ~ok, mid, lo_bad)
    return lo_ok, hi_ok


def _psi(m: np.ndarray, t: np.ndarray, b_prev: np.ndarray, b_here: np.ndarray, u0: float, u1: float,
         w: float, rho: float, e: float) -> tuple[np.ndarray, np.ndarray]:
    """ψ_t at threshold m (module docstring) and the magnitude of its two terms."""
    c = t - 1
    k = m - 1
    pmf = binom_pmf(k, c, rho)
    tail = np.where(m <= 0, 1.0, np.where(m > c, 0.0, special.bdtrc(np.clip(k, 0, None), c, rho)))
    first = pmf * (b_prev * (u0 - e * u1) - (e - 1) * w * rho * b_here)
    second = (e - 1) * tail * (b_prev * (u0 + u1) + w * b_here)
    return first - second, np.abs(first) + np.abs(second)


@lru_cache(maxsize=16384)
def _epsilon(pair: CountPair, delta: float, upper: bool) -> float | None:
    return search_epsilon(lambda eps: pair.delta(eps, upper), delta, pair.max_loss, upper)


def search_epsilon(delta_of: Callable[[float], float], delta: float, max_loss: float,
                   upper: bool = True, start: float | None = None) -> float | None:
    """Bisection on the grid for a non-increasing δ(ε) (``CountPair.epsilon``'s contract); ε is
    searched below min(max_loss, 50). ``start`` (upper only): an ε known not to be certified
    (a lower bound on the exact ε): the search goes up from it in doubling steps first, so a
    bound that is close to it costs a few evaluations instead of a whole bisection."""
    j_top = grid_index_below(min(max_loss, 50.0))
    j_floor = math.floor(math.log(_EPS_FLOOR) / GRID_STEP)
    if upper:
        if start is not None and start > grid(j_floor):
            return _search_up(delta_of, delta, min(grid_index_below(start) + 1, j_top), j_top)
        if delta_of(grid(j_top)) > delta:
            return None
        if delta_of(grid(j_floor)) <= delta:
            return grid(j_floor)
        return _bisect(delta_of, delta, j_top, j_floor)  # grid(j_top) certified, grid(j_floor) not
    if delta_of(grid(j_floor)) <= delta:
        return 0.0
    above, below = j_top + 1, j_floor  # δ_lower(grid(below)) > δ
    if delta_of(grid(j_top)) > delta:
        return grid(j_top)
    while above - below > 1:
        mid = (above + below) // 2
        if delta_of(grid(mid)) > delta:
            below = mid
        else:
            above = mid
    return grid(below)


__all__ = ["GRID_STEP", "TAIL", "CountPair", "binom_pmf", "binomial_bulk", "binomial_bulk_many", "grid",
           "grid_index_below", "pair_deltas", "search_epsilon"]
