"""Post-processing of raw unbiased counts (costs no privacy)."""

from __future__ import annotations

import numpy as np


def norm_sub(counts: np.ndarray, total: float) -> np.ndarray:
    """Norm-Sub: zero the negatives and subtract one common amount from the positives so the
    sum is ``total``, repeated until nothing is negative — the Euclidean projection of
    ``counts`` onto the simplex {x ≥ 0, Σx = total}: x = max(c − τ, 0) with τ solving
    Σ max(c − τ, 0) = total (sort-based, O(d log d))."""
    c = np.asarray(counts, dtype=np.float64)
    if c.size == 0 or total <= 0:
        return np.zeros_like(c)
    s = np.sort(c)[::-1]
    cumulative = np.cumsum(s) - total
    ranks = np.arange(1, c.size + 1)
    k = np.nonzero(s - cumulative / ranks > 0)[0][-1]
    tau = cumulative[k] / (k + 1)
    return np.maximum(c - tau, 0.0)
