"""Hadamard-type kernels: the signed histogram A[j] = Σ_{i: j_i = j} (+1 if b_i else −1) of
(index, sign) reports, and the unnormalized fast Walsh–Hadamard transform in place,
(H x)[v] = Σ_j (−1)^popcount(j & v) x[j] (the same butterflies, in the same order, as the numpy
version it replaces: x_j ± x_{j+h} for h = 1, 2, 4, ...)."""

from __future__ import annotations

import numpy as np

from ldptel.mechanisms.kernels.compiled import kernel


@kernel
def _histogram(indices, signs, out):  # pragma: no cover - compiled
    """out[j] += ±1; returns the first report whose index is outside out, or −1."""
    size = out.size
    for i in range(indices.size):
        j = indices[i]
        if j < 0 or j >= size:
            return i
        out[j] += 2 * np.int64(signs[i]) - 1
    return -1


def signed_histogram(indices: np.ndarray, signs: np.ndarray, size: int) -> np.ndarray:
    """A (int64, ``size``) for int64 ``indices`` in [0, size) and boolean ``signs``; an index
    out of range raises ValueError."""
    idx = np.ascontiguousarray(indices, dtype=np.int64)
    sg = np.ascontiguousarray(signs, dtype=np.bool_)
    if idx.size != sg.size:
        raise ValueError(f"{idx.size} indices but {sg.size} signs")
    out = np.zeros(size, dtype=np.int64)
    bad = _histogram(idx, sg, out)
    if bad >= 0:
        raise ValueError(f"index {int(idx[bad])} of report {bad} is not in [0, {size})")
    return out


@kernel
def _fwht(x):  # pragma: no cover - compiled
    n = x.size
    h = 1
    while h < n:
        for i in range(0, n, 2 * h):
            for j in range(i, i + h):
                u = x[j]
                v = x[j + h]
                x[j] = u + v
                x[j + h] = u - v
        h *= 2


def fwht(a: np.ndarray) -> np.ndarray:
    """H a as a new float64 array (len(a) a power of two)."""
    x = np.array(a, dtype=np.float64)
    if x.ndim != 1 or x.size & (x.size - 1):
        raise ValueError(f"fwht needs a 1-d array of power-of-two length, got shape {x.shape}")
    _fwht(x)
    return x
