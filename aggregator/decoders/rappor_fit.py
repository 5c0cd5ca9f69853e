"""The RAPPOR regression: candidate selection, weighted least squares on the selected candidates
with sandwich std errors, and the non-negative fit, from one Cholesky factorization.

Rows r = (live cohort j, bit b), columns the candidates; X the boolean Bloom design (sparse: a
candidate sets ≤ h bits per cohort), t_r the bit estimates, Σ_r their variances, a_j = N_j/N and
c_j = w_j·a_j (``RapporAccumulator.weighted_system``). On a candidate set S:
G = Σ_j c_j a_j X_jᵀX_j (the weighted Gram matrix), n̂ = G⁻¹ Σ_j c_j X_jᵀ t_j.

**Selection** (more than ``SELECT_RATIO`` × rows candidates, where least squares is under- or
barely determined): the non-negative LASSO min ½βᵀGβ − gᵀβ + λΣβ, β ≥ 0, along a geometric path
of λ from λ_max = max_i g_i (where β = 0) down to λ_max/100, warm-started, stopping before the
support exceeds ``SELECT_RATIO`` × rows (the rule of google/rappor's decoder: its glmnet path to
λ_max/100, at most 0.8 × rows non-zero coefficients); S is the support at the last λ kept.
Candidates outside S are estimated 0 with std error 0 (the fitted model holds them absent), and
``normalized`` keeps only the candidates the fit detects, n̂_c > ``REPORT_Z`` · se_c (google/rappor's
reporting rule), at their least-squares estimate (re-fitting without the others would hand their
mass to the candidates that share their Bloom bits). Otherwise S is every candidate and nothing
changes from plain least squares.

**Std errors**, conditional on the cohort sizes N_j: diag(G⁻¹ B G⁻¹) for the noise of the bit
counts, B = Σ_j c_j² X_jᵀ diag(Σ_j) X_j, plus the random split of the devices over cohorts: a
device of value c lands in cohort j w.p. a_j and then contributes u_jc = c_j G⁻¹X_jᵀX_j e_c, whose
mean over j is e_c, so its variance adds Σ_j a_j c_j² diag(G⁻¹X_jᵀX_j D X_jᵀX_j G⁻¹) − D,
D = diag(n̂⁺). Per cohort only Y_j = X_j G⁻¹ (k × |S|) is formed (``kernels.rappor``): the noise
term is Σ_b Σ_jb Y_jb², the split term Σ_c D_c (Σ_{b set by c} Y_jb)².

**Normalized** (no selection): the non-negative least squares on the same system (not forced to
sum to N: strings outside the candidates are allowed), by coordinate descent from clip(n̂, 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

SELECT_RATIO = 0.8  # select when candidates > 0.8 × equations; keep at most that many
PATH_STEPS = 12  # λ values from λ_max to λ_max/100 (warm-started)
PATH_END = 0.01
REPORT_Z = 2.0  # after a selection, normalized keeps the estimates more than 2 std errors above 0


@dataclass
class Fit:
    counts: np.ndarray
    std_error: np.ndarray
    normalized: np.ndarray
    selected: np.ndarray  # boolean, per candidate


@dataclass
class RapporSystem:
    """The weighted system over live cohorts (rows grouped by cohort, ``k`` per cohort)."""

    Xs: Any  # scipy.sparse.csr_matrix (m'·k, C) boolean design as float64
    t: np.ndarray  # (m'·k,) bit estimates
    sigma: np.ndarray  # (m'·k,) their variances
    a: np.ndarray  # (m',) N_j/N
    c: np.ndarray  # (m',) w_j·a_j
    k: int

    @property
    def rows(self) -> int:
        return int(self.Xs.shape[0])

    def gram(self, cols: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Dense G on the candidates ``cols``."""
        from scipy import sparse

        X = self.Xs[:, cols]
        return cast("np.ndarray", (X.T @ sparse.diags(np.repeat(self.c * self.a, self.k)) @ X).toarray())

    def rhs(self) -> np.ndarray:
        """g = Σ_j c_j X_jᵀ t_j over every candidate."""
        return cast("np.ndarray", self.Xs.T @ (np.repeat(self.c, self.k) * self.t))


