"""Range queries through a B-ary tree of frequency oracles (hierarchical histograms; the baseline
of Cormode, Kulkarni, Srivastava, VLDB 2019), with least-squares consistency.

Tree. H = smallest height with B^H ≥ d; level ℓ = 1..H has d_ℓ = ⌈d/B^{H−ℓ}⌉ nodes, node
u = v // B^{H−ℓ} holding the values [u·B^{H−ℓ}, (u+1)·B^{H−ℓ}); level H is the values themselves,
the root (level 0) is the known total N. Each level has its own oracle over its d_ℓ nodes: GRR if
d_ℓ < 3e^ε + 2, else OLH (the lower-variance one, ``chooser.local_oracle``).

Device: samples one level uniformly (probability 1/H) and reports its node there with the level's
oracle at the full ε: (level − 1, value[, seed]).

Aggregator: x̂_{ℓ,u} = H·(C_{ℓ,u} − n_ℓ q_ℓ)/(p_ℓ − q_ℓ) is unbiased for the node count (the H undoes
the level sampling). Consistency (least squares with per-level variances v_ℓ = H·Var*_ℓ, root
fixed at N), the two-pass algorithm of Hay et al. (2010) with weights: bottom-up
z_u = (V_u·x̂_u + v_ℓ·Σ_children z_c)/(V_u + v_ℓ), V_u = Σ_children Var z_c,
Var z_u = V_u·v_ℓ/(V_u + v_ℓ) (leaves: z = x̂, Var z = v_H); top-down
f_c = z_c + (Var z_c/Σ_siblings Var z)·(f_parent − Σ_siblings z). The result is linear:
any range R̂ = a_0·N + Σ_{ℓ,u} a_{ℓ,u}·x̂_{ℓ,u}, the weights a those of the two passes' adjoint
on the range's leaf indicator — constant on O(H·B) runs of nodes per level, so the sums below are
taken in closed form over the levels (``ldptel.mechanisms.kernels.ranges``), never over the nodes.
A device contributes Y = H·Σ_u a_{ℓ,u}(S_u − q)/(p − q) at
its level (S_u = 1 if its report supports node u), so exactly (devices are independent):

    Var[R̂] = Σ_ℓ H/(p_ℓ − q_ℓ)²·L_ℓ − c_R(1 − a_0)² − (N − c_R)·a_0²,
    GRR: L_ℓ = N(q‖a_ℓ‖² − q²A_ℓ²) + (p − q)·Σ_t n_t a_t² − 2q(p − q)·A_ℓ·Σ_t n_t a_t,
    OLH: L_ℓ = N q(1−q)‖a_ℓ‖² + (p(1−p) − q(1−q) + (p − q)²)·Σ_t n_t a_t²,

with A_ℓ = Σ_u a_{ℓ,u}, n_t the number of devices in node t (the OLH line takes the hash's
supports of distinct nodes as uncorrelated, exact for a 3-wise independent hash).

Default B: the minimizer over B = 2..16 of the variance bound without consistency,
H·2(B − 1)·Σ_ℓ Var*_ℓ (≤ 2(B − 1) nodes per level, each of variance N·H·Var*_ℓ); B = 4 at d = 1024.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from ldptel.mechanisms.base import Mechanism, check_int
from ldptel.mechanisms.checks import check_lengths, out_of_range, per_level, reject_first
from ldptel.mechanisms.chooser import local_oracle
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.grr import GRR
from ldptel.mechanisms.olh import OLH
from ldptel.mechanisms.range_haar import range_columns
from ldptel.proto import RangePayload, ReportBatch


def tree_shape(domain_size: int, branching: int) -> tuple[int, list[int], list[int]]:
    """(H, values per node per level, nodes per level) for levels 1..H."""
    H, cover = 0, 1
    while cover < domain_size:
        cover *= branching
        H += 1
    H = max(H, 1)
    widths = [branching ** (H - ell) for ell in range(1, H + 1)]
    return H, widths, [-(-domain_size // w) for w in widths]


def choose_branching(epsilon: float, domain_size: int, candidates: range = range(2, 17)) -> int:
    """argmin_B H·2(B − 1)·Σ_ℓ Var*_ℓ (see the module docstring)."""
    best, best_b = math.inf, 2
    for b in candidates:
        if b > max(domain_size, 2):
            break
        H, _, nodes = tree_shape(domain_size, b)
        bound = H * 2 * (b - 1) * sum(local_oracle(epsilon, max(m, 2)).variance_star() for m in nodes)
        if bound < best:
            best, best_b = bound, b
    return best_b


def _sum_groups(x: np.ndarray, branching: int) -> np.ndarray:
    """Sums of consecutive groups of ``branching`` rows (children → parents), any trailing dims."""
    return np.add.reduceat(x, np.arange(0, x.shape[0], branching), axis=0)


class RangeHierarchical(Mechanism):
    """Hierarchical-histogram range mechanism over [0, ``domain_size``), ``branching`` B
    (default chosen by the variance bound)."""

    name = "range_hierarchical"
    payload = "range"

    def __init__(self, epsilon: float, domain_size: int, branching: int | None = None) -> None:
        super().__init__(epsilon, domain_size)
        self.B = (choose_branching(self.epsilon, self.domain_size) if branching is None
                  else check_int(branching, "branching", 2, 1024))
        self.H, self.widths, self.nodes = tree_shape(self.domain_size, self.B)
        self.oracles = [local_oracle(self.epsilon, m) for m in self.nodes]
        self.offsets = np.concatenate(([0], np.cumsum(self.nodes))).astype(np.int64)
        self.uses_olh = any(isinstance(o, OLH) for o in self.oracles)
        self._consts: tuple[Any, ...] | None = None
        self._tree: dict[str, Any] | None = None

    def variance_star(self) -> float:
        """Per-report variance of one node estimate at the leaf level: H·Var*_H."""
        return self.H * self.oracles[-1].variance_star()

    def count_variance(self, counts: np.ndarray, n: int) -> np.ndarray:
        v = np.arange(self.domain_size)
        return self.range_variance(v, v, counts, n)

    # --- consistency (linear; constants depend only on the tree and the oracles) -------------
    def constants(self) -> tuple[list[Any], list[Any], list[Any]]:
        """Per level (0-based): α (weight of x̂), β (weight of the children's sum), γ (share of
        the parent's correction)."""
        if self._consts is None:
            H, B = self.H, self.B
            v = [H * o.variance_star() for o in self.oracles]
            varz: list[np.ndarray] = [np.empty(0)] * H
            alpha: list[np.ndarray] = [np.empty(0)] * H
            beta: list[np.ndarray] = [np.empty(0)] * H
            varz[H - 1] = np.full(self.nodes[H - 1], v[H - 1])
            alpha[H - 1] = np.ones(self.nodes[H - 1])
            beta[H - 1] = np.zeros(self.nodes[H - 1])
            for ell in range(H - 2, -1, -1):
                V = _sum_groups(varz[ell + 1], B)
                alpha[ell], beta[ell] = V / (V + v[ell]), v[ell] / (V + v[ell])
                varz[ell] = V * v[ell] / (V + v[ell])
            gamma = [varz[0] / varz[0].sum()]
            for ell in range(1, H):
                parent = np.arange(self.nodes[ell]) // B
                gamma.append(varz[ell] / _sum_groups(varz[ell], B)[parent])
            self._consts = (alpha, beta, gamma)
        return self._consts

    def consistent_leaves(self, x: list[np.ndarray], n: float) -> np.ndarray:
        """Least-squares consistent leaf counts from the raw level estimates ``x`` (root = n)."""
        alpha, beta, gamma = self.constants()
        H, B = self.H, self.B
        z = [np.empty(0)] * H
        z[H - 1] = x[H - 1]
        for ell in range(H - 2, -1, -1):
            z[ell] = alpha[ell] * x[ell] + beta[ell] * _sum_groups(z[ell + 1], B)
        f = z[0] + gamma[0] * (n - z[0].sum())
        for ell in range(1, H):
            parent = np.arange(self.nodes[ell]) // B
            f = z[ell] + gamma[ell] * (f - _sum_groups(z[ell], B))[parent]
        return cast("np.ndarray", f)

    def tree_arrays(self) -> dict[str, Any]:
        """The tree and its consistency constants as flat arrays for ``kernels.ranges`` (once)."""
        if self._tree is None:
            _, beta, gamma = self.constants()
            self._tree = {
                "H": self.H, "B": self.B, "d": self.domain_size,
                "widths": np.array(self.widths, dtype=np.int64),
                "nodes": np.array(self.nodes, dtype=np.int64), "offs": self.offsets.astype(np.int64),
                "beta": np.concatenate(beta), "gamma": np.concatenate(gamma),
                "p": np.array([o.p for o in self.oracles]), "q": np.array([o.q for o in self.oracles]),
                "is_grr": np.array([isinstance(o, GRR) for o in self.oracles]),
            }
        return self._tree

    def node_counts(self, counts: np.ndarray) -> list[np.ndarray]:
        """Per-level node counts n_t from per-value counts."""
        c = np.asarray(counts, dtype=np.float64)
        return [np.add.reduceat(c, np.arange(0, c.size, w)) for w in self.widths]

    def range_variance(self, lo: np.ndarray, hi: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
        """Var[R̂] of the consistent answers (module docstring), per-value ``counts`` (true or
        estimated) plugged in for n_t and c_R (clipped to be non-negative); the level sums in
        closed form over the tree (``ldptel.mechanisms.kernels.ranges``: O(H²·B) per range)."""
        from ldptel.mechanisms.kernels.ranges import level_sums  # numba: server side only

        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        c = np.clip(np.asarray(counts, dtype=np.float64), 0, None)
        alpha, _, _ = self.constants()
        pref = []
        for a, nt in zip(alpha, self.node_counts(c), strict=True):
            cols = np.stack((a, a * a, nt * a, nt * a * a))
            pref.append(np.concatenate((np.zeros((4, 1)), np.cumsum(cols, axis=1)), axis=1))
        total, a0 = level_sums(lo, hi, self.tree_arrays(), np.ascontiguousarray(np.hstack(pref)), float(n))
        cum = np.concatenate(([0.0], np.cumsum(c)))
        c_r = np.clip(cum[hi + 1] - cum[lo], 0, n)
        return cast("np.ndarray", total - c_r * (1 - a0) ** 2 - (n - c_r) * a0**2)

    # --- encoding -------------------------------------------------------------------------
    def randomize(self, values: np.ndarray, rng) -> dict[str, Any]:
        n = values.size
        lev = rng.integers(0, self.H, n).astype(np.int64)
        out = np.zeros(n, dtype=np.uint32)
        seeds = np.zeros(n if self.uses_olh else 0, dtype=np.uint32)
        for ell, o in enumerate(self.oracles):  # per level (H ≤ 24), not per report
            sel = np.flatnonzero(lev == ell)
            if not sel.size:
                continue
            cols = o.randomize(values[sel] // self.widths[ell], rng)
            out[sel] = cols["values"]
            if "seeds" in cols:
                seeds[sel] = cols["seeds"]
        return {"levels": lev.astype(np.uint32), "values": out, "seeds": seeds}

    def randomize_one(self, value: int, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        lev = draws.below(self.H)
        cols = self.oracles[lev].randomize_one(value // self.widths[lev], draws)
        return {"levels": [lev], "values": list(cols["values"]),
                "seeds": list(cols.get("seeds", [0])) if self.uses_olh else []}

    def payload_message(self, columns: dict[str, Any]) -> RangePayload:
        return RangePayload(levels=np.asarray(columns["levels"]).tolist(),
                            values=np.asarray(columns["values"]).tolist(),
                            seeds=np.asarray(columns["seeds"]).tolist())

    def columns(self, batch: ReportBatch) -> dict[str, Any]:
        """Every sign bit the (unused) ``signs`` bytes hold is unpacked, for ``validate_columns``
        to refuse."""
        signs = np.unpackbits(np.frombuffer(batch.range.signs, dtype=np.uint8)).astype(bool)
        return range_columns(batch, signs)

    def validate_columns(self, columns: dict[str, Any], count: int) -> None:
        """``count`` levels and values (and seeds iff some level uses OLH); level < H; value <
        d_ℓ (GRR level) or < g (OLH level); no indices or sign bits."""
        why = "the hierarchical method sends none"
        empty = {"indices": why, "signs": why}
        if not self.uses_olh:
            empty["seeds"] = "no level of this tree uses OLH"
        check_lengths(columns, count, ("levels", "values", "seeds") if self.uses_olh
                      else ("levels", "values"), empty)
        lev = columns["levels"]
        limits = np.array([o.g if isinstance(o, OLH) else o.domain_size for o in self.oracles])
        reject_first([out_of_range(lev, self.H, "level", f"H = {self.H}"),
                      out_of_range(columns["values"], per_level(lev, limits), "value")])

    def public_params(self) -> dict[str, Any]:
        return {"method": "hierarchical", "epsilon": self.epsilon, "domain_size": self.domain_size,
                "branching": self.B, "levels": self.H,
                "oracles": [o.name for o in self.oracles]}
