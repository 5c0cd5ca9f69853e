"""Std errors of hierarchical-histogram ranges in closed form over the tree levels
(``RangeHierarchical.range_variance``): no weight vector over the nodes is ever formed.

A range's consistent answer is R̂ = a_0·N + Σ_{ℓ,u} a_{ℓ,u}·x̂_{ℓ,u}, a = α·Z where Z comes from
the adjoint of the consistency passes (``RangeHierarchical.consistent_leaves``):

- top-down part: fbar = 1 on nodes inside the range, 0 outside, and on its ≤ 2 partial nodes per
  level g(p) = Σ_children γ_c·fbar_c; a node's own weight is fbar_c − g(parent) — zero unless the
  parent is partial — and at the top level fbar_u − a_0, a_0 = Σ_u γ_u·fbar_u;
- bottom-up part: Z_c = own_c + β_parent·Z_parent.

So Z is constant on runs of nodes ("pieces"): a level's pieces are its parent level's, widened to
their children and multiplied by β, with the children of the ≤ 2 partial parents (and the last
node of the level, whose β may differ) split off. Per piece [s, e) of level ℓ, the sums the
variance needs are Z·Σα, Z²·Σα², Z·Σn_tα, Z²·Σn_tα² from prefix sums over the level's nodes, so a
range costs O(Σ_ℓ pieces_ℓ) = O(H²·B) at most (O(H²) for a single value), whatever d.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.mechanisms.kernels import parallel
from ldptel.mechanisms.kernels.compiled import kernel

MIN_CHUNK = 1 << 14  # ranges per thread, at least


@kernel
def _fbar(u, ell, lo, hi, widths, nodes, d, part_node, part_val):  # pragma: no cover - compiled
    """fbar of node u at level ell: 1 inside, 0 outside, the stored value if partial."""
    w = widths[ell]
    start = u * w
    end = min((u + 1) * w, d) - 1
    if end < lo or start > hi:
        return 0.0
    if lo <= start and end <= hi:
        return 1.0
    if part_node[ell, 0] == u:
        return part_val[ell, 0]
    return part_val[ell, 1]


@kernel
def _one(lo, hi, H, B, d, widths, nodes, offs, beta, gamma, pref, p, q, is_grr, n,
         part_node, part_val, ps, pe, pz, qs, qe, qz):  # pragma: no cover - compiled
    # 1. partial nodes bottom-up: fbar(p) = g(p) = Σ_children γ_c fbar_c
    for ell in range(H - 1, -1, -1):
        w = widths[ell]
        for side in range(2):
            u = (lo if side == 0 else hi) // w
            part_node[ell, side] = -1
            start, end = u * w, min((u + 1) * w, d) - 1
            if ell == H - 1 or (lo <= start and end <= hi):
                continue
            if side == 1 and part_node[ell, 0] == u:
                continue
            g = 0.0
            for c in range(u * B, min(u * B + B, nodes[ell + 1])):
                f = _fbar(c, ell + 1, lo, hi, widths, nodes, d, part_node, part_val)
                g += gamma[offs[ell + 1] + c] * f
            part_node[ell, side] = u
            part_val[ell, side] = g
    a0 = 0.0
    for u in range(nodes[0]):
        a0 += gamma[offs[0] + u] * _fbar(u, 0, lo, hi, widths, nodes, d, part_node, part_val)
    total = 0.0
    count = 0  # pieces of the current level in ps, pe, pz
    for ell in range(H):
        m = nodes[ell]
        nq = 0
        if ell == 0:
            for u in range(m):
                f = _fbar(u, 0, lo, hi, widths, nodes, d, part_node, part_val)
                qs[nq], qe[nq], qz[nq] = u, u + 1, f - a0
                nq += 1
        else:
            for i in range(count):
                s, e, z = ps[i], pe[i], pz[i]
                u = s
                while u < e:  # a partial parent, or the run up to the next one (or the piece end)
                    nxt = e
                    for side in range(2):
                        pp = part_node[ell - 1, side]
                        if pp >= u and pp < nxt:
                            nxt = pp
                    if nxt > u:  # inherited run [u, nxt): β is that of full nodes but for the last
                        bz = beta[offs[ell - 1] + u] * z
                        qs[nq], qe[nq], qz[nq] = u * B, min(nxt * B, m), bz
                        nq += 1
                        u = nxt
                        continue
                    gp = part_val[ell - 1, 0] if part_node[ell - 1, 0] == u else part_val[ell - 1, 1]
                    bz = beta[offs[ell - 1] + u] * z
                    for c in range(u * B, min(u * B + B, m)):
                        f = _fbar(c, ell, lo, hi, widths, nodes, d, part_node, part_val)
                        qs[nq], qe[nq], qz[nq] = c, c + 1, f - gp + bz
                        nq += 1
                    u += 1
        # split off the level's last node (its β may differ), merge equal neighbours
        count = 0
        for i in range(nq):
            s, e, z = qs[i], qe[i], qz[i]
            if s >= e:
                continue
            split_last = e == m and e - s > 1
            e1 = e - 1 if split_last else e
            if count > 0 and pz[count - 1] == z and pe[count - 1] == s and e1 < m:
                pe[count - 1] = e1
            else:
                ps[count], pe[count], pz[count] = s, e1, z
                count += 1
            if split_last:
                ps[count], pe[count], pz[count] = e - 1, e, z
                count += 1
        # 2. the level's sums and its variance term
        base = offs[ell] + ell  # prefix arrays have nodes + 1 entries per level
        sq = A = nsq = na = 0.0
        for i in range(count):
            s, e, z = base + ps[i], base + pe[i], pz[i]
            sq += z * z * (pref[1, e] - pref[1, s])
            A += z * (pref[0, e] - pref[0, s])
            na += z * (pref[2, e] - pref[2, s])
            nsq += z * z * (pref[3, e] - pref[3, s])
        pl, ql = p[ell], q[ell]
        if is_grr[ell]:
            lvl = n * (ql * sq - ql * ql * A * A) + (pl - ql) * nsq - 2 * ql * (pl - ql) * A * na
        else:
            lvl = n * ql * (1 - ql) * sq + (pl * (1 - pl) - ql * (1 - ql) + (pl - ql) ** 2) * nsq
        total += H / (pl - ql) ** 2 * lvl
    return total, a0


@kernel
def _many(lo, hi, H, B, d, widths, nodes, offs, beta, gamma, pref, p, q, is_grr, n, cap,
          out_var, out_a0):  # pragma: no cover - compiled
    part_node = np.full((H, 2), -1, dtype=np.int64)
    part_val = np.zeros((H, 2))
    ps = np.zeros(cap, dtype=np.int64)
    pe = np.zeros(cap, dtype=np.int64)
    qs = np.zeros(cap, dtype=np.int64)
    qe = np.zeros(cap, dtype=np.int64)
    pz, qz = np.zeros(cap), np.zeros(cap)
    for i in range(lo.size):
        out_var[i], out_a0[i] = _one(lo[i], hi[i], H, B, d, widths, nodes, offs, beta, gamma,
                                     pref, p, q, is_grr, n, part_node, part_val, ps, pe, pz, qs, qe, qz)


def level_sums(lo: np.ndarray, hi: np.ndarray, tree: dict[str, Any], pref: np.ndarray, n: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """(Σ_ℓ H/(p_ℓ − q_ℓ)²·L_ℓ, a_0) of every range [lo_i, hi_i]; ``tree`` holds the int64
    arrays widths, nodes, offs (level ℓ's nodes at offs[ℓ]..offs[ℓ+1]), the flat float64 β, γ,
    the per-level p, q, is_grr and the ints H, B, d; ``pref`` (4, total nodes + H) the per-level
    prefix sums of α, α², n_t·α, n_t·α² (each level's nodes + 1 entries)."""
    lo = np.ascontiguousarray(lo, dtype=np.int64)
    hi = np.ascontiguousarray(hi, dtype=np.int64)
    var, a0 = np.zeros(lo.size), np.zeros(lo.size)
    t = tree
    cap = int(t["nodes"][0]) + int(t["H"]) * (3 * int(t["B"]) + 8) + 8  # pieces per level, at most

    def part(i: int, j: int) -> None:  # each chunk writes its own slice
        _many(lo[i:j], hi[i:j], int(t["H"]), int(t["B"]), int(t["d"]), t["widths"], t["nodes"], t["offs"],
              t["beta"], t["gamma"], pref, t["p"], t["q"], t["is_grr"], float(n), cap, var[i:j], a0[i:j])

    parallel.run(part, parallel.chunks(lo.size, 1.0, MIN_CHUNK))
    return var, a0
