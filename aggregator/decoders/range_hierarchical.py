"""Hierarchical range decoder: per-level support counts C_{ℓ,u} (GRR: reports equal to u; OLH: the
compiled kernel against the level's node keys, at accumulation time since the nodes are known)
and per-level report counts n_ℓ, all additive. Estimate: x̂_{ℓ,u} = H·(C_{ℓ,u} − n_ℓ q_ℓ)/(p_ℓ −
q_ℓ), then the least-squares consistency of ``RangeHierarchical.consistent_leaves``; std errors
from ``RangeHierarchical.range_variance`` with the Norm-Sub leaf counts plugged in."""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.mechanisms.olh import OLH
from ldptel.mechanisms.postprocess import norm_sub
from ldptel.mechanisms.range_hierarchical import RangeHierarchical
from ldptel.mechanisms.ranges import RangeEstimate


class RangeHierarchicalAccumulator(Accumulator):
    mechanism_name = "range_hierarchical"
    mech: RangeHierarchical

    def empty(self) -> dict[str, np.ndarray]:
        return {"support": np.zeros(int(self.mech.offsets[-1]), dtype=np.int64),
                "level_n": np.zeros(self.mech.H, dtype=np.int64)}

    def add_columns(self, columns: dict[str, Any], count: int) -> None:
        # numba loads on the first decode: ldptel.aggregator imports without it
        from ldptel.mechanisms.kernels.olh import olh_support

        m = self.mech
        lev = columns["levels"]
        self.state["level_n"] += np.bincount(lev, minlength=m.H)
        for ell, o in enumerate(m.oracles):  # per level, not per report
            sel = np.flatnonzero(lev == ell)
            if not sel.size:
                continue
            vals = columns["values"][sel]
            if isinstance(o, OLH):
                c = olh_support(columns["seeds"][sel], vals, o.g, o.keys64)
            else:
                c = np.bincount(vals, minlength=o.domain_size)
            self.state["support"][m.offsets[ell] : m.offsets[ell + 1]] += c

    def raw_levels(self) -> list[np.ndarray]:
        """x̂_ℓ for ℓ = 1..H (HT-scaled unbiased node counts)."""
        m = self.mech
        sup, ln = self.state["support"], self.state["level_n"]
        return [o.unbiased_counts(sup[m.offsets[i] : m.offsets[i + 1]], ln[i], m.H)
                for i, o in enumerate(m.oracles)]

    def estimate(self) -> RangeEstimate:
        m, n = self.mech, self.n
        counts = m.consistent_leaves(self.raw_levels(), float(n))
        plug = norm_sub(counts, n)
        v = np.arange(m.domain_size)
        var = m.range_variance(v, v, plug, n)  # closed form over the levels: O(H²) per value
        return RangeEstimate(n=n, counts=counts, std_error=np.sqrt(np.maximum(var, 0.0)),
                             normalized=plug, range_variance=m.range_variance, plug_in=plug,
                             method="hierarchical")
