"""RAPPOR decoder.

Sufficient statistics: reports per cohort N_j and ones per (cohort, bit) c_jb.
Per-bit estimate of true Bloom-bit counts: t_jb = (c_jb − p*·N_j) / ((1−f)(q−p)).
Model: t_jb ≈ Σ_c X_jbc · n_c · N_j/N (X: the candidates' Bloom patterns per cohort, devices
spread over cohorts uniformly). Raw counts: weighted least squares n̂ = G⁻¹ Σ_j A_jᵀ W_j t_j
(G = Σ_j A_jᵀ W_j A_j, weights 1/(N_j r̄_j(1−r̄_j)) per cohort); unbiased when the candidates
cover the population. Std errors: the sandwich G⁻¹ (Σ_j A_jᵀ W_j Σ_j W_j A_j) G⁻¹ with the
per-bit variance Σ_jb = N_j r_jb(1−r_jb)/((1−f)(q−p))², plus the variance of the random cohort
split, n_c·Var_j(M_j[·, c]) with M_j = m·L_j X_j. Normalized: non-negative least squares on the
same weighted system (not forced to sum to N: strings outside the candidates are allowed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.mechanisms.estimates import FrequencyEstimate
from ldptel.mechanisms.rappor import RAPPOR


class RapporAccumulator(Accumulator):
    mechanism_name = "rappor"
    mech: RAPPOR

    def empty(self) -> dict[str, np.ndarray]:
        m, k = self.mech.cohorts, self.mech.bloom_bits
        return {"cohort_n": np.zeros(m, dtype=np.int64), "ones": np.zeros((m, k), dtype=np.int64)}

    def add_columns(self, columns: dict, count: int) -> None:
        # numba loads on the first decode: ldptel.aggregator imports without it
        from ldptel.mechanisms.kernels.bits import column_ones

        cohorts, bits = columns["cohorts"], columns["bits"]
        m, k = self.mech.cohorts, self.mech.bloom_bits
        ones = column_ones(bits, k, cohorts, m)  # raises on a cohort outside [0, m)
        self.state["cohort_n"] += np.bincount(cohorts, minlength=m)
        self.state["ones"] += ones

    def bit_estimates(self) -> np.ndarray:
        """t_jb: estimated number of devices of cohort j whose true Bloom bit b is set."""
        mech = self.mech
        n_j = self.state["cohort_n"][:, None].astype(np.float64)
        return (self.state["ones"] - mech.p_star * n_j) / mech.bit_scale

    def estimate(self) -> FrequencyEstimate:
        """Closed forms with a_j = N_j/N, c_j = w_j·a_j and S_j = X_jᵀX_j (sparse: each candidate
        sets ≤ h bits per cohort): G = Σ_j c_j a_j S_j, n̂ = G⁻¹ Σ_j c_j X_jᵀ t_j,
        Var_noise = diag(G⁻¹ [Σ_j c_j² X_jᵀ diag(Σ_j) X_j] G⁻¹), and with M_j = c_j G⁻¹ S_j the
        cohort-split term Σ_c n_c·Var_j(M_j[·, c]) = diag(G⁻¹ Q G⁻¹),
        Q = (1/m) Σ_j c_j² S_j D S_j − (1/m²) S̄ D S̄, S̄ = Σ_j c_j S_j, D = diag(n̂⁺).
        Only C×C dense algebra, never the (m·k × C) design matrix."""
        mech, n = self.mech, self.n
        if n == 0:
            zeros = np.zeros(len(mech.candidates))
            return FrequencyEstimate(n=0, counts=zeros, std_error=zeros.copy(),
                                     labels=list(mech.candidates), normalized=zeros.copy())
        system = self.weighted_system()
        counts = system.solve()
        var_noise, var_split = system.sandwich_diagonals(counts)
        se = np.sqrt(np.maximum(var_noise + np.maximum(var_split, 0), 0))
        return FrequencyEstimate(n=n, counts=counts, std_error=se, labels=list(mech.candidates),
                                 normalized=system.nonnegative_fit(counts))

    def weighted_system(self) -> _WeightedSystem:
        """The live cohorts' (N_j > 0) design, bit estimates t_jb, their variances Σ_jb and the
        WLS weights w_j = 1/(N_j r̄_j(1−r̄_j)), r_jb the observed one-rate clipped to [p*, q*]."""
        from scipy import sparse  # imported here: keeps `ldptel` start-up fast

        mech = self.mech
        C = len(mech.candidates)
        n_j = self.state["cohort_n"].astype(np.float64)
        live = n_j > 0
        X = mech.design_matrix()[live]  # (m', k, C) boolean
        n_j = n_j[live]
        ones = self.state["ones"][live].astype(np.float64)
        t = self.bit_estimates()[live]  # (m', k)
        rate = np.clip(ones / n_j[:, None], mech.p_star, mech.q_star)
        mean_rate = rate.mean(axis=1)
        w = 1.0 / (n_j * mean_rate * (1 - mean_rate))  # WLS weight per cohort
        a = n_j / self.n
        return _WeightedSystem(
            Xs=sparse.csr_matrix(X.reshape(-1, C).astype(np.float64)),  # rows (cohort, bit)
            t=t, sigma=n_j[:, None] * rate * (1 - rate) / mech.bit_scale**2,  # Var t_jb
            a=a, c=w * a, n=self.n, cohorts=mech.cohorts)


@dataclass
class _WeightedSystem:
    """The weighted least-squares system of ``RapporAccumulator.estimate`` (rows: live cohort ×
    bit)."""

    Xs: Any  # scipy.sparse.csr_matrix (m'·k, C)
    t: np.ndarray  # (m', k) bit estimates
    sigma: np.ndarray  # (m', k) their variances
    a: np.ndarray  # N_j/N
    c: np.ndarray  # w_j·a_j
    n: int
    cohorts: int  # m (all cohorts, live or not)
    G: np.ndarray = field(init=False)
    G_inv: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.G = self.gram(np.repeat(self.c * self.a, self.k)).toarray()
        self.G_inv = np.linalg.pinv(self.G, hermitian=True)

    @property
    def k(self) -> int:
        return self.t.shape[1]

    def gram(self, row_weights: np.ndarray) -> Any:
        """Xᵀ diag(row_weights) X (sparse)."""
        from scipy import sparse

        return (self.Xs.T @ sparse.diags(row_weights) @ self.Xs).tocsr()

    def solve(self) -> np.ndarray:
        """n̂ = G⁻¹ Σ_j c_j X_jᵀ t_j."""
        return self.G_inv @ (self.Xs.T @ (np.repeat(self.c, self.k) * self.t.reshape(-1)))

    def split_term(self, counts: np.ndarray) -> Any:
        """Q = (1/m) Σ_j c_j² S_j D S_j − (1/m²) S̄ D S̄ with D = diag(clip(n̂, 0, N))."""
        from scipy import sparse

        C, k, c = self.Xs.shape[1], self.k, self.c
        D = sparse.diags(np.clip(counts, 0, self.n))
        P = sparse.csr_matrix((C, C))
        for j in range(self.t.shape[0]):  # a loop over cohorts, not reports
            Xj = self.Xs[j * k : (j + 1) * k]
            S_j = (Xj.T @ Xj).tocsr()
            P = P + c[j] ** 2 * (S_j @ D @ S_j)
        S_bar = self.gram(np.repeat(c, k))
        m_all = self.cohorts
        return P / m_all - (S_bar @ D @ S_bar) / m_all**2

    def sandwich_diagonals(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """diag(G⁻¹ B G⁻¹) for B = the noise meat Σ_j c_j² X_jᵀ diag(Σ_j) X_j and B = Q, in one
        product (G⁻¹ symmetric): (Var_noise, Var_split)."""
        C, G_inv = self.Xs.shape[1], self.G_inv
        meat = self.gram(np.repeat(self.c**2, self.k) * self.sigma.reshape(-1))
        Q = self.split_term(counts)
        both = G_inv @ np.hstack([meat.toarray(), Q.toarray()])
        return (both[:, :C] * G_inv).sum(axis=1), (both[:, C:] * G_inv).sum(axis=1)

    def nonnegative_fit(self, counts: np.ndarray) -> np.ndarray:
        """NNLS on the C×C square root of the normal equations: ‖Rβ − z‖² = βᵀGβ − 2βᵀg + const."""
        from scipy.optimize import nnls

        G = self.G
        evals, evecs = np.linalg.eigh(G)
        keep = evals > evals.max() * 1e-12
        R = np.sqrt(evals[keep])[:, None] * evecs[:, keep].T
        z = (evecs[:, keep].T @ (G @ counts)) / np.sqrt(evals[keep])
        fit, _ = nnls(R, z, maxiter=50 * G.shape[0])
        return fit
