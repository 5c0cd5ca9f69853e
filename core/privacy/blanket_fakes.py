"""Poisson fakes inside the GRR privacy blanket: a tight certified bound for ``shuffled-fakes`` with
``local_epsilon`` (each device's index through GRR at ε_l, plus Poisson fakes: μ per bucket).

Upper bound. As in ``blanket`` the adversary is given the set S of the other devices whose GRR
report is a blanket (uniform) draw, |S| = m ~ Bin(n − 1, γ), γ = d/(e^{ε_l} + d − 1), and subtracts
the others' known reports. The fakes of all devices are F ~ Poisson(λ·n) = Poisson(d·μ) messages,
each uniform over [d] and independent of everything; the release shows their number (the total
count is n + F). Given S and F = f the release is therefore device 1's report plus m + f iid
uniform draws: exactly the blanket's state with m + f draws, so with D_M the δ of
``CountPair(p, q, 1/d, 1/d, M + 1)`` (``blanket``'s module docstring; p = e^{ε_l}/(e^{ε_l} + d − 1),
q = 1/(e^{ε_l} + d − 1))

    δ(ε) ≤ Σ_M P(m + F = M) · D_M(ε),   m ~ Bin(n − 1, γ), F ~ Poisson(d·μ) independent.

The fakes simply join the blanket. D_M does not increase in M, so the bulk of M is cut into at
most ``blanket.BLOCKS`` blocks, each bounded by its first M (one vectorized ``pair_deltas``); the
mass outside the bulks of m and F (each tail ≤ ``TAIL``) is added with D ≤ 1. δ falls in μ (F grows
stochastically), which ``fakes_for_blanket`` bisects on.

Lower bound. The explicit attack: every other device holds a third value c and the adversary
reads the two counts (N_a', N_b'): the count pair with the others at (q, q) over n − 1 devices and
the noise count C ~ Bin(n − 1, 2q) convolved with K ~ Poisson(2μ) — one ψ per total s with
b_prev = P(C + K = s − 1), b_here = P(C + K = s), computed as a lower bound (the allowance, and
e^ε times the noise mass left out of the bulks, subtracted).

Measured at d = 1,024, n = 10⁵, ε_l = 8, central (1, 10⁻⁸): certified μ = 7.051
(``fakes_for_blanket``), the attack needs μ ≥ 7.018; advanced joint convexity
(``fake_messages.local_fake_delta``) needed 46.42.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special

from ldptel.privacy.blanket import BLOCKS, blanket_gamma
from ldptel.privacy.count_pair import (
    _ROUNDING,
    TAIL,
    _psi,
    binom_pmf,
    binomial_bulk,
    pair_deltas,
    search_epsilon,
)
from ldptel.privacy.fake_messages import MU_STEP, poisson_lower_end, poisson_upper_end

__all__ = ["fakes_blanket_delta", "fakes_blanket_epsilon", "fakes_attack_delta", "fakes_attack_epsilon",
           "fakes_for_blanket"]


def _grr(local_epsilon: float, d: int) -> tuple[float, float, float]:
    e0 = math.exp(local_epsilon)
    p, q = e0 / (e0 + d - 1), 1.0 / (e0 + d - 1)
    return p, q, max(1.0 - p - q, 0.0)


def _poisson_cdf(k: np.ndarray, mean: float) -> np.ndarray:
    """P(Poisson(mean) ≤ k), 0 for k < 0."""
    return np.where(k >= 0, special.pdtr(np.maximum(k, 0).astype(np.float64), mean), 0.0)


def _poisson_bulk(mean: float) -> tuple[np.ndarray, np.ndarray, float]:
    """k over the bulk of Poisson(mean), its pmf, and the mass left out (both tails)."""
    k_lo, k_hi = poisson_lower_end(mean, TAIL), poisson_upper_end(mean, TAIL)
    k = np.arange(k_lo, k_hi + 1, dtype=np.int64)
    pmf = np.exp(k * math.log(mean) - mean - special.gammaln(k + 1))
    left = float(special.pdtrc(k_hi, mean)) + (float(special.pdtr(k_lo - 1, mean)) if k_lo > 0 else 0.0)
    return k, pmf, left


def _psi_plus(s: np.ndarray, b_prev: np.ndarray, b_here: np.ndarray, p: float, q: float, w: float,
              e: float) -> tuple[np.ndarray, np.ndarray]:
    """max(0, ψ) of the symmetric count pair (others ½–½) at totals s with the given weights, and
    the magnitude of its terms; the threshold M = ⌊low⌋ + 1 with
    low = s·[b_prev(e·p − q) + (e − 1)·w·b_here/2] / [b_prev(1 + e)(p − q)] (both candidates near
    an integer, the larger ψ kept)."""
    live = b_prev > 0
    psi = np.zeros(s.shape)
    size = np.zeros(s.shape)
    if not live.any():
        return psi, size
    s, bp, bh = s[live], b_prev[live], b_here[live]
    low = s * (bp * (e * p - q) + (e - 1) * w * bh / 2) / (bp * (1 + e) * (p - q))
    best, mag = None, None
    for nudge in (-1, 1):
        m = np.floor(low * (1 + nudge * 1e-12) + nudge * 1e-9).astype(np.int64) + 1
        value, magnitude = _psi(m, s, bp, bh, p, q, w, 0.5, e)
        best = value if best is None else np.maximum(best, value)
        mag = magnitude if mag is None else np.maximum(mag, magnitude)
    assert best is not None and mag is not None
    psi[live], size[live] = np.maximum(best, 0.0), mag
    return psi, size


@lru_cache(maxsize=65536)
def fakes_blanket_delta(epsilon: float, mu: float, local_epsilon: float, domain_size: int, n: int) -> float:
    """Certified δ at ε of n devices' GRR(ε_l) indices with Poisson(μ) fakes per bucket (module
    docstring); 0 from ε_l on."""
    if epsilon >= local_epsilon:
        return 0.0
    if not mu > 0:
        raise ValueError(f"mu must be > 0, got {mu!r}")
    p, q, _ = _grr(local_epsilon, domain_size)
    starts, mass, left = _draw_blocks(float(mu), float(local_epsilon), domain_size, n)
    d_m = pair_deltas(p, q, 1.0 / domain_size, 1.0 / domain_size, starts + 1, epsilon)
    return min(left + float(mass @ d_m) * (1 + _ROUNDING), 1.0)


_DIRECT = 20_000_000  # products of the two bulks' sizes up to which their pmfs are convolved directly


@lru_cache(maxsize=1024)
def _draw_blocks(mu: float, local_epsilon: float, d: int, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The blocks of M = m + F (module docstring): each block's first M, its mass, and the mass left
    out of the bulks of m and F (the same at every ε: computed once per μ)."""
    trials, gamma = n - 1, blanket_gamma(local_epsilon, d)
    if trials > 0:
        m_lo, m_hi = binomial_bulk(trials, gamma, TAIL)
        m = np.arange(m_lo, m_hi + 1, dtype=np.int64)
        m_pmf = binom_pmf(m, trials, gamma)
        m_left = (float(special.bdtr(m_lo - 1, trials, gamma)) if m_lo > 0 else 0.0) + (
            float(special.bdtrc(m_hi, trials, gamma)) if m_hi < trials else 0.0)
    else:
        m, m_pmf, m_left = np.zeros(1, dtype=np.int64), np.ones(1), 0.0
    f_mean = d * mu
    f, f_pmf, f_left = _poisson_bulk(f_mean)
    lo, hi = int(m[0] + f[0]), int(m[-1] + f[-1])  # the bulk of M
    starts = np.arange(lo, hi + 1) if hi - lo + 1 <= BLOCKS else np.unique(
        np.linspace(lo, hi + 1, BLOCKS + 1).astype(np.int64))[:-1]
    if m.size * f.size <= _DIRECT:  # P(M = lo + i), summed per block (sums of positive terms)
        mass = np.add.reduceat(np.convolve(m_pmf, f_pmf), starts - lo)
    else:  # P(start ≤ m + F < end) = Σ_m P(m)·[F(end − 1 − m) − F(start − 1 − m)]
        ends = np.append(starts[1:], hi + 1)
        mass = np.maximum(_poisson_cdf(ends[:, None] - 1 - m[None, :], f_mean)
                          - _poisson_cdf(starts[:, None] - 1 - m[None, :], f_mean), 0.0) @ m_pmf
    return starts, mass, m_left + f_left


