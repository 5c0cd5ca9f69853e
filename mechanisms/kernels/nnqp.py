"""Non-negative quadratic programs by cyclic coordinate descent, in the Gram form of a least-
squares problem (the RAPPOR decoder's selection and its non-negative fit):

    minimize ½βᵀGβ − gᵀβ + λ·Σβ  subject to β ≥ 0      (G symmetric positive semi-definite)

— non-negative least squares at λ = 0, the non-negative LASSO at λ > 0. One coordinate step is
β_i ← max(0, β_i − (∇_i + λ)/G_ii) with the gradient ∇ = Gβ − g kept up to date (one column of G
per changed coordinate). Sweeps over the whole set alternate with sweeps over the non-zero
coordinates only until no coordinate moves by more than ``tol`` (in units of β), as glmnet does.
"""

from __future__ import annotations

import numpy as np

from ldptel.mechanisms.kernels.compiled import kernel


@kernel
def _sweep(G, lam, beta, grad, active_only):  # pragma: no cover - compiled
    """One pass; returns the largest |Δβ_i|."""
    s = beta.size
    most = 0.0
    for i in range(s):
        if active_only and beta[i] == 0.0:
            continue
        gii = G[i, i]
        if gii <= 0.0:
            continue
        new = beta[i] - (grad[i] + lam) / gii
        if new < 0.0:
            new = 0.0
        delta = new - beta[i]
        if delta != 0.0:
            beta[i] = new
            col = G[i]  # G is symmetric: row i is column i, contiguous
            for r in range(s):
                grad[r] += col[r] * delta
            if abs(delta) > most:
                most = abs(delta)
    return most


@kernel
def _solve(G, g, lam, beta, tol, max_sweeps):  # pragma: no cover - compiled
    grad = G @ beta - g
    sweeps = 0
    while sweeps < max_sweeps:
        sweeps += 1
        if _sweep(G, lam, beta, grad, False) <= tol:
            break
        while sweeps < max_sweeps:  # the non-zero set until it settles, then a full pass again
            sweeps += 1
            if _sweep(G, lam, beta, grad, True) <= tol:
                break
    return sweeps


def nonneg_quadratic(G: np.ndarray, g: np.ndarray, lam: float = 0.0, start: np.ndarray | None = None,
                     tol: float = 1e-6, max_sweeps: int = 100_000) -> tuple[np.ndarray, int]:
    """argmin_{β ≥ 0} ½βᵀGβ − gᵀβ + λΣβ (from ``start``, else 0) and the sweeps it took."""
    G = np.ascontiguousarray(G, dtype=np.float64)
    g = np.ascontiguousarray(g, dtype=np.float64)
    beta = np.zeros(g.size) if start is None else np.maximum(np.array(start, dtype=np.float64), 0.0)
    sweeps = _solve(G, g, float(lam), beta, float(tol), int(max_sweeps))
    return beta, int(sweeps)
