"""Binary GRR (d = 2) shuffled: the worst case over every dataset, certified by a one-dimensional search.

At d = 2 a dataset is, up to the device that changes, the number k of the other n − 1 devices
holding a (the rest hold b), and the release is the count Z of a-reports. With p = e^ε₀/(e^ε₀ + 1),
q = 1 − p and O_k = Bin(k, p) + Bin(n − 1 − k, q) the others' a-reports,

    P(Z = z) = p·O_k(z − 1) + q·O_k(z),   Q(Z = z) = q·O_k(z − 1) + p·O_k(z)     (device 1 at a / b),

and D(Q‖P) at k is D(P‖Q) at n − 1 − k (swap a and b), so the exact δ(ε) is max_k D_k(ε),
D_k = D_{e^ε}(P‖Q). O_k is log-concave, so P/Q grows in z and D_k = Σ_{z ≥ M} f(z) with
f(z) = (p − e^ε q)·O_k(z − 1) − (e^ε p − q)·O_k(z) and M the first z with f(z) > 0 (found by
bisection; the larger of the sums at M − 1, M, M + 1 is kept).

The search over k: for k in a block [k₁, k₂], O_k is O' = Bin(k₁, p) + Bin(n − 1 − k₂, q) plus
(k − k₁) p-coins and (k₂ − k) q-coins, independent of device 1: post-processing of (device 1, O'),
so D_k ≤ D' (the pair with O' as the others' count; exact when k₁ = k₂). ``binary_delta`` starts
from ``START_BLOCKS`` blocks covering [0, n − 1] and splits the block of the largest D' in two
while that D' exceeds the largest exact D_k found (k = 0, n − 1 and the split blocks' ends) by more
than ``TOLERANCE`` (10 % in δ, about 0.2 % in ε; at most ``MAX_EVALUATIONS`` evaluations); the
answer, the largest D' of the final blocks, is certified whatever the splitting. The mass left
out of the binomials' bulks (each tail ≤ ``TAIL``) is added. D_k is largest at k = n − 1 (the
others on device 1's own value: the attack of ``amplification.attack_pairs``; measured at n = 10⁴,
ε₀ = 4: 1.3·10⁻⁸ there, 1.6·10⁻¹² at k = 0), so the splitting gathers near that end, and on the
grid n 10³–10⁶, ε₀ 1–8 the certified ε is within 1.05 of the attack's (tests/test_binary_grr.py).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special

from ldptel.privacy.count_pair import _ROUNDING, TAIL, binom_pmf, binomial_bulk

START_BLOCKS = 16
TOLERANCE = 0.1  # blocks are split until their bound is within 10 % of the largest exact D_k found
MAX_EVALUATIONS = 400  # … or this many D evaluations were made (the bound stays certified)

__all__ = ["MAX_EVALUATIONS", "START_BLOCKS", "TOLERANCE", "binary_delta"]


def _bulk(trials: int, prob: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The bulk of Bin(trials, prob): its values, pmf and the mass left out."""
    if trials == 0:
        return np.zeros(1, dtype=np.int64), np.ones(1), 0.0
    lo, hi = binomial_bulk(trials, prob, TAIL)
    left = (float(special.bdtr(lo - 1, trials, prob)) if lo > 0 else 0.0) + (
        float(special.bdtrc(hi, trials, prob)) if hi < trials else 0.0)
    values = np.arange(lo, hi + 1, dtype=np.int64)
    return values, binom_pmf(values, trials, prob), left


@lru_cache(maxsize=512)  # the blocks recur at every ε of a search
def _others(a_trials: int, b_trials: int, p: float) -> tuple[int, np.ndarray, float]:
    """O = Bin(a_trials, p) + Bin(b_trials, 1 − p) over the sum of the two bulks: its first value,
    its pmf (the bulks' pmfs convolved: sums of positive terms) and the mass left out."""
    a_vals, a_pmf, a_left = _bulk(a_trials, p)
    b_vals, b_pmf, b_left = _bulk(b_trials, 1 - p)
    return int(a_vals[0] + b_vals[0]), np.convolve(a_pmf, b_pmf), a_left + b_left


def _one(a_trials: int, b_trials: int, p: float, q: float, e: float) -> float:
    """D(P‖Q) with the others' count O = Bin(a_trials, p) + Bin(b_trials, q) (module docstring):
    Σ_z max(0, f(z)) over the bulk of O, plus a floating-point allowance (10⁻¹⁰ of the terms near
    the positive part) and the mass left out."""
    _, pmf, left = _others(a_trials, b_trials, p)
    padded = np.concatenate(([0.0], pmf, [0.0]))  # O(z − 1) and O(z) for z over the bulk and one past
    prev, here = padded[:-1], padded[1:]
    f = (p - e * q) * prev - (e * p - q) * here
    size = (p - e * q) * prev + (e * p - q) * here
    # each pmf entry is exact to ~1e-15 relative (sums of positive products): the terms that are
    # positive or within rounding of it carry the allowance
    near = f > -_ROUNDING * size
    return float(np.sum(np.maximum(f, 0.0))) + _ROUNDING * float(np.sum(size[near])) + left


@lru_cache(maxsize=65536)
def binary_delta(epsilon: float, epsilon0: float, n: int) -> float:
    """Certified δ at ε of n shuffled binary GRR(ε₀) reports over every dataset (module docstring);
    0 from ε₀ on."""
    if epsilon >= epsilon0:
        return 0.0
    e0, e = math.exp(epsilon0), math.exp(epsilon)
    p, q = e0 / (e0 + 1), 1 / (e0 + 1)
    others = n - 1

    def bound(k1: int, k2: int) -> float:  # D_k ≤ this for every k in [k1, k2]; exact when k1 = k2
        return _one(k1, others - k2, p, q, e)

    edges = np.unique(np.linspace(0, others + 1, min(START_BLOCKS, others + 1) + 1).astype(np.int64))
    blocks = [(k1, k2, bound(k1, k2)) for k1, k2 in zip(edges[:-1].tolist(), (edges[1:] - 1).tolist(),
                                                           strict=True)]
    exact = max(bound(k, k) for k in (0, others))  # the attacks: a lower estimate of the max
    evaluations = len(blocks) + 2
    while evaluations < MAX_EVALUATIONS:
        blocks.sort(key=lambda b: b[2])
        k1, k2, top = blocks[-1]
        if k1 == k2 or top <= exact * (1 + TOLERANCE):
            break
        mid = (k1 + k2) // 2
        blocks[-1:] = [(k1, mid, bound(k1, mid)), (mid + 1, k2, bound(mid + 1, k2))]
        exact = max(exact, bound(k1, k1), bound(k2, k2))
        evaluations += 4
    return min(max(b[2] for b in blocks), 1.0)
