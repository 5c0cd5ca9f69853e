"""Heavy-hitter decoder: the raw reports per level, and the prefix-tree walk.

State. OLH needs the raw (seed, y) of each report to evaluate candidates that are only known at
decode time, so the state holds the columns ``levels`` (uint16), ``seeds`` (uint32), ``values``
(uint16) and ``n``; ``merge`` concatenates the columns (and adds ``n``) — the concatenation of
report multisets, which is what addition of count vectors is for the other oracles. 8 bytes per
report; ``to_bytes``/``from_bytes`` store the columns with ``np.savez``.

Walk. Level j (0-based) holds n_j reports; Ĉ_j(u) = (C_j(u) − n_j q)/(p − q), null std error
σ_j = √(n_j q(1−q))/(p − q). Level 0 evaluates all 2^{b_1} prefixes; every later level evaluates
only the children of the previous level's survivors (width · 2^{b_j − b_{j−1}} at most; children
that would put a NUL inside the string are pruned). Thresholds use the exact null distribution of
a support count: a report supports a prefix nobody in its level holds w.p. exactly q, so
C_j(u) ~ Binomial(n_j, q) for a null u (the skew-free form of "Ĉ > z·σ"). A candidate survives
level j if P(Binomial(n_j, q) ≥ C_j(u)) < 1/(2·F_j), F_j the level's fan-out 2^{b_j − b_{j−1}}
(z ≈ Φ̄⁻¹(1/(2F_j)), 2.9 at F = 256): a null survivor then has ½ surviving null child on average, so
lineages of noise die out geometrically; and only the ``width`` largest estimates survive.
A survivor holding a complete zero byte is a whole string (the terminator fixes all later bits)
and leaves the walk: every deeper level's reports then estimate that same string, so it is
estimated from the pooled levels after the one that selected it (n_E reports of the set E:
Ĉ_E = Σ_{j∈E} Ĉ_j, C_E ~ Binomial(n_E, q) under the null; leaving the selecting level out keeps
its selection from biasing the estimate). The last level's candidates are estimated from that
level alone. A final candidate is reported iff P(Binomial(n_E, q) ≥ C_E) < α/m, m the number of
final candidates tested (Bonferroni: at most α noise strings reported per decode on average).

Reported count (all devices): N̂ = Ĉ_E·N/n_E, with
Var = (N/n_E)²·[(c p(1−p) + (n_E − c) q(1−q))/(p − q)² + n_E f(1−f)(N − n_E)/(N − 1)],
c = clip(Ĉ_E, 0, n_E), f = c/n_E: the OLH noise plus the hypergeometric variance of the string's
count in the level sample.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.aggregator.result import FrequencyEstimate
from ldptel.client import hashing
from ldptel.client.mechanisms.base import Mechanism
from ldptel.client.mechanisms.heavy_hitters import HeavyHitters, prefix_rows

COLUMNS: dict[str, type] = {"levels": np.uint16, "seeds": np.uint32, "values": np.uint16}
KERNEL_BLOCK = 128  # reports per block of the OLH kernel (keeps the scratch in cache)
NULL_OFFSPRING = 0.5  # expected surviving null children of a null survivor (< 1: noise dies out)


@dataclass
class HeavyHitterEstimate(FrequencyEstimate):
    """Heavy strings (``labels``) with counts scaled to all devices, std errors and 95% CIs;
    ``z_scores`` = Ĉ_E/σ_E, ``p_threshold`` = α/m (the per-candidate binomial tail),
    ``levels_used`` = |E| per string,
    ``candidates`` = candidates evaluated per level."""

    z_scores: np.ndarray = None  # type: ignore[assignment]
    p_threshold: float = float("nan")
    levels_used: np.ndarray = None  # type: ignore[assignment]
    candidates: list[int] = field(default_factory=list)

    def items(self) -> list[dict]:
        rows = super().items()
        for i, row in enumerate(rows):
            row["z_score"] = float(self.z_scores[i])
            row["levels_used"] = int(self.levels_used[i])
        return rows


class HeavyHitterAccumulator(Accumulator):
    mechanism_name = "heavy_hitters"
    mech: HeavyHitters

    def __init__(self, mech: HeavyHitters) -> None:
        self._n = np.zeros(1, dtype=np.int64)
        self._buf: dict[str, np.ndarray] = {k: np.zeros(0, dtype=dt) for k, dt in COLUMNS.items()}
        self._size = 0
        super().__init__(mech)

    # --- state: concatenable report columns -------------------------------------------------
    @property
    def state(self) -> dict[str, np.ndarray]:
        return {"n": self._n, **{k: b[: self._size] for k, b in self._buf.items()}}

    @state.setter
    def state(self, value: dict[str, np.ndarray]) -> None:
        cols: dict[str, np.ndarray] = {
            k: np.asarray(value.get(k, np.zeros(0)), dtype=dt).reshape(-1) for k, dt in COLUMNS.items()}
        sizes = {c.size for c in cols.values()}
        if len(sizes) != 1:
            raise ValueError(f"state columns differ in length: {sorted(sizes)}")
        self._n = np.asarray(value["n"], dtype=np.int64).reshape(1).copy()
        self._buf = {k: c.copy() for k, c in cols.items()}
        self._size = sizes.pop()

    def empty(self) -> dict[str, np.ndarray]:
        return {k: np.zeros(0, dtype=dt) for k, dt in COLUMNS.items()}

    def _append(self, cols: dict[str, np.ndarray]) -> None:
        k = len(cols["levels"])
        need = self._size + k
        cap = self._buf["levels"].size
        if need > cap:
            new_cap = max(need, 2 * cap, 1024)
            for name, buf in self._buf.items():
                grown = np.zeros(new_cap, dtype=buf.dtype)
                grown[: self._size] = buf[: self._size]
                self._buf[name] = grown
        for name, dt in COLUMNS.items():
            self._buf[name][self._size : need] = np.asarray(cols[name]).astype(dt, copy=False)
        self._size = need

    def add_columns(self, columns: dict, count: int) -> None:
        self._append(columns)

    def fingerprint(self) -> str:
        """As ``Accumulator.fingerprint`` without ``width``: a decode setting, not the state's."""
        params = {k: v for k, v in self.mech.public_params().items() if k != "width"}
        return json.dumps(params, sort_keys=True, default=str)

    def merge(self, other: Accumulator) -> Accumulator:
        if type(other) is not type(self):
            raise ValueError(f"cannot merge {type(other).__name__} into {type(self).__name__}")
        self.check_compatible(other.fingerprint())
        self._append(other.state)
        self._n += other.state["n"]
        return self

    @classmethod
    def from_bytes(cls, mech: Mechanism, data: bytes) -> HeavyHitterAccumulator:
        if not isinstance(mech, HeavyHitters):
            raise TypeError(f"a heavy-hitter state needs a HeavyHitters mechanism, got {mech!r}")
        acc = cls(mech)
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            acc.check_stored(stored)
            missing = [k for k in ("n", *COLUMNS) if k not in stored]
            if missing:
                raise ValueError(f"stored state does not match {mech!r} (key {missing[0]!r})")
            value = {k: stored[k] for k in ("n", *COLUMNS)}
        if value["n"].shape != (1,) or any(value[k].ndim != 1 for k in COLUMNS):
            raise ValueError(f"stored state does not match {mech!r} (shapes)")
        acc.state = value
        if acc._size and int(acc.state["levels"].max()) >= mech.levels:
            raise ValueError(f"stored state does not match {mech!r} (levels)")
        return acc

    # --- decoding ---------------------------------------------------------------------------
    def estimate(self, k: int | None = None, alpha: float = 0.05) -> HeavyHitterEstimate:
        """Walk the prefix tree; the heavy strings sorted by count (the top ``k`` if given)."""
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        return _Walk(self.mech, self.state).run(k, alpha)


