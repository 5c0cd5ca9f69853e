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

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.aggregator.decoders.unary import column_popcount
from ldptel.aggregator.result import FrequencyEstimate


class RapporAccumulator(Accumulator):
    mechanism_name = "rappor"

    def empty(self) -> dict[str, np.ndarray]:
        m, k = self.mech.cohorts, self.mech.bloom_bits
        return {"cohort_n": np.zeros(m, dtype=np.int64), "ones": np.zeros((m, k), dtype=np.int64)}

    def add_columns(self, columns: dict, count: int) -> None:
        cohorts, bits = columns["cohorts"], columns["bits"]
        m, k = self.mech.cohorts, self.mech.bloom_bits
        per_cohort = np.bincount(cohorts, minlength=m)
        self.state["cohort_n"] += per_cohort
        order = np.argsort(cohorts, kind="stable")
        sorted_bits = bits[order]
        ends = np.cumsum(per_cohort)
        for j in np.nonzero(per_cohort)[0]:
            block = sorted_bits[ends[j] - per_cohort[j] : ends[j]]
            self.state["ones"][j] += column_popcount(block, k)

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
        from scipy import sparse  # imported here: keeps `ldptel` start-up fast
        from scipy.optimize import nnls

        mech = self.mech
        n = self.n
        C = len(mech.candidates)
        if n == 0:
            zeros = np.zeros(C)
            return FrequencyEstimate(n=0, counts=zeros, std_error=zeros.copy(),
                                     labels=list(mech.candidates), normalized=zeros.copy())
        n_j = self.state["cohort_n"].astype(np.float64)
        live = n_j > 0
        X = mech.design_matrix()[live]  # (m', k, C) boolean
        n_j = n_j[live]
        ones = self.state["ones"][live].astype(np.float64)
        t = self.bit_estimates()[live]  # (m', k)
        m_live, k = t.shape
        rate = np.clip(ones / n_j[:, None], mech.p_star, mech.q_star)
        mean_rate = rate.mean(axis=1)
        w = 1.0 / (n_j * mean_rate * (1 - mean_rate))  # WLS weight per cohort
        sigma = n_j[:, None] * rate * (1 - rate) / mech.bit_scale**2  # Var t_jb
        a = n_j / n
        c = w * a

        Xs = sparse.csr_matrix(X.reshape(-1, C).astype(np.float64))  # rows (cohort, bit)

        def gram(row_weights: np.ndarray) -> sparse.csr_matrix:
            return (Xs.T @ sparse.diags(row_weights) @ Xs).tocsr()

        G = gram(np.repeat(c * a, k)).toarray()
        G_inv = np.linalg.pinv(G, hermitian=True)
        counts = G_inv @ (Xs.T @ (np.repeat(c, k) * t.reshape(-1)))
        meat = gram(np.repeat(c**2, k) * sigma.reshape(-1))

        D = sparse.diags(np.clip(counts, 0, n))
        P = sparse.csr_matrix((C, C))
        for j in range(m_live):  # a loop over cohorts, not reports
            Xj = Xs[j * k : (j + 1) * k]
            S_j = (Xj.T @ Xj).tocsr()
            P = P + c[j] ** 2 * (S_j @ D @ S_j)
        S_bar = gram(np.repeat(c, k))
        m_all = mech.cohorts
        Q = P / m_all - (S_bar @ D @ S_bar) / m_all**2

        # diag(G⁻¹ B G⁻¹) for B = meat, Q in one product (G⁻¹ symmetric)
        both = G_inv @ np.hstack([meat.toarray(), Q.toarray()])
        var_noise = (both[:, :C] * G_inv).sum(axis=1)
        var_split = (both[:, C:] * G_inv).sum(axis=1)

        # NNLS on the C×C square root of the normal equations: ‖Rβ − z‖² = βᵀGβ − 2βᵀg + const
        evals, evecs = np.linalg.eigh(G)
        keep = evals > evals.max() * 1e-12
        R = np.sqrt(evals[keep])[:, None] * evecs[:, keep].T
        z = (evecs[:, keep].T @ (G @ counts)) / np.sqrt(evals[keep])
        fit, _ = nnls(R, z, maxiter=50 * C)
        se = np.sqrt(np.maximum(var_noise + np.maximum(var_split, 0), 0))
        return FrequencyEstimate(n=n, counts=counts, std_error=se,
                                 labels=list(mech.candidates), normalized=fit)
