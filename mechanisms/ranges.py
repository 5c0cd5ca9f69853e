"""The estimate of a range campaign (both methods): per-value counts, any range or prefix with
its std error from the method's variance formula, the monotone CDF and quantiles.

Monotone CDF: F̂(x) = Ŝ(x)/N from the raw prefix estimates Ŝ(x) = R̂[0, x], then the isotonic
(L2) regression onto non-decreasing sequences (pool-adjacent-violators; the last point pinned to 1
since every device has a value < d), then clipped to [0, 1]. Isotonic regression is a projection
onto a convex set containing the true CDF, so it never moves F̂ farther from it in L2.
Quantile q: x̂_q = min{x : F̃(x) ≥ q}. Its rank error |F(x̂_q) − q| is predicted by the
CDF's std error there, se_F = max(√Var[Ŝ(x̂_q)], √Var[Ŝ(x̂_q − 1)])/N (``rank_std_error``; the
prefix ending at d − 1 is exact, hence the neighbour); the value interval is
[x̂_{q − 1.96·se}, x̂_{q + 1.96·se}].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ldptel.mechanisms.base import Z95
from ldptel.mechanisms.estimates import FrequencyEstimate

VAR_RANGES = 1 << 16  # ranges per variance evaluation (bounds Haar's ranges × levels weights)


RangeVariance = Callable[[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]


@dataclass
class RangeEstimate(FrequencyEstimate):
    """``counts``/``std_error`` per value v (the range [v, v]); ``variance(lo, hi)`` gives
    Var[R̂] of arrays of ranges from the method's formula ``range_variance(lo, hi, plug_in, n)``
    with the per-value counts ``plug_in`` plugged in. ``arrays()`` / ``from_arrays`` carry
    everything a range, quantile or CDF query needs (the aggregator publishes them)."""

    range_variance: RangeVariance = None  # type: ignore[assignment]
    plug_in: np.ndarray = None  # type: ignore[assignment]
    method: str = ""
    _cdf: np.ndarray | None = field(default=None, repr=False)

    ARRAYS = ("counts", "std_error", "normalized", "plug_in", "cdf")

    def variance(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Var[R̂[lo_i, hi_i]] from the method's formula."""
        return self.range_variance(lo, hi, self.plug_in, self.n)

    def arrays(self) -> dict[str, np.ndarray]:
        """The estimate's arrays (``ARRAYS``; the CDF computed if it was not)."""
        self.cdf()
        return {"counts": self.counts, "std_error": self.std_error, "normalized": self.normalized,
                "plug_in": self.plug_in, "cdf": self.cdf()}

    @classmethod
    def from_arrays(cls, n: int, arrays: dict[str, np.ndarray], range_variance: RangeVariance,
                    method: str) -> RangeEstimate:
        """The estimate back from ``arrays()`` (no decoding: the CDF is not recomputed)."""
        return cls(n=n, counts=arrays["counts"], std_error=arrays["std_error"],
                   normalized=arrays["normalized"], range_variance=range_variance,
                   plug_in=arrays["plug_in"], method=method, _cdf=arrays["cdf"])

    @property
    def domain_size(self) -> int:
        return int(self.counts.size)

    def check_range(self, lo: npt.ArrayLike, hi: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        lo = np.asarray(lo, dtype=np.int64).reshape(-1)
        hi = np.asarray(hi, dtype=np.int64).reshape(-1)
        d = self.domain_size
        if lo.size and (lo.min() < 0 or lo.max() >= d):
            raise ValueError(f"lo must be in [0, {d}), got {int(lo[(lo < 0) | (lo >= d)][0])}")
        if hi.size and (hi.min() < 0 or hi.max() >= d):
            raise ValueError(f"hi must be in [0, {d}), got {int(hi[(hi < 0) | (hi >= d)][0])}")
        if np.any(lo > hi):
            raise ValueError("lo must be <= hi")
        return lo, hi

    def ranges(self, lo: npt.ArrayLike, hi: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Estimates and std errors of the ranges [lo_i, hi_i] (vectorized)."""
        lo, hi = self.check_range(lo, hi)
        cum = np.concatenate(([0.0], np.cumsum(self.counts)))
        est = cum[hi + 1] - cum[lo]
        step = VAR_RANGES
        var = np.concatenate([self.variance(lo[s : s + step], hi[s : s + step])
                              for s in range(0, lo.size, step)]) if lo.size else np.zeros(0)
        return est, np.sqrt(np.maximum(var, 0.0))

    def range(self, lo: int, hi: int) -> dict[str, Any]:
        """One range as a JSON-ready row: lo, hi, estimate, std_error, ci_low, ci_high."""
        est, se = self.ranges([lo], [hi])
        e, s = float(est[0]), float(se[0])
        return {"lo": int(lo), "hi": int(hi), "estimate": e, "std_error": s,
                "ci_low": e - Z95 * s, "ci_high": e + Z95 * s}

    def cdf(self) -> np.ndarray:
        """The monotone CDF F̃ (isotonic regression of Ŝ/N, clipped to [0, 1]); cached."""
        if self._cdf is None:
            from scipy.optimize import isotonic_regression  # imported here: fast start-up

            raw = np.cumsum(self.counts) / max(self.n, 1)
            w = np.ones_like(raw)
            raw[-1], w[-1] = 1.0, 1e9
            self._cdf = np.clip(isotonic_regression(raw, weights=w, increasing=True).x, 0.0, 1.0)
        return self._cdf

    def quantiles(self, qs: list[float] | np.ndarray) -> list[dict[str, Any]]:
        """Rows q, value, rank_std_error, value_ci_low, value_ci_high for each q in [0, 1]."""
        q = np.asarray(qs, dtype=np.float64).reshape(-1)
        if q.size and (not np.all(np.isfinite(q)) or q.min() < 0 or q.max() > 1):
            raise ValueError("q must be in [0, 1]")
        F = self.cdf()
        last = self.domain_size - 1

        def at(p: np.ndarray) -> np.ndarray:
            found = np.searchsorted(F, np.clip(p, 0, 1) - 1e-12, side="left")
            return cast("np.ndarray", np.minimum(found, last))

        x = at(q)
        # the CDF's uncertainty around x̂: its std error at x̂ and just before (the full-domain
        # prefix is exact, so x̂ = d − 1 alone would claim no uncertainty)
        se = self.ranges(np.zeros(2 * x.size, np.int64), np.concatenate((x, np.maximum(x - 1, 0))))[1]
        rank_se = np.maximum(se[: x.size], se[x.size :]) / max(self.n, 1)
        lo, hi = at(q - Z95 * rank_se), at(q + Z95 * rank_se)
        return [{"q": float(q[i]), "value": int(x[i]), "rank_std_error": float(rank_se[i]),
                 "value_ci_low": int(lo[i]), "value_ci_high": int(hi[i])} for i in range(q.size)]