class _Walk:
    """One decode: the reports sorted by level, the OLH kernel restricted to given keys."""

    def __init__(self, mech: HeavyHitters, state: dict[str, np.ndarray]) -> None:
        self.mech = mech
        self.N = int(state["n"][0])
        lv = state["levels"].astype(np.int64)
        order = np.argsort(lv, kind="stable")
        self.n_level = np.bincount(lv, minlength=mech.levels).astype(np.int64)
        self.start = np.concatenate(([0], np.cumsum(self.n_level)))
        self.a, self.b, self.w = hashing.olh_match_params(
            state["seeds"][order], state["values"][order].astype(np.int64), mech.g)
        self.candidates: list[int] = []

    def support(self, level: int, rows: np.ndarray) -> np.ndarray:
        """C_j(u) for the level-``level`` prefixes of ``rows``."""
        s, e = self.start[level], self.start[level + 1]
        if rows.shape[0] == 0 or e == s:
            return np.zeros(rows.shape[0], dtype=np.int64)
        keys = self.mech.keys(rows, level)
        return hashing.olh_support_counts(self.a[s:e], self.b[s:e], self.w[s:e], keys, KERNEL_BLOCK)

    def extend(self, parents: np.ndarray, level: int) -> np.ndarray:
        """All children of ``parents`` at ``level`` (the level's new bits enumerated), without
        children that put a complete zero byte before a non-zero bit (a NUL inside a string)."""
        mech = self.mech
        lo = int(mech.bits[level - 1]) if level else 0
        hi = int(mech.bits[level])
        s = hi - lo
        bits = np.unpackbits(parents, axis=1)
        kids = np.repeat(bits, 1 << s, axis=0)
        code = np.tile(np.arange(1 << s, dtype=np.int64), parents.shape[0])
        for t in range(s):
            kids[:, lo + t] = (code >> (s - 1 - t)) & 1
        rows = np.packbits(kids, axis=1)
        pref = prefix_rows(rows, hi)
        full = hi // 8
        zero = pref[:, :full] == 0
        first = np.where(zero.any(axis=1), zero.argmax(axis=1), pref.shape[1])
        after = np.arange(pref.shape[1])[None, :] > first[:, None]
        valid = ~((pref != 0) & after).any(axis=1)
        return rows[valid]

    def run(self, k: int | None, alpha: float) -> HeavyHitterEstimate:
        from scipy.stats import binom  # imported here: keeps `ldptel` start-up fast

        mech, q, J = self.mech, self.mech.q, self.mech.levels
        term_rows: list[np.ndarray] = []
        term_level: list[np.ndarray] = []
        cands = self.extend(np.zeros((1, mech.max_length), dtype=np.uint8), 0)
        last_c = np.zeros(0)
        for j in range(J):
            self.candidates.append(int(cands.shape[0]))
            c = self.support(j, cands)
            if j == J - 1:
                last_c = c
                break
            n = self.n_level[j]
            est = mech.unbiased_counts(c, n)
            keep = np.flatnonzero(c > binom.isf(NULL_OFFSPRING / (1 << mech.new_bits(j)), n, q))
            keep = keep[np.argsort(-est[keep], kind="stable")[: mech.width]]
            surv = cands[keep]
            done = (prefix_rows(surv, int(mech.bits[j]))[:, : int(mech.bits[j]) // 8] == 0).any(axis=1)
            term_rows.append(surv[done])
            term_level.append(np.full(int(done.sum()), j, dtype=np.int64))
            cands = self.extend(surv[~done], j + 1)
            if cands.shape[0] == 0:
                self.candidates.extend([0] * (J - 1 - j))
                break
        # final candidates: terminated strings (pooled over the deeper levels) + the last level's
        trows = np.concatenate(term_rows) if term_rows else np.zeros((0, mech.max_length), np.uint8)
        tlev = np.concatenate(term_level) if term_level else np.zeros(0, np.int64)
        C = np.zeros(trows.shape[0], dtype=np.int64)
        nE = np.zeros(trows.shape[0], dtype=np.int64)
        for j in range(1, J):
            sel = np.flatnonzero(tlev < j)
            if sel.size:
                C[sel] += self.support(j, trows[sel])
                nE[sel] += self.n_level[j]
        rows = np.concatenate((trows, cands)) if last_c.size else trows
        C = np.concatenate((C, last_c)) if last_c.size else C
        nE = np.concatenate((nE, np.full(last_c.size, self.n_level[J - 1]))) if last_c.size else nE
        used = np.concatenate((J - 1 - tlev, np.ones(last_c.size, np.int64)))[: rows.shape[0]]
        m = rows.shape[0]
        level_alpha = alpha / max(m, 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            est = mech.unbiased_counts(C, nE)
            zs = est / mech.null_std_error(nE)
        self.final_rows, self.final_z, self.final_n = rows, zs, nE
        hit = np.flatnonzero((nE > 0) & (C > binom.isf(level_alpha, nE, q)))
        hit = hit[np.argsort(-zs[hit], kind="stable")]
        N = self.N
        ratio = N / nE[hit]
        c_sub = np.clip(est[hit], 0, nE[hit])
        f = c_sub / nE[hit]
        var_sub = mech.count_variance(c_sub, nE[hit]) + \
            nE[hit] * f * (1 - f) * (N - nE[hit]) / max(N - 1, 1)
        counts = est[hit] * ratio
        se = np.sqrt(var_sub) * ratio
        order = np.argsort(-counts, kind="stable")[: (k if k is not None else None)]
        hit, counts, se = hit[order], counts[order], se[order]
        return HeavyHitterEstimate(
            n=N, counts=counts, std_error=se, labels=[mech.decode_row(r) for r in rows[hit]],
            normalized=np.clip(counts, 0, N), z_scores=zs[hit], p_threshold=level_alpha,
            levels_used=used[hit], candidates=self.candidates)