@lru_cache(maxsize=65536)
def fakes_attack_delta(epsilon: float, mu: float, local_epsilon: float, domain_size: int, n: int) -> float:
    """A lower bound on δ at ε (the attack of the module docstring; 0 when d < 3 or ε ≥ ε_l)."""
    d = domain_size
    if epsilon >= local_epsilon or d < 3:
        return 0.0
    p, q, w = _grr(local_epsilon, d)
    e = math.exp(epsilon)
    k, pi, k_left = _poisson_bulk(2 * mu)
    c_lo, c_hi = binomial_bulk(n - 1, 2 * q, TAIL)
    c_left = (float(special.bdtr(c_lo - 1, n - 1, 2 * q)) if c_lo > 0 else 0.0) + (
        float(special.bdtrc(c_hi, n - 1, 2 * q)) if c_hi < n - 1 else 0.0)
    c = np.arange(c_lo, c_hi + 1, dtype=np.int64)
    noise = np.convolve(binom_pmf(c, n - 1, 2 * q), pi)  # P(C + K = c_lo + k_lo + i)
    base = c_lo + int(k[0])
    s = np.arange(base + 1, base + noise.size + 1, dtype=np.int64)  # device 1 in: noise s − 1
    b_prev = noise
    b_here = np.append(noise[1:], 0.0)
    psi, size = _psi_plus(s, b_prev, b_here, p, q, w, e)
    # the noise left out of the bulks could only have lowered P − e^ε·Q by e^ε times its mass
    return max(0.0, float(psi.sum()) - _ROUNDING * float(size.sum()) - e * (c_left + k_left))


