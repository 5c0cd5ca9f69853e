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
        from scipy.optimize import nnls  # imported here: keeps `ldptel` start-up fast

        mech = self.mech
        n = self.n
        X = mech.design_matrix().astype(np.float64)  # (m, k, C)
        C = X.shape[2]
        if n == 0:
            zeros = np.zeros(C)
            return FrequencyEstimate(n=0, counts=zeros, std_error=zeros.copy(),
                                     labels=list(mech.candidates), normalized=zeros.copy())
        n_j = self.state["cohort_n"].astype(np.float64)
        live = n_j > 0
        X, n_j = X[live], n_j[live]
        ones = self.state["ones"][live].astype(np.float64)
        t = self.bit_estimates()[live]  # (m', k)
        m_live, k = t.shape
        A = X * (n_j / n)[:, None, None]  # (m', k, C)
        rate = np.clip(ones / n_j[:, None], mech.p_star, mech.q_star)
        mean_rate = rate.mean(axis=1)
        w = 1.0 / (n_j * mean_rate * (1 - mean_rate))  # per cohort
        sigma = n_j[:, None] * rate * (1 - rate) / mech.bit_scale**2  # Var t_jb

        A2 = A.reshape(-1, C)
        WA2 = A2 * np.repeat(w, k)[:, None]
        G_inv = np.linalg.pinv(WA2.T @ A2)
        counts = G_inv @ (WA2.T @ t.reshape(-1))
        meat = (WA2 * sigma.reshape(-1)[:, None]).T @ WA2
        var_noise = ((G_inv @ meat) * G_inv).sum(axis=1)  # diag(G⁻¹ meat G⁻¹), G⁻¹ symmetric

        # random split of devices over cohorts: M_j = L_j X_j, L_j = G⁻¹ A_jᵀ W_j
        m_all = mech.cohorts
        m_sum = np.zeros((C, C))
        m_sq = np.zeros((C, C))
        for j in range(m_live):  # a loop over cohorts, not reports
            M = G_inv @ (WA2[j * k : (j + 1) * k].T @ X[j])
            m_sum += M
            m_sq += M * M
        spread = m_sq / m_all - (m_sum / m_all) ** 2
        var_split = spread @ np.clip(counts, 0, n)

        sw = np.sqrt(w)[:, None, None]
        fit, _ = nnls((A * sw).reshape(-1, C), (t * sw[:, :, 0]).reshape(-1), maxiter=50 * C)
        se = np.sqrt(np.maximum(var_noise + np.maximum(var_split, 0), 0))
        return FrequencyEstimate(n=n, counts=counts, std_error=se,
                                 labels=list(mech.candidates), normalized=fit)