def fit(system: RapporSystem, n: int) -> Fit:
    """Select (if needed), solve, std errors, non-negative fit (module docstring)."""
    C = system.Xs.shape[1]
    g_all = system.rhs()
    selected = np.ones(C, dtype=bool)
    if C > SELECT_RATIO * system.rows:
        selected = select(system.gram(), g_all, int(SELECT_RATIO * system.rows))
    S = np.flatnonzero(selected)
    counts, se, normalized = np.zeros(C), np.zeros(C), np.zeros(C)
    if S.size:
        G = system.gram(S) if S.size < C else system.gram()
        G_inv, est = solve(G, g_all[S])
        counts[S] = est
        se[S] = np.sqrt(np.maximum(variances(system, S, G_inv, np.clip(est, 0, n)), 0.0))
        if S.size < C:
            normalized[S] = np.where(est > REPORT_Z * se[S], est, 0.0)
        else:
            normalized[S] = nonneg_fit(G, g_all[S], est)
    return Fit(counts=counts, std_error=se, normalized=normalized, selected=selected)


def solve(G: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(G⁻¹, G⁻¹g) from one Cholesky factorization; a singular G (candidates whose Bloom bits
    coincide in every live cohort) falls back to the pseudo-inverse, the minimum-norm solution."""
    from scipy import linalg

    from ldptel.mechanisms.kernels.rappor import symmetric_from_upper

    try:
        factor = linalg.cho_factor(G, lower=False, check_finite=False)
    except linalg.LinAlgError:
        G_inv = np.linalg.pinv(G, hermitian=True)
        return G_inv, G_inv @ g
    est = linalg.cho_solve(factor, g, check_finite=False)
    inv, info = linalg.lapack.dpotri(factor[0], lower=0, overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotri failed ({info})")
    return symmetric_from_upper(inv), est


def variances(system: RapporSystem, S: np.ndarray, G_inv: np.ndarray, D: np.ndarray) -> np.ndarray:
    """Noise plus cohort-split variance of n̂_S (module docstring), cohort by cohort in the
    compiled ``kernels.rappor.cohort_terms`` (O(h·|S|²) per cohort)."""
    from ldptel.mechanisms.kernels.rappor import cohort_terms

    noise, split = cohort_terms(system.Xs[:, S], system.k, G_inv, system.sigma, system.c, system.a, D)
    return cast("np.ndarray", noise + np.maximum(split - D, 0.0))


def select(G: np.ndarray, g: np.ndarray, cap: int) -> np.ndarray:
    """The non-negative LASSO's support at the smallest λ of the path whose support has at most
    ``cap`` candidates (module docstring)."""
    from ldptel.mechanisms.kernels.nnqp import nonneg_quadratic

    lam_max = float(g.max()) if g.size else 0.0
    beta = np.zeros(g.size)
    support = np.zeros(g.size, dtype=bool)
    if lam_max <= 0:
        return support
    tol = 1e-4 * max(1.0, lam_max / max(float(np.max(np.diag(G))), 1e-300))
    for lam in lam_max * np.geomspace(1.0, PATH_END, PATH_STEPS)[1:]:
        beta, _ = nonneg_quadratic(G, g, lam, beta, tol=tol)
        if np.count_nonzero(beta) > cap:
            break
        support = beta > 0
    return support


def nonneg_fit(G: np.ndarray, g: np.ndarray, start: np.ndarray) -> np.ndarray:
    """argmin_{β ≥ 0} ‖weighted residual‖² = ½βᵀGβ − gᵀβ (non-negative least squares)."""
    from ldptel.mechanisms.kernels.nnqp import nonneg_quadratic

    scale = max(1.0, float(np.abs(start).max()) if start.size else 1.0)
    beta, _ = nonneg_quadratic(G, g, 0.0, np.clip(start, 0, None), tol=1e-9 * scale)
    return beta
