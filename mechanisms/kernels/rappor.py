"""RAPPOR's per-cohort std-error terms (``aggregator/decoders/rappor_fit.py``), over a boolean
design X (rows (cohort j, bit b), k per cohort; columns the |S| selected candidates) given as CSR
and CSC index arrays, and G⁻¹ (|S| × |S|):

    Y_j = X_j G⁻¹ (k × |S|, the sum of the rows of G⁻¹ of the candidates setting each bit),
    noise += c_j²·Σ_b Σ_jb·Y_jb²,
    split += a_j c_j²·Σ_c D_c·(Σ_{b set by c in j} Y_jb)²,

O(h·|S|²) per cohort whatever k. Cohorts are split over the threads (``parallel``), each thread
summing its own two vectors.
"""

from __future__ import annotations

import numpy as np

from ldptel.mechanisms.kernels import parallel
from ldptel.mechanisms.kernels.compiled import kernel

MIN_CHUNK = 1 << 24  # flops per thread, at least


@kernel
def _terms(j0, j1, k, row_ptr, row_cols, col_ptr, col_rows, G_inv, sigma, c, a, D,
           noise, split):  # pragma: no cover - compiled
    s = G_inv.shape[0]
    Y = np.zeros((k, s))
    u = np.empty(s)
    pos = col_ptr[:-1].copy()  # per candidate, its next row (CSC rows are sorted)
    for cand in range(s):  # skip the rows of cohorts before j0
        while pos[cand] < col_ptr[cand + 1] and col_rows[pos[cand]] < j0 * k:
            pos[cand] += 1
    for j in range(j0, j1):
        Y[:] = 0.0
        cj2 = c[j] * c[j]
        for b in range(k):
            r = j * k + b
            if row_ptr[r] == row_ptr[r + 1]:
                continue
            yb = Y[b]
            for p in range(row_ptr[r], row_ptr[r + 1]):
                yb += G_inv[row_cols[p]]
            w = cj2 * sigma[r]
            for x in range(s):
                noise[x] += w * yb[x] * yb[x]
        end = (j + 1) * k
        for cand in range(s):
            first = pos[cand]
            last = first
            while last < col_ptr[cand + 1] and col_rows[last] < end:
                last += 1
            pos[cand] = last
            if D[cand] <= 0.0 or last == first:
                continue
            u[:] = Y[col_rows[first] - j * k]
            for p in range(first + 1, last):
                u += Y[col_rows[p] - j * k]
            w = a[j] * cj2 * D[cand]
            for x in range(s):
                split[x] += w * u[x] * u[x]


@kernel
def _mirror(a):  # pragma: no cover - compiled
    n = a.shape[0]
    for i in range(n):
        for j in range(i):
            a[i, j] = a[j, i]


def symmetric_from_upper(a: np.ndarray) -> np.ndarray:
    """``a`` with its lower triangle overwritten by its upper one (LAPACK's dpotri fills only
    one), in place."""
    a = np.ascontiguousarray(a)
    _mirror(a)
    return a


def cohort_terms(Xs, k: int, G_inv: np.ndarray, sigma: np.ndarray, c: np.ndarray, a: np.ndarray,
                 D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(noise, split) for a scipy sparse boolean design ``Xs`` ((m'·k) × |S|)."""
    csr, csc = Xs.tocsr(), Xs.tocsc()
    csr.sort_indices()
    csc.sort_indices()
    s, m = G_inv.shape[0], c.size
    G_inv = np.ascontiguousarray(G_inv, dtype=np.float64)
    args = (np.int64(k), csr.indptr.astype(np.int64), csr.indices.astype(np.int64),
            csc.indptr.astype(np.int64), csc.indices.astype(np.int64), G_inv,
            np.ascontiguousarray(sigma, dtype=np.float64), np.ascontiguousarray(c, dtype=np.float64),
            np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(D, dtype=np.float64))
    per_cohort = 4.0 * s * max(1.0, Xs.nnz / max(m, 1))  # about h·|S|² adds, twice

    def part(j0: int, j1: int) -> tuple[np.ndarray, np.ndarray]:
        noise, split = np.zeros(s), np.zeros(s)
        _terms(j0, j1, *args, noise, split)
        return noise, split

    parts = parallel.run(part, parallel.chunks(m, per_cohort, MIN_CHUNK))
    return sum(p[0] for p in parts), sum(p[1] for p in parts)  # type: ignore[return-value]
