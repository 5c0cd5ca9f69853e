"""Amplification by shuffling per frequency oracle: certified upper bounds, explicit lower bounds.

Upper bound (``ShuffleBound``): the least of the stronger clone pair of any ε₀-LDP randomizer
(Feldman–McMillan–Talwar, SODA 2023: ``generic_pair``, the ``CountPair`` with device 1 at
(e^ε₀, 1)/(e^ε₀ + 1) and every other device a clone of it with probability 2/(e^ε₀ + 1), half each
way) and, for GRR, its privacy blanket summed exactly (``blanket``) and at d = 2 the exact worst
dataset (``binary_grr``: the blanket is loose there, up to 1.42× the attack). Wang et al.'s mechanism-
specific "variation-ratio" pair (VLDB 2024, Theorem 4.8) is *not* used: it is unsound (it claims
ε = 1.607 at δ = 0.03 for GRR at n = 8, d = 3, ε₀ = 2, where the real release has δ = 0.0478 there;
reproduced with the authors' code); it lives only in tests/, as the negative control's reference.

Lower bound: an explicit pair of neighbouring datasets (one device a vs b, every other device on
one value) and a statistic of the shuffled reports: each report is mapped to "supports a", "supports
b" or neither, and the two counts are a ``CountPair`` whose parameters are the exact probabilities
of those events (``attack_pairs``); its hockey-stick divergence, computed as a lower bound, is a
lower bound on the release's. For GRR the strong attack is every other device on a third value c;
the blanket bound is within 0.3 % of it for d ≥ 16 (tests/test_amplification.py). OLH's attack
assumes an ideal hash (collision probability 1/g).

``heavy_hitters`` (issue 39, ``privacy_mode = "shuffled"``): each device sends one report of the
pool-OLH of ``ldptel.mechanisms.heavy_hitters`` at ε₀ (level j, pool index k, hash y), an ε₀-LDP
randomizer, so only the generic pair applies to the upper bound. Its attack is OLH's with the
pool's hash range g = ``pool_hash_range(ε₀)`` (a power of two, not OLH's e^ε₀ + 1): device 1 holds
a vs b (strings whose first bytes differ, so every level's prefixes differ), every other device c,
and a report "supports a" when y = H_{s_jk}(key_j(a)) ≠ H_{s_jk}(key_j(b)); with an ideal hash
(independent uniform hash values of distinct prefixes) the rates do not depend on the level or the
seed, so the counts over the whole release (every level at once) are the ``CountPair``. Here the
``domain_size`` argument is the number of levels J (the plan's; the bound does not use it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

from ldptel.mechanisms.heavy_hitters import pool_hash_range
from ldptel.mechanisms.olh import olh_g
from ldptel.mechanisms.shuffled_kinds import HEAVY_HITTERS  # the pool-OLH (module docstring)
from ldptel.privacy.binary_grr import binary_delta
from ldptel.privacy.blanket import blanket_delta
from ldptel.privacy.count_pair import GRID_STEP, CountPair, grid, search_epsilon

ORACLES = ("grr", "oue", "sue", "olh", "hadamard", "rappor", "heavy_hitters")
DEFAULT_RAPPOR_HASHES = 2


def rappor_bits(epsilon0: float, hashes: int) -> tuple[float, float]:
    """(p*, q*) of the representative RAPPOR the planner uses for ε₁ = ``epsilon0``: symmetric
    bits (p* = 1 − q*) with h·ln(q*(1−p*)/(p*(1−q*))) = ε₁, i.e. q*/(1 − q*) = e^{ε₁/(2h)}."""
    odds = math.exp(epsilon0 / (2 * hashes))
    return 1 / (odds + 1), odds / (odds + 1)


def _rappor_star(epsilon0: float, hashes: int, p_star: float | None,
                 q_star: float | None) -> tuple[float, float]:
    if p_star is None or q_star is None:
        return rappor_bits(epsilon0, hashes)
    return p_star, q_star


def attack_pairs(oracle: str, epsilon0: float, domain_size: int, n: int, *,
                 hashes: int = DEFAULT_RAPPOR_HASHES, rappor_p_star: float | None = None,
                 rappor_q_star: float | None = None) -> list[CountPair]:
    """The explicit attacks of the module docstring: device 1 holds a (vs b); every other device
    holds c (a third value, when d ≥ 3), a, or b. Each is a ``CountPair`` (u0, u1: device 1's
    reports supporting a, b; r0, r1: another device's)."""
    e = math.exp(epsilon0)
    if oracle == "grr":
        p, q = e / (e + domain_size - 1), 1 / (e + domain_size - 1)
        user, third, same = (p, q), (q, q), (p, q)
    elif oracle == "oue":
        q = 1 / (e + 1)
        user, third, same = (0.5 * (1 - q), 0.5 * q), (q * (1 - q), q * (1 - q)), (0.5 * (1 - q), 0.5 * q)
    elif oracle == "sue":
        h = math.exp(epsilon0 / 2) / (math.exp(epsilon0 / 2) + 1)
        user, third, same = (h * h, (1 - h) ** 2), (h * (1 - h), h * (1 - h)), (h * h, (1 - h) ** 2)
    elif oracle in ("olh", HEAVY_HITTERS):
        g = olh_g(epsilon0) if oracle == "olh" else pool_hash_range(epsilon0)
        keep, other = e / (e + g - 1), 1 / (e + g - 1)
        split = 1 - 1 / g  # the two hashes differ
        user, third = (split * keep, split * other), (split / g, split / g)
        same = user
    elif oracle == "hadamard":
        keep = e / (e + 1)
        user, third, same = (0.5 * keep, 0.5 * (1 - keep)), (0.25, 0.25), (0.5 * keep, 0.5 * (1 - keep))
    elif oracle == "rappor":
        p_star, q_star = _rappor_star(epsilon0, hashes, rappor_p_star, rappor_q_star)
        user, third = _rappor_attack(p_star, q_star, hashes)
        same = user
    else:
        raise ValueError(f"oracle must be one of {', '.join(ORACLES)}, got {oracle!r}")
    others = [same, (same[1], same[0])]
    if domain_size >= 3 or oracle == HEAVY_HITTERS:  # (strings: a third value always exists)
        others.insert(0, third)
    return [CountPair(u0=user[0], u1=user[1], r0=r0, r1=r1, n=n) for r0, r1 in others]


Rates = tuple[float, float]


def _rappor_attack(p_star: float, q_star: float, hashes: int) -> tuple[Rates, Rates]:
    """A report supports a if more of a's h Bloom bits are set than of b's (and b if fewer)."""
    k = list(range(hashes + 1))
    on = np.asarray(stats.binom.pmf(k, hashes, q_star), dtype=np.float64)
    off = np.asarray(stats.binom.pmf(k, hashes, p_star), dtype=np.float64)
    more = sum(on[i] * off[j] for i in k for j in k if i > j)
    fewer = sum(on[i] * off[j] for i in k for j in k if i < j)
    neutral = sum(off[i] * off[j] for i in k for j in k if i > j)
    return (float(more), float(fewer)), (float(neutral), float(neutral))


def generic_pair(epsilon0: float, n: int) -> CountPair:
    """The stronger clone pair of any ε₀-LDP randomizer (FMT 2023): device 1 at (e^ε₀, 1)/(e^ε₀ + 1)
    (no leftover), each other device a clone, 1/(e^ε₀ + 1) each way."""
    e = math.exp(epsilon0)
    return CountPair(u0=e / (e + 1), u1=1 / (e + 1), r0=1 / (e + 1), r1=1 / (e + 1), n=n)


@dataclass(frozen=True)
class ShuffleBound:
    """Certified δ(ε) of n shuffled ε₀-LDP reports of ``oracle``: 0 from ε₀ on (no output ratio
    exceeds e^ε₀), else the least of the bounds that apply (``generic_pair``; for GRR also its
    privacy blanket, ``blanket.blanket_delta``, tight to the attack). ``epsilon(δ)``: the smallest
    grid ε certified, None if none below ε₀."""

    oracle: str
    epsilon0: float
    domain_size: int
    n: int

    @property
    def max_loss(self) -> float:
        return self.epsilon0

    def delta(self, epsilon: float) -> float:
        return min(value for value, _ in self.deltas(epsilon))

    def deltas(self, epsilon: float) -> list[tuple[float, str]]:
        """Each applicable bound's δ at ε with its name."""
        if epsilon >= self.epsilon0:
            return [(0.0, "local")]
        out = [(generic_pair(self.epsilon0, self.n).delta(epsilon), BOUND_CLONE)]
        if self.oracle == "grr":
            out.append((blanket_delta(epsilon, self.epsilon0, self.domain_size, self.n), BOUND_GRR))
            if self.domain_size == 2:
                out.append((binary_delta(epsilon, self.epsilon0, self.n), BOUND_BINARY))
        return out

    def epsilon(self, delta: float) -> float | None:
        return _bound_epsilon(self, delta)

    def bound_name(self, epsilon: float) -> str:
        """The name of the analysis that certifies the least δ at ε."""
        return min(self.deltas(epsilon))[1]


BOUND_CLONE = "stronger clone (Feldman-McMillan-Talwar 2023)"
BOUND_GRR = "GRR privacy blanket, summed exactly (blanket of Balle et al. 2019, m revealed)"
BOUND_BINARY = "binary GRR, worst dataset by a certified search (exact per dataset)"


@lru_cache(maxsize=16384)
def _bound_epsilon(bound: ShuffleBound, delta: float) -> float | None:
    """The search starts at the attack's lower bound (the exact ε is above it; for GRR the
    blanket bound is within a few per cent of it, so a handful of evaluations find it)."""
    lower = amplified_epsilon_lower(bound.oracle, bound.epsilon0, bound.domain_size, bound.n, delta)
    return search_epsilon(bound.delta, delta, bound.max_loss, start=lower if lower > 0 else None)


def amplified_epsilon(oracle: str, epsilon0: float, domain_size: int, n: int, delta: float) -> float | None:
    """Certified central ε of n shuffled ε₀-LDP reports of ``oracle`` at δ (``ShuffleBound``,
    grid-rounded up); None where it certifies nothing below ε₀."""
    if oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {', '.join(ORACLES)}, got {oracle!r}")
    return ShuffleBound(oracle, float(epsilon0), domain_size, n).epsilon(delta)


# the oracles whose strongest attack is usually the others on a (device 1's own value), not on a
# third value (d ≥ 3, the grid n 10³–10⁶, ε₀ 1–9: SUE, Hadamard, RAPPOR always, OUE 12 times in
# 18): searched first, so the others are mostly ruled out by one evaluation each
SAME_FIRST = ("oue", "sue", "hadamard", "rappor")


def amplified_epsilon_lower(oracle: str, epsilon0: float, domain_size: int, n: int, delta: float, *,
                            hashes: int = DEFAULT_RAPPOR_HASHES, rappor_p_star: float | None = None,
                            rappor_q_star: float | None = None) -> float:
    """A lower bound on the central ε at δ: the largest over ``attack_pairs`` (0.0 if none). A
    pair is searched only if it beats the best so far: its lower δ at the next grid ε above that
    best exceeds δ (one evaluation; δ falls in ε), which spares the weak attacks' searches (for
    GRR the others on a third value is the strong one; the others on a or b hold nearly all the
    n reports in the two counts, costly to sum)."""
    pairs = attack_pairs(oracle, epsilon0, domain_size, n, hashes=hashes, rappor_p_star=rappor_p_star,
                         rappor_q_star=rappor_q_star)
    if len(pairs) == 3 and oracle in SAME_FIRST:  # the others on a, measured the strongest attack
        pairs = [pairs[1], pairs[0], pairs[2]]
    best = 0.0
    for pair in pairs:
        if best > 0 and pair.delta(grid(round(math.log(best) / GRID_STEP) + 1), upper=False) <= delta:
            continue  # its largest grid ε with lower δ > δ is at most ``best``
        best = max(best, pair.epsilon(delta, upper=False) or 0.0)
    return best


__all__ = ["BOUND_BINARY", "BOUND_CLONE", "BOUND_GRR", "DEFAULT_RAPPOR_HASHES", "ORACLES", "ShuffleBound",
           "amplified_epsilon", "amplified_epsilon_lower", "attack_pairs", "generic_pair", "rappor_bits"]
