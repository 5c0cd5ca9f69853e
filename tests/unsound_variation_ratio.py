"""Wang et al.'s "variation-ratio" pair (VLDB 2024, Lemma 4.5 and Theorem 4.8), kept here only as
the reference of the negative control (tests/test_amplification.py): the package does not use it,
because it is unsound (GRR at n = 8, d = 3, ε₀ = 2: it claims ε = 1.607 at δ = 0.03, the real
release has δ = 0.0478 there).

A randomizer R has the (p, β, q) property if for all inputs x, x', x'' and outputs y:
R(x)(y) ≤ p·R(x')(y); TV(R(x), R(x')) ≤ β; R(x)(y) ≤ q·R(x'')(y). The theorem claims n shuffled
reports are post-processing of the ``CountPair`` with α = β/(p − 1), u0 = p·α, u1 = α,
r0 = r1 = α·p/q; the parameters per oracle (all with p = q = e^ε₀):

    GRR(d):     β = (e^ε − 1)/(e^ε + d − 1)
    OUE, Hadamard: β = (e^ε − 1)/(2(e^ε + 1))
    SUE:        β = (e^{ε/2} − 1)/(e^{ε/2} + 1)
    OLH(g):     β = (e^ε − 1)/(e^ε + g − 1)
    RAPPOR:     β = TV of h bits Bern(q*) and h bits Bern(p*) against the swap
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ldptel.mechanisms.olh import olh_g
from ldptel.privacy.amplification import DEFAULT_RAPPOR_HASHES, rappor_bits
from ldptel.privacy.count_pair import CountPair


@dataclass(frozen=True)
class VariationRatio:
    """The (p, β, q) parameters of a randomizer (module docstring)."""

    p: float
    beta: float
    q: float

    def pair(self, n: int) -> CountPair:
        """The pair the theorem claims dominates n shuffled reports (unsound: module docstring)."""
        alpha = self.beta / (self.p - 1)
        r = alpha * self.p / self.q
        return CountPair(u0=self.p * alpha, u1=alpha, r0=r, r1=r, n=n)


def _rappor_beta(p_star: float, q_star: float, hashes: int) -> float:
    k = range(hashes + 1)
    on = np.asarray(stats.binom.pmf(list(k), hashes, q_star), dtype=np.float64)
    off = np.asarray(stats.binom.pmf(list(k), hashes, p_star), dtype=np.float64)
    return float(0.5 * sum(abs(on[i] * off[j] - off[i] * on[j]) for i in k for j in k))


def variation_ratio(oracle: str, epsilon0: float, domain_size: int,
                    hashes: int = DEFAULT_RAPPOR_HASHES) -> VariationRatio:
    """(p, β, q) of ``oracle`` at local ε₀ (module docstring)."""
    e = math.exp(epsilon0)
    if oracle == "grr":
        beta = (e - 1) / (e + domain_size - 1)
    elif oracle in ("oue", "hadamard"):
        beta = (e - 1) / (2 * (e + 1))
    elif oracle == "sue":
        h = math.exp(epsilon0 / 2)
        beta = (h - 1) / (h + 1)
    elif oracle == "olh":
        beta = (e - 1) / (e + olh_g(epsilon0) - 1)
    elif oracle == "rappor":
        beta = _rappor_beta(*rappor_bits(epsilon0, hashes), hashes)
    else:
        raise ValueError(f"unknown oracle {oracle!r}")
    return VariationRatio(p=e, beta=beta, q=e)
