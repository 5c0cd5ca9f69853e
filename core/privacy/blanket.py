"""GRR's privacy blanket, summed exactly: a tight certified bound for n shuffled GRR reports.

GRR(x) = (1 − γ)·[x] + γ·Uniform([d]) with γ = d/(e^ε₀ + d − 1): each report is, with
probability γ and independently of every input, a uniform draw — the "privacy blanket" of Balle,
Bell, Gascón and Nissim (CRYPTO 2019). For two neighbouring datasets (device 1 holds a or b, the
other n − 1 any values known to the adversary) give the adversary, beside the shuffled
histogram H, the set S of the other devices whose report came from the blanket: (H, S) is at
least as revealing as H, and S has the same law under both datasets, |S| = m ~ Bin(n − 1, γ).
Given S, the other devices' non-blanket reports are their known values (subtracted: an invertible
map), leaving device 1's report plus m uniform draws. Device 1's report falls on each value other
than a and b with probability q under both hypotheses, so the counts (N_a, N_b) are sufficient,
and they are the ``CountPair`` with device 1 at (p, q) and m others each at a or b w.p. 1/d:

    δ(ε) ≤ Σ_m Bin(m; n − 1, γ) · D_m(ε),   D_m = δ of CountPair(p, q, 1/d, 1/d, m + 1).

D_m does not increase with m (one more uniform draw is independent noise: post-processing), so a
block of m is bounded by its first m; the tails of Bin(n − 1, γ) outside the bulk add their mass
(the lower tail with D ≤ 1); the blocks' D_m are evaluated together (``count_pair.pair_deltas``: one
vectorized sum over all their bulks). The attack with every other device on a third value (``attack_pairs``)
is the same pair with the others at (q, q) and m left unrevealed; the two agree to within 0.3 % on
the grid of tests/test_amplification.py (U/L ≤ 1.003 for d ≥ 16).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special

from ldptel.privacy.count_pair import TAIL, binomial_bulk, pair_deltas

BLOCKS = 64  # blocks of m over the bulk of Bin(n − 1, γ) (each bounded by its first m)

__all__ = ["BLOCKS", "blanket_delta", "blanket_gamma"]


def blanket_gamma(epsilon0: float, domain_size: int) -> float:
    """γ = d/(e^ε₀ + d − 1): the probability that a GRR report is a uniform draw."""
    return domain_size / (math.exp(epsilon0) + domain_size - 1)


@lru_cache(maxsize=65536)
def blanket_delta(epsilon: float, epsilon0: float, domain_size: int, n: int) -> float:
    """The certified δ at ε of n shuffled GRR(ε₀, d) reports (module docstring); 0 from ε₀ on."""
    if epsilon >= epsilon0:
        return 0.0
    e0, d = math.exp(epsilon0), domain_size
    p, q = e0 / (e0 + d - 1), 1.0 / (e0 + d - 1)
    gamma = blanket_gamma(epsilon0, d)
    trials = n - 1
    if trials == 0:
        return float(pair_deltas(p, q, 1.0 / d, 1.0 / d, [1], epsilon)[0])
    lo, hi = binomial_bulk(trials, gamma, TAIL)
    below = float(special.bdtr(lo - 1, trials, gamma)) if lo > 0 else 0.0
    above = float(special.bdtrc(hi, trials, gamma)) if hi < trials else 0.0
    starts = np.arange(lo, hi + 1) if hi - lo + 1 <= BLOCKS else np.unique(
        np.linspace(lo, hi + 1, BLOCKS + 1).astype(np.int64))[:-1]
    ends = np.append(starts[1:], hi + 1)  # block k is [starts[k], ends[k])
    before = np.where(starts > 0, special.bdtr(starts - 1, trials, gamma), 0.0)
    mass = special.bdtr(ends - 1, trials, gamma) - before
    # D_m for every block's first m and for hi, in one vectorized evaluation (n = m + 1 users)
    d_m = pair_deltas(p, q, 1.0 / d, 1.0 / d, np.append(starts, hi) + 1, epsilon)
    total = below + above * float(d_m[-1])
    for weight, value in zip(mass.tolist(), d_m[:-1].tolist(), strict=True):
        total += weight * value
    return min(total, 1.0)
