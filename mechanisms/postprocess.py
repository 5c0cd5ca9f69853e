"""Post-processing of raw unbiased counts (costs no privacy)."""

from __future__ import annotations

from typing import cast

import numpy as np


def norm_sub(counts: np.ndarray, total: float) -> np.ndarray:
    """Norm-Sub: zero the negatives and subtract one common amount from the positives so the
    sum is ``total``, repeated until nothing is negative — the Euclidean projection of
    ``counts`` onto the simplex {x ≥ 0, Σx = total}: x = max(c − τ, 0) with τ solving
    Σ max(c − τ, 0) = total (sort-based, O(d log d)). When the positives already sum to at least
    ``total``, τ ≥ 0 and only the positives are sorted (the rest end at 0 either way)."""
    c = np.asarray(counts, dtype=np.float64)
    if c.size == 0 or total <= 0:
        return np.zeros_like(c)
    positive = c[c > 0]
    s = np.sort(positive if positive.sum() >= total else c)[::-1]
    cumulative = np.cumsum(s) - total
    # k = the last index with s_k > cumulative_k/(k + 1): the condition holds on a prefix (it is
    # the simplex projection's support), so a binary search finds it in O(log d)
    lo, hi = 0, s.size - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if s[mid] > cumulative[mid] / (mid + 1):
            lo = mid
        else:
            hi = mid - 1
    tau = cumulative[lo] / (lo + 1)
    return cast("np.ndarray", np.maximum(c - tau, 0.0))
