"""The empirical ε-LDP check (Clopper–Pearson), shared by the privacy tests and ``ldptel audit``.

An ε-LDP mechanism satisfies P(o | u) ≤ e^ε·P(o | v) for all inputs u, v and outputs o (and so
does any statistic T(o): data processing). From ``counts[u, o]`` (how often input u gave output o
in n seeded runs) every P(o | u) gets a two-sided Clopper–Pearson interval at level 1 − α/K
(K = number of (u, o) cells), so by the union bound all K intervals hold at once with probability
≥ 1 − α. If they all hold and the mechanism is ε-LDP, then for every o, u, v

    lower(P(o|u)) / upper(P(o|v))  ≤  P(o|u) / P(o|v)  ≤  e^ε,

so ``violation = max lower/upper > e^ε`` flags an honest mechanism with probability ≤ α: it only
fires when the data *prove* a violation; ``proven_epsilon`` = ln(max lower/upper) is the
empirical lower bound on the mechanism's ε. ``attains_bound``: at the output with the largest
point-estimate ratio, the simultaneous interval [lower/upper, upper/lower] contains e^ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

ALPHA = 1e-6  # probability that an honest mechanism is flagged, per check (union bound)


@dataclass
class LdpCheck:
    epsilon: float
    max_lower_ratio: float  # max over (o, u, v) of lower(P(o|u)) / upper(P(o|v)): what the data prove
    max_point_ratio: float  # max of the point-estimate ratio P̂(o|u)/P̂(o|v)
    argmax_interval: tuple[float, float]  # simultaneous ratio interval at the max point ratio's cell

    @property
    def violation(self) -> bool:
        return self.max_lower_ratio > math.exp(self.epsilon)

    @property
    def attains_bound(self) -> bool:
        lo, hi = self.argmax_interval
        return lo <= math.exp(self.epsilon) <= hi

    @property
    def proven_epsilon(self) -> float:
        """ln(max lower/upper): the ε the data prove the mechanism spends (at least)."""
        return math.log(self.max_lower_ratio) if self.max_lower_ratio > 0 else 0.0

    @property
    def point_epsilon(self) -> float:
        return math.log(self.max_point_ratio) if self.max_point_ratio > 0 else 0.0

    def __str__(self) -> str:
        lo, hi = self.argmax_interval
        return (f"ε={self.epsilon:.4g} e^ε={math.exp(self.epsilon):.4f} proven≥{self.max_lower_ratio:.4f} "
                f"point max={self.max_point_ratio:.4f} its interval=[{lo:.4f}, {hi:.4f}]")


def check_ldp(counts: np.ndarray, epsilon: float, alpha: float = ALPHA) -> LdpCheck:
    """``counts[u, o]``: how often input u gave output o (each row sums to that input's n)."""
    counts = np.asarray(counts, dtype=np.int64)
    n = counts.sum(axis=1, keepdims=True)
    a = alpha / (2 * counts.size)  # each tail of each interval
    with np.errstate(divide="ignore", invalid="ignore"):
        lower = np.where(counts > 0, beta.ppf(a, counts, n - counts + 1), 0.0)
        upper = np.where(counts < n, beta.isf(a, counts + 1, n - counts), 1.0)
        point = counts / n
        # [u, v, o] ratios between two distinct inputs
        proven = lower[:, None, :] / upper[None, :, :]
        point_ratio = point[:, None, :] / point[None, :, :]
        high = upper[:, None, :] / lower[None, :, :]
    distinct = ~np.eye(counts.shape[0], dtype=bool)
    proven = np.where(distinct[:, :, None], proven, 0.0)
    point_ratio = np.where(distinct[:, :, None] & (counts[:, None, :] > 0), point_ratio, 0.0)
    idx = np.unravel_index(np.argmax(point_ratio), point_ratio.shape)
    return LdpCheck(epsilon, float(proven.max()), float(point_ratio[idx]),
                    (float(proven[idx]), float(high[idx])))


__all__ = ["ALPHA", "LdpCheck", "check_ldp"]
