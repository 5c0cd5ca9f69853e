"""Heavy-hitter decoder: a table of report counts per level, and the prefix-tree walk.

State. ``counts[j, k, y]``: reports of level j, pool index k and value y (int32, J·K·g cells,
at most 32 MiB, see ``ldptel.mechanisms.heavy_hitters``) and ``n``: a fixed size whatever
the number of reports, merged by addition like every other accumulator. ``to_bytes`` stores the
non-zero cells only while they are fewer than half (a commit's delta of a few thousand reports
is a few kB, so the store's size-tiered folding rewrites the full table O(log N) times, not on
every commit). A prefix's support C_j(u) = Σ_k counts[j, k, H_{s_jk}(key(u))] costs K lookups
(``hashing.pool_support``), not one per report.

Collision pairs. The std error needs P2_j = Σ_k Σ_v n_{kv}(n_{kv} − 1) (same-seed, same-prefix
device pairs). Two reports of seed k are equal w.p. a = p² + (g−1)q'² (q' = (1−p)/(g−1)) if
their prefixes hash alike, else b = 2pq' + (g−2)q'²; distinct prefixes hash alike w.p. 1/g and
a + (g−1)b = 1, so with S_k = Σ_y counts[j, k, y]² and n_k = Σ_y counts[j, k, y]

    E[S_k] = n_k + n_k(n_k − 1)/g + (a − 1/g)·P2_k,   a − 1/g = (p − q)²·g/(g − 1),

and P̂2_j = Σ_k (S_k − n_k − n_k(n_k − 1)/g)·(g − 1)/(g(p − q)²) is unbiased (``level_pairs``,
clipped at 0). For a prefix u of level count c the pairs of u itself are left out:
P2_j(u) ≈ P̂2_j − c(c − 1)/K (u's devices spread uniformly over the K seeds).

Walk. Level j (0-based) holds n_j reports; Ĉ_j(u) = (C_j(u) − n_j q)/(p − q) with null variance
V_j = n_j·Var* + P̂2_j/(g − 1). Level 0 evaluates all 2^{b_1} prefixes; every later level
evaluates only the children of the previous level's survivors (width · 2^{b_j − b_{j−1}} at
most; children that would put a NUL inside the string are pruned). Thresholds: without
collisions a null support count is exactly Binomial(n_j, q). The collision part is lumpy: a null
prefix meets a heavy prefix v at the ≈ Poisson(λ = K/g) seeds where their hashes agree, each
adding the ≈ n_v/K devices of v at that seed; so it is modelled as κ(Poisson(λ) − λ) with κ²λ =
(p − q)²·P̂2/(g − 1) (λ = |E|·K/g over pooled levels; one dominant v is the most skewed case),
and the two tails are combined in quadrature:
t(β) = n q + √(d_olh² + d_coll²), d_olh = Q_{Bin(n, q)}(1 − β) − n q, d_coll = κ(Q_{Pois(λ)}(1 − β) − λ)
(the exact binomial test when P̂2 = 0; measured on five heavy strings with K = 2048, where the
collision part is 23% of a null's variance, P(C > t(10⁻³)) = 1.1·10⁻³, and conservative, 6·10⁻⁴,
with K = 64). A candidate survives level j if C_j(u) > t(1/(2·F_j)),
F_j the level's fan-out 2^{b_j − b_{j−1}} (z ≈ 2.9 at F = 256): a null survivor then has ½
surviving null child on average, so lineages of noise die out geometrically; and only the
``width`` largest estimates survive. A survivor holding a complete zero byte is a whole string
(the terminator fixes all later bits) and leaves the walk: every deeper level's reports then
estimate that same string, so it is estimated from the pooled levels after the one that selected
it (the set E: C_E = Σ_{j∈E} C_j, n_E = Σ n_j, V_E = Σ V_j; leaving the selecting level out
keeps its selection from biasing the estimate). The last level's candidates are estimated from
that level alone. A final candidate is reported iff C_E > t(α/m), m the number of final
candidates tested (Bonferroni: at most α noise strings reported per decode on average).

Reported count (all devices): N̂ = Ĉ_E·N/n_E, with
Var = (N/n_E)²·[(c p(1−p) + (n_E − c) q(1−q))/(p − q)² + Σ_{j∈E} P2_j(u)/(g − 1)
                + n_E f(1−f)(N − n_E)/(N − 1)],
c = clip(Ĉ_E, 0, n_E), f = c/n_E, c_j = c·n_j/n_E in P2_j(u): the OLH noise, the pool's
collision term, and the hypergeometric variance of the string's count in the level sample.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.mechanisms import hashing
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.estimates import FrequencyEstimate
from ldptel.mechanisms.heavy_hitters import HeavyHitters, prefix_rows

NULL_OFFSPRING = 0.5  # expected surviving null children of a null survivor (< 1: noise dies out)
SPARSE_KEYS = ("cells", "hits")  # to_bytes of a sparse table: flat indices and their counts


@dataclass
class HeavyHitterEstimate(FrequencyEstimate):
    """Heavy strings (``labels``) with counts scaled to all devices, std errors and 95% CIs;
    ``z_scores`` = Ĉ_E/√V_E, ``p_threshold`` = α/m (the per-candidate null tail),
    ``levels_used`` = |E| per string,
    ``candidates`` = candidates evaluated per level."""

    z_scores: np.ndarray = None  # type: ignore[assignment]
    p_threshold: float = float("nan")
    levels_used: np.ndarray = None  # type: ignore[assignment]
    candidates: list[int] = field(default_factory=list)

    def items(self) -> list[dict[str, Any]]:
        rows = super().items()
        for i, row in enumerate(rows):
            row["z_score"] = float(self.z_scores[i])
            row["levels_used"] = int(self.levels_used[i])
        return rows


class HeavyHitterAccumulator(Accumulator):
    mechanism_name = "heavy_hitters"
    mech: HeavyHitters

    def empty(self) -> dict[str, np.ndarray]:
        m = self.mech
        return {"counts": np.zeros((m.levels, m.pool_size, m.g), dtype=np.int32)}

    def add_columns(self, columns: dict[str, Any], count: int) -> None:
        m = self.mech
        m.validate_columns(columns, count)  # a stray index would land in another level's cells
        cell = (columns["levels"] * m.pool_size + columns["seed_indices"]) * m.g + columns["values"]
        np.add.at(self.state["counts"].reshape(-1), cell, 1)

    def fingerprint(self) -> str:
        """As ``Accumulator.fingerprint`` without ``width``: a decode setting, not the state's."""
        params = {k: v for k, v in self.mech.public_params().items() if k != "width"}
        return json.dumps(params, sort_keys=True, default=str)

    # --- storage: the non-zero cells of a sparse table ----------------------------------------
    def stored_nbytes(self) -> int:
        """The sparse size while fewer than half the cells are non-zero (``to_bytes``)."""
        nonzero = int(np.count_nonzero(self.state["counts"]))
        return min(self.state["counts"].nbytes, 8 * nonzero) + 8

    def to_bytes(self) -> bytes:
        counts = self.state["counts"]
        flat = counts.reshape(-1)
        cells = np.flatnonzero(flat)
        if 2 * cells.size >= flat.size:
            return super().to_bytes()
        buf = io.BytesIO()
        stamp = np.frombuffer(self.fingerprint().encode(), dtype=np.uint8)
        np.savez(buf, n=self.state["n"], cells=cells.astype(np.uint32), hits=flat[cells],
                 _mechanism=stamp)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, mech: Mechanism, data: bytes) -> HeavyHitterAccumulator:
        if not isinstance(mech, HeavyHitters):
            raise TypeError(f"a heavy-hitter state needs a HeavyHitters mechanism, got {mech!r}")
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            if not all(k in stored for k in SPARSE_KEYS):
                acc = super().from_bytes(mech, data)
                assert isinstance(acc, cls)
                return acc.checked_total()
            acc = cls(mech)
            acc.check_stored(stored)
            cells, hits, n = stored["cells"], stored["hits"], stored["n"]
        flat = acc.state["counts"].reshape(-1)
        if n.shape != (1,) or cells.shape != hits.shape or cells.ndim != 1 or \
                (cells.size and int(cells.max()) >= flat.size):
            raise ValueError(f"stored state does not match {mech!r} (sparse cells)")
        flat[cells.astype(np.int64)] = hits
        acc.state["n"] = n.astype(np.int64)
        return acc.checked_total()

    def checked_total(self) -> HeavyHitterAccumulator:
        """``self`` if its report count n equals the table's total (every report is one cell),
        else ``ValueError``: a stored state that disagrees with itself is refused, not decoded."""
        total = int(self.state["counts"].sum(dtype=np.int64))
        if int(self.state["n"][0]) != total:
            raise ValueError(f"stored heavy-hitter state counts n = {int(self.state['n'][0])} "
                             f"reports but its table holds {total}")
        return self

    # --- decoding ---------------------------------------------------------------------------
    def level_pairs(self) -> np.ndarray:
        """P̂2_j per level (float64, clipped at 0): the estimated same-seed, same-prefix device
        pairs (module docstring)."""
        m = self.mech
        t = self.state["counts"].astype(np.float64)
        n_k = t.sum(axis=2)
        excess = np.square(t).sum(axis=2) - n_k - n_k * (n_k - 1) / m.g
        return cast("np.ndarray", np.maximum(excess.sum(axis=1) * (m.g - 1) / (m.g * (m.p - m.q) ** 2), 0.0))

    def estimate(self, k: int | None = None, alpha: float = 0.05) -> HeavyHitterEstimate:
        """Walk the prefix tree; the heavy strings sorted by count (the top ``k`` if given)."""
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        return _Walk(self.mech, self.state, self.level_pairs()).run(k, alpha)


