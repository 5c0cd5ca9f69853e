"""Poisoning defence: the number of set bits an honest unary or RAPPOR report can have.

A report whose number of set bits W is implausible for an honest device is rejected
(``checks.check_bit_rows``). The acceptance interval [lo, hi] comes from the exact distribution of
an honest W (a sum of independent Bernoulli counts, see ``binomial_pmf``):

    lo = max{w : P(W < w) ≤ α/2},   hi = min{w : P(W > w) ≤ α/2},   α = FALSE_REJECT

so an honest report is rejected with probability P(W < lo) + P(W > hi) ≤ α < 10⁻⁹.
"""

from __future__ import annotations

import math

import numpy as np

FALSE_REJECT = 0.98e-9  # α: bound on an honest report's rejection probability (< 1e-9)
_WINDOW_SD = 15.0  # binomial pmf window: mean ± (15 sd + 40), outside mass < 1e-25


def binomial_pmf(n: int, prob: float) -> tuple[int, np.ndarray]:
    """(lo, pmf) with pmf[k − lo] = P(Binomial(n, prob) = k) for k in a window lo..hi around the
    mean, μ ± (15σ + 40), outside which the mass is < 1e-25 (Bernstein's inequality). The shape
    comes from the ratio pmf(k+1)/pmf(k) = (n−k)/(k+1) · prob/(1−prob) summed in log space, and is
    normalized over the window, so it costs O(window), not O(n), and needs no lgamma of large n."""
    if n <= 0 or prob <= 0.0:
        return 0, np.ones(1)
    if prob >= 1.0:
        return n, np.ones(1)
    mu, sd = n * prob, math.sqrt(n * prob * (1 - prob))
    lo = max(0, math.floor(mu - _WINDOW_SD * sd - 40))
    hi = min(n, math.ceil(mu + _WINDOW_SD * sd + 40))
    k = np.arange(lo, hi, dtype=np.float64)
    steps = np.log(n - k) - np.log(k + 1) + math.log(prob) - math.log1p(-prob)
    logpmf = np.concatenate(([0.0], np.cumsum(steps)))
    pmf = np.exp(logpmf - logpmf.max())
    return lo, pmf / pmf.sum()


def sum_pmf(*parts: tuple[int, np.ndarray]) -> tuple[int, np.ndarray]:
    """Distribution of a sum of independent variables given as (offset, pmf) pairs."""
    lo, pmf = 0, np.ones(1)
    for off, p in parts:
        lo, pmf = lo + off, np.convolve(pmf, p)
    return lo, pmf


def acceptance_interval(lo: int, pmf: np.ndarray, alpha: float = FALSE_REJECT) -> tuple[int, int]:
    """[w_lo, w_hi] with P(W < w_lo) ≤ α/2 and P(W > w_hi) ≤ α/2 (each as wide as needed, no
    wider)."""
    below = np.concatenate(([0.0], np.cumsum(pmf)))  # below[i] = P(W < lo + i)
    above = np.concatenate((np.cumsum(pmf[::-1])[::-1][1:], [0.0]))  # above[i] = P(W > lo + i)
    w_lo = lo + int(np.flatnonzero(below <= alpha / 2)[-1])
    w_hi = lo + int(np.flatnonzero(above <= alpha / 2)[0])
    return w_lo, w_hi


def unary_weight_bounds(bits: int, p: float, q: float, alpha: float = FALSE_REJECT) -> tuple[int, int]:
    """Honest unary report: the true item's bit is 1 w.p. p, each of the other bits − 1 w.p. q, so
    W = Bernoulli(p) + Binomial(bits − 1, q); its acceptance interval at level α."""
    return acceptance_interval(*sum_pmf((0, np.array([1 - p, p])), binomial_pmf(bits - 1, q)), alpha)


def rappor_weight_bounds(bits: int, hashes: int, p_star: float, q_star: float,
                         alpha: float = FALSE_REJECT) -> tuple[int, int]:
    """Honest RAPPOR report: its value's Bloom filter sets m ∈ [1, min(h, k)] bits (hash collisions
    lower m); after permanent and instantaneous randomized response each set bit reads 1 w.p. q*,
    each other bit w.p. p*, independently, so W = Binomial(m, q*) + Binomial(k − m, p*). W grows
    stochastically with m (q* > p*), so the interval is [lower end at m = 1, upper end at m = h]."""
    m_hi = min(hashes, bits)
    w_lo = acceptance_interval(*sum_pmf(binomial_pmf(1, q_star), binomial_pmf(bits - 1, p_star)),
                               alpha)[0]
    w_hi = acceptance_interval(*sum_pmf(binomial_pmf(m_hi, q_star),
                                        binomial_pmf(bits - m_hi, p_star)), alpha)[1]
    return w_lo, w_hi
