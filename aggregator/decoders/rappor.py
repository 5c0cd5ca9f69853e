"""RAPPOR decoder.

Sufficient statistics: reports per cohort N_j and ones per (cohort, bit) c_jb.
Per-bit estimate of true Bloom-bit counts: t_jb = (c_jb − p*·N_j) / ((1−f)(q−p)).
Model: t_jb ≈ Σ_c X_jbc · n_c · N_j/N (X: the candidates' Bloom patterns per cohort, devices
spread over cohorts uniformly), solved by ``rappor_fit``: candidate selection when the candidates
outnumber the equations, weighted least squares (weights 1/(N_j r̄_j(1−r̄_j)) per cohort) with
sandwich std errors on the selected candidates (per-bit variance Σ_jb = N_j r_jb(1−r_jb)/((1−f)(q−p))²
plus the random cohort split), and the non-negative fit as ``normalized``. Unbiased when the
candidates cover the population.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.aggregator.decoders.rappor_fit import RapporSystem, fit
from ldptel.mechanisms.estimates import FrequencyEstimate
from ldptel.mechanisms.rappor import RAPPOR


class RapporAccumulator(Accumulator):
    mechanism_name = "rappor"
    mech: RAPPOR

    def empty(self) -> dict[str, np.ndarray]:
        m, k = self.mech.cohorts, self.mech.bloom_bits
        return {"cohort_n": np.zeros(m, dtype=np.int64), "ones": np.zeros((m, k), dtype=np.int64)}

    def add_columns(self, columns: dict[str, Any], count: int) -> None:
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
        """The regression of ``rappor_fit``: selection when the candidates outnumber 0.8 × the
        equations (live cohorts × bits), weighted least squares with sandwich std errors on the
        selected ones, the non-negative fit as ``normalized``. Dense algebra is |S|×|S| and
        k×k per cohort only, never the (m·k × C) design."""
        mech, n = self.mech, self.n
        if n == 0:
            zeros = np.zeros(len(mech.candidates))
            return FrequencyEstimate(n=0, counts=zeros, std_error=zeros.copy(),
                                     labels=list(mech.candidates), normalized=zeros.copy())
        result = fit(self.weighted_system(), n)
        return FrequencyEstimate(n=n, counts=result.counts, std_error=result.std_error,
                                 labels=list(mech.candidates), normalized=result.normalized)

    def weighted_system(self) -> RapporSystem:
        """The live cohorts' (N_j > 0) design, bit estimates t_jb, their variances Σ_jb and the
        WLS weights w_j = 1/(N_j r̄_j(1−r̄_j)), r_jb the observed one-rate clipped to [p*, q*]."""
        from scipy import sparse  # imported here: keeps `ldptel` start-up fast

        mech = self.mech
        C = len(mech.candidates)
        n_j = self.state["cohort_n"].astype(np.float64)
        live = n_j > 0
        cohort, bit, cand = mech.design_entries()
        row_of = np.cumsum(live) - 1  # cohort → its index among the live ones
        keep = live[cohort]
        rows = row_of[cohort[keep]] * mech.bloom_bits + bit[keep]
        n_j = n_j[live]
        ones = self.state["ones"][live].astype(np.float64)
        t = self.bit_estimates()[live]  # (m', k)
        rate = np.clip(ones / n_j[:, None], mech.p_star, mech.q_star)
        mean_rate = rate.mean(axis=1)
        w = 1.0 / (n_j * mean_rate * (1 - mean_rate))  # WLS weight per cohort
        a = n_j / self.n
        sigma = n_j[:, None] * rate * (1 - rate) / mech.bit_scale**2  # Var t_jb
        X = sparse.csr_matrix((np.ones(rows.size), (rows, cand[keep])), shape=(n_j.size * mech.bloom_bits, C))
        return RapporSystem(Xs=X,  # rows (live cohort j, bit b), boolean entries
                            t=t.reshape(-1), sigma=sigma.reshape(-1), a=a, c=w * a, k=mech.bloom_bits)