class _Walk:
    """One decode: per level the pool's hash parameters, count table and null variance."""

    def __init__(self, mech: HeavyHitters, state: dict[str, np.ndarray], pairs: np.ndarray) -> None:
        self.mech = mech
        self.table = state["counts"]
        self.n_level = self.table.sum(axis=(1, 2), dtype=np.int64)
        # every report is one cell: N is the table's total, so n_E ≤ N whoever filled the table
        # (with N = state n, a table filled by add_columns alone had N = 0 < n_E: the
        # finite-population term n_E f(1 − f)(N − n_E)/(N − 1) went negative, √ gave NaN)
        self.N = int(self.n_level.sum())
        a, b = hashing.seed_params(mech.pool.reshape(-1))
        self.a, self.b = a.reshape(mech.pool.shape), b.reshape(mech.pool.shape)
        self.pairs = pairs
        # V_j: null variance of Ĉ_j (OLH noise + the pool's collision term)
        self.null_var = self.n_level * mech.variance_star() + mech.pool_variance(pairs)
        self.candidates: list[int] = []

    def support(self, level: int, rows: np.ndarray) -> np.ndarray:
        """C_j(u) for the level-``level`` prefixes of ``rows``."""
        if rows.shape[0] == 0 or self.n_level[level] == 0:
            return np.zeros(rows.shape[0], dtype=np.int64)
        return hashing.pool_support(self.a[level], self.b[level], self.table[level],
                                    self.mech.keys(rows, level))

    def threshold(self, beta: float, n: np.ndarray | int, pairs: np.ndarray | float,
                  n_levels: np.ndarray | int = 1) -> np.ndarray:
        """t(β): the support a null prefix exceeds w.p. ≈ β (module docstring)."""
        from scipy.stats import binom, poisson  # imported here: keeps `ldptel` start-up fast

        mech = self.mech
        n = np.asarray(n, dtype=np.float64)
        d_olh = binom.isf(beta, n, mech.q) - n * mech.q
        lam = np.asarray(n_levels, dtype=np.float64) * mech.pool_size / mech.g
        coll_var = (mech.p - mech.q) ** 2 * mech.pool_variance(pairs)  # in support units
        d_coll = np.sqrt(coll_var / lam) * (poisson.isf(beta, lam) - lam)
        return n * mech.q + np.sqrt(d_olh ** 2 + d_coll ** 2)

    def extend(self, parents: np.ndarray, level: int) -> np.ndarray:
        """All children of ``parents`` at ``level`` (the level's new bits enumerated), without
        children that put a complete zero byte before a non-zero bit (a NUL inside a string)."""
        mech = self.mech
        lo = int(mech.bits[level - 1]) if level else 0
        hi = int(mech.bits[level])
        s = hi - lo
        base = np.zeros_like(parents)
        base[:, : (lo + 7) // 8] = prefix_rows(parents, lo)
        rows = np.repeat(base, 1 << s, axis=0)
        # the s ≤ 16 new bits, MSB first, at bit offset lo % 8 of the 3 bytes from lo // 8
        window = np.tile(np.arange(1 << s, dtype=np.int64), parents.shape[0]) << (24 - lo % 8 - s)
        for i in range(min(3, rows.shape[1] - lo // 8)):
            rows[:, lo // 8 + i] |= ((window >> (16 - 8 * i)) & 0xFF).astype(np.uint8)
        pref = prefix_rows(rows, hi)
        full = hi // 8
        zero = pref[:, :full] == 0
        # (a first level of < 8 bits has no complete byte yet: argmax of nothing would raise)
        first = np.where(zero.any(axis=1), zero.argmax(axis=1) if full else 0, pref.shape[1])
        after = np.arange(pref.shape[1])[None, :] > first[:, None]
        valid = ~((pref != 0) & after).any(axis=1)
        return cast("np.ndarray", rows[valid])

    def walk(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tree walk: terminated strings with the level that selected each, and the last
        level's candidates (padded rows)."""
        mech, J = self.mech, self.mech.levels
        term_rows: list[np.ndarray] = []
        term_level: list[np.ndarray] = []
        cands = self.extend(np.zeros((1, mech.max_length), dtype=np.uint8), 0)
        for j in range(J - 1):
            self.candidates.append(int(cands.shape[0]))
            c = self.support(j, cands)
            n = self.n_level[j]
            est = mech.unbiased_counts(c, n)
            beta = NULL_OFFSPRING / (1 << mech.new_bits(j))
            keep = np.flatnonzero(c > self.threshold(beta, n, self.pairs[j]))
            keep = keep[np.argsort(-est[keep], kind="stable")[: mech.width]]
            surv = cands[keep]
            done = (prefix_rows(surv, int(mech.bits[j]))[:, : int(mech.bits[j]) // 8] == 0).any(axis=1)
            term_rows.append(surv[done])
            term_level.append(np.full(int(done.sum()), j, dtype=np.int64))
            cands = self.extend(surv[~done], j + 1)
            if cands.shape[0] == 0:
                break
        self.candidates.extend([0] * (J - len(self.candidates)))
        if cands.shape[0]:
            self.candidates[J - 1] = int(cands.shape[0])
        trows = np.concatenate(term_rows) if term_rows else np.zeros((0, mech.max_length), np.uint8)
        tlev = np.concatenate(term_level) if term_level else np.zeros(0, np.int64)
        return trows, tlev, cands

    def pooled(self, rows: np.ndarray, first: np.ndarray) -> dict[str, np.ndarray]:
        """Per row, sums over its levels E = {j ≥ first}: support C, reports n, null variance V,
        pairs P̂2, Σ n_j² (for the string's own pairs) and |E|."""
        out = {k: np.zeros(rows.shape[0], dtype=np.float64) for k in ("C", "n", "V", "P2", "n2", "E")}
        for j in range(int(first.min(initial=self.mech.levels)), self.mech.levels):
            sel = np.flatnonzero(first <= j)
            if sel.size == 0 or self.n_level[j] == 0:
                continue
            out["C"][sel] += self.support(j, rows[sel])
            out["n"][sel] += self.n_level[j]
            out["V"][sel] += self.null_var[j]
            out["P2"][sel] += self.pairs[j]
            out["n2"][sel] += float(self.n_level[j]) ** 2
            out["E"][sel] += 1
        return out

    def run(self, k: int | None, alpha: float) -> HeavyHitterEstimate:
        mech, J = self.mech, self.mech.levels
        trows, tlev, last = self.walk()
        # final candidates: terminated strings (pooled over the deeper levels) + the last level's;
        # a string terminated at the last level has no level left to estimate it
        rows = np.concatenate((trows, last))
        first = np.concatenate((tlev + 1, np.full(last.shape[0], J - 1, np.int64)))
        rows, first = rows[first < J], first[first < J]
        s = self.pooled(rows, first)
        level_alpha = alpha / max(rows.shape[0], 1)
        nE = s["n"]
        # rows of one ``first`` share n_E, P̂2 and |E|: one tail quantile per group, not per row
        _, rep, group = np.unique(first, return_index=True, return_inverse=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            est = mech.unbiased_counts(s["C"], nE)
            zs = est / np.sqrt(s["V"])
            t = self.threshold(level_alpha, nE[rep], s["P2"][rep], s["E"][rep])[group]
            hit = np.flatnonzero((nE > 0) & (s["C"] > t))
        hit = hit[np.argsort(-zs[hit], kind="stable")]
        N, nh = self.N, nE[hit]
        ratio = N / nh
        c = np.clip(est[hit], 0, nh)
        f = c / nh
        own = (c * c * s["n2"][hit] / (nh * nh) - c) / mech.pool_size  # Σ_j c_j(c_j − 1)/K
        var_sub = (mech.count_variance(c, nh) + mech.pool_variance(np.maximum(s["P2"][hit] - own, 0))
                   + nh * f * (1 - f) * (N - nh) / max(N - 1, 1))
        counts = est[hit] * ratio
        se = np.sqrt(var_sub) * ratio
        order = np.argsort(-counts, kind="stable")[: (k if k is not None else None)]
        hit, counts, se = hit[order], counts[order], se[order]
        return HeavyHitterEstimate(
            n=N, counts=counts, std_error=se, labels=[mech.decode_row(r) for r in rows[hit]],
            normalized=np.clip(counts, 0, N), z_scores=zs[hit], p_threshold=level_alpha,
            levels_used=(J - first)[hit], candidates=self.candidates)