def fakes_blanket_epsilon(mu: float, local_epsilon: float, domain_size: int, n: int, delta: float,
                          start: float | None = None) -> float | None:
    """The smallest grid ε (``count_pair.search_epsilon``) certified at δ, None if none below ε_l."""
    return search_epsilon(lambda eps: fakes_blanket_delta(eps, mu, local_epsilon, domain_size, n), delta,
                          local_epsilon, start=start)


def fakes_attack_epsilon(mu: float, local_epsilon: float, domain_size: int, n: int, delta: float) -> float:
    """The largest grid ε whose attack δ exceeds δ (0.0 if none): the exact ε is above it."""
    value = search_epsilon(lambda eps: fakes_attack_delta(eps, mu, local_epsilon, domain_size, n), delta,
                           local_epsilon, upper=False)
    return value or 0.0


def fakes_for_blanket(epsilon: float, delta: float, local_epsilon: float, domain_size: int, n: int,
                      max_mu: float, upper: bool = True) -> float:
    """Upper: the smallest μ on the grid e^{j·10⁻⁴} whose certified δ at ε is ≤ δ (inf if even
    ``max_mu`` is not); lower: the largest grid μ whose attack δ at ε is > δ (0.0 if none), so every
    μ that certifies ε is above it. δ falls in μ (more fakes: post-processing), so μ is bisected,
    starting from a doubling bracket."""
    def holds(j: int) -> bool:  # "certified" (upper) / "attack not beaten" (lower)
        mu = math.exp(j * MU_STEP)
        if upper:
            return fakes_blanket_delta(epsilon, mu, local_epsilon, domain_size, n) <= delta
        return fakes_attack_delta(epsilon, mu, local_epsilon, domain_size, n) <= delta

    j_top = math.floor(math.log(max_mu) / MU_STEP)
    j_bad = math.floor(math.log(1e-3) / MU_STEP)
    if holds(j_bad):
        return math.exp(j_bad * MU_STEP) if upper else 0.0
    step = round(math.log(2) / MU_STEP)
    j_good = j_bad + step
    while not holds(j_good):
        if j_good >= j_top:
            return math.inf if upper else math.exp(j_top * MU_STEP)
        j_bad, j_good = j_good, min(j_good + step, j_top)
    while j_good - j_bad > 1:
        mid = (j_good + j_bad) // 2
        if holds(mid):
            j_good = mid
        else:
            j_bad = mid
    return math.exp((j_good if upper else j_bad) * MU_STEP)
