"""Range and numeric estimates from a histogram over an index domain [0, K): campaigns in a
shuffled privacy mode (docs/privacy.md). A range campaign's index is the device's value; a numeric
campaign's its value rounded at random to a grid point g_i (``ldptel.mechanisms.grid``).

The index goes through an index mechanism with P(report supports its own index) = p and P(it
supports another given index) = q: the histogram (p = 1, q = 0), GRR (one index, p = e^ε/(e^ε +
K − 1), q = 1/(e^ε + K − 1)), OUE or SUE (K independent bits); in ``shuffled-fakes`` the n devices'
messages come with F fake indices, uniform over [0, K), F = messages − n known exactly. So

    Ĉ_i = (C_i − F/K − n·q)/(p − q)

is unbiased for the number of devices whose index is i. A linear statistic S = Σ_i w_i·Ĉ_i (a
range [lo, hi]: w = 1 there; the sum of a numeric campaign's values: w_i = g_i) is unbiased for
Σ_j E[w_{r_j}] (r_j device j's index: the range's count; Σ_j x_j, the rounding being unbiased), and
devices and fakes being independent,

    Var[S] = (V_devices + V_fakes)/(p − q)²,    V_fakes = F·(s₂/K − s₁²/K²)
    histogram, GRR:  V_devices = n·q·s₂ + (p − q)(1 − p + q)·A₂ − n·q²·s₁² − 2q(p − q)·s₁·A₁ + (p − q)²·R
    OUE, SUE:        V_devices = n·q(1 − q)·s₂ + (p(1 − p) − q(1 − q))·A₂ + (p − q)²·R

with s₁ = Σ w_i, s₂ = Σ w_i², A₁ = Σ w_i·Ĉ_i and A₂ = Σ w_i²·Ĉ_i (unbiased for Σ_j w_{r_j} and
Σ_j w_{r_j}², plugged in) and R = Σ_j Var[w_{r_j}], the rounding's variance: 0 for a range, and
n·h²/4 for a numeric campaign (each report's rounding adds h²·t(1 − t) ≤ h²/4: the bound is
used, so the std error is exact when every value is halfway between two grid points, conservative
by at most that term otherwise). Given F the fakes are multinomial (F, 1/K) over the indices (V_fakes);
a report of the histogram or GRR is one index (the − s₁², − s₁·A₁ terms: a multinomial's
covariances), OUE's and SUE's bits are independent given the index. One index (w = [i]) gives each
oracle's own count variance back. For a range the variance is F·(k/K)(1 − k/K)/(p − q)² from the
fakes plus the oracle's part, k = hi − lo + 1; the whole domain [0, K) is exact for the histogram.

The mean of a numeric campaign is c + Σ_i (g_i − c)·Ĉ_i/n with c the middle of [lower, upper] (n,
the devices, is known exactly; for the histogram and GRR Σ Ĉ_i = n, so this is Σ g_i·Ĉ_i/n), its
variance Var[S]/n² with w_i = g_i − c; the sum is n times it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldptel.mechanisms.base import Mechanism

UNARY = ("oue", "sue")


@dataclass(frozen=True)
class IndexStatistics:
    """The variance formulas of the module docstring for one index mechanism and F fakes."""

    p: float
    q: float
    domain_size: int
    fakes: int = 0
    unary: bool = False

    def _variance(self, s1: np.ndarray, s2: np.ndarray, a1: np.ndarray, a2: np.ndarray, n: int,
                  rounding: float) -> np.ndarray:
        p, q, k = self.p, self.q, self.domain_size
        g = p - q
        if self.unary:
            dev = n * q * (1 - q) * s2 + (p * (1 - p) - q * (1 - q)) * a2
        else:
            dev = n * q * s2 + g * (1 - g) * a2 - n * q * q * s1 * s1 - 2 * q * g * s1 * a1
        fakes = self.fakes * (s2 / k - (s1 / k) ** 2)
        return np.maximum(dev + g * g * rounding + fakes, 0.0) / (g * g)

    def linear_variance(self, weights: np.ndarray, counts: np.ndarray, n: int,
                        rounding: float = 0.0) -> float:
        """Var[Σ w_i·Ĉ_i] (``rounding``: R) with the estimates ``counts`` plugged in."""
        w = np.asarray(weights, dtype=np.float64)
        c = np.asarray(counts, dtype=np.float64)
        one = np.ones(1)
        return float(self._variance(one * w.sum(), one * (w * w).sum(), one * (w @ c), one * ((w * w) @ c),
                                    n, rounding)[0])

    def range_variance(self, lo: np.ndarray, hi: np.ndarray, plug_in: np.ndarray, n: int) -> np.ndarray:
        """Var[R̂[lo_i, hi_i]] of each range (``ranges.RangeEstimate``'s signature): w = 1 on it."""
        cum = np.concatenate(([0.0], np.cumsum(np.asarray(plug_in, dtype=np.float64))))
        lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
        k = (hi - lo + 1).astype(np.float64)
        inside = cum[hi + 1] - cum[lo]
        return self._variance(k, k, inside, inside, n, 0.0)

    def mean(self, grid: np.ndarray, counts: np.ndarray, n: int, step: float) -> tuple[float, float]:
        """(the mean of a numeric campaign, its variance), grid step h (module docstring)."""
        g = np.asarray(grid, dtype=np.float64)
        if n <= 0:
            return float("nan"), float("nan")
        centre = 0.5 * (g[0] + g[-1])
        w = g - centre
        total = float(w @ np.asarray(counts, dtype=np.float64))
        var = self.linear_variance(w, counts, n, rounding=n * step * step / 4)
        return centre + total / n, var / (n * n)


def index_statistics(mech: Mechanism, fakes: int = 0) -> IndexStatistics:
    """The ``IndexStatistics`` of an index mechanism (the histogram, GRR, OUE, SUE, or their grid
    variants) with ``fakes`` fake messages."""
    p, q = float(mech.p), float(mech.q)  # type: ignore[attr-defined]
    return IndexStatistics(p=p, q=q, domain_size=int(mech.domain_size), fakes=int(fakes),
                           unary=mech.name in UNARY)


__all__ = ["UNARY", "IndexStatistics", "index_statistics"]
