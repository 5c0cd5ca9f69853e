"""Range std errors in closed form over the tree levels equal the dense formulas they replaced.

- Haar: the variance of a range from a dense D × D second-moment matrix of one device's
  contribution to the per-value estimates (derived here from the mechanism's definition:
  E[ZZᵀ] = h·k²·M, M_vv' = Σ_ℓ 4^−ℓ σ_ℓ(v)σ_ℓ(v')·[v >> ℓ = v' >> ℓ], E[Z] = e_u − 1/D), against
  ``RangeHaar.range_variance`` and the estimate's per-value std errors; the O(D) inverse
  transform of the counts against the per-level sum it replaced.
- Hierarchical: the previous implementation's dense adjoint weights (kept below verbatim as
  ``dense_range_variance``) against ``RangeHierarchical.range_variance``, for GRR and OLH levels,
  complete and incomplete trees, every single value and random ranges.
"""

from __future__ import annotations

import numpy as np
import pytest

from ldptel.aggregator.decoders import accumulator_for
from ldptel.mechanisms.grr import GRR
from ldptel.mechanisms.range_haar import RangeHaar
from ldptel.mechanisms.range_hierarchical import RangeHierarchical, _sum_groups


def ranges_of(d: int, rng: np.random.Generator, k: int = 300) -> tuple[np.ndarray, np.ndarray]:
    v = np.arange(d)
    lo = rng.integers(0, d, k)
    hi = np.minimum(d - 1, lo + rng.integers(0, d, k))
    return np.concatenate((v, lo, [0, 0])), np.concatenate((v, hi, [d - 1, d // 2]))


def haar_dense_variance(mech: RangeHaar, lo, hi, counts, n) -> np.ndarray:
    D, h = mech.D, mech.h
    v = np.arange(D)
    M = np.zeros((D, D))
    for ell in range(1, h + 1):
        sigma = 1 - 2 * ((v >> (ell - 1)) & 1)
        M += 4.0**-ell * np.outer(sigma, sigma) * ((v[:, None] >> ell) == (v[None, :] >> ell))
    c = np.zeros(D)
    c[: counts.size] = np.clip(counts, 0, n)
    out = []
    for a, b in zip(lo, hi, strict=True):
        w = ((v >= a) & (v <= b)).astype(float)
        second = h * mech.scale**2 * (w @ M @ w)
        mean_sq = (w - w.sum() / D) ** 2  # (w·(e_u − 1/D))² for u = each value
        out.append(n * second - c @ mean_sq)
    return np.array(out)


@pytest.mark.parametrize(("d", "epsilon"), [(8, 1.0), (100, 0.5), (1024, 2.0)])
def test_haar_closed_form_equals_dense_formula(d: int, epsilon: float) -> None:
    rng = np.random.default_rng(d)
    mech = RangeHaar(epsilon, d)
    values = rng.integers(0, d, 5000)
    truth = np.bincount(values, minlength=d).astype(float)
    acc = accumulator_for(mech)
    acc.add(mech.encode_batch(values, rng=rng))
    est = acc.estimate()
    lo, hi = ranges_of(d, rng, 100 if d > 500 else 300)
    if d > 500:  # the dense matrix is D² per range: every value would take too long
        keep = rng.choice(d, 60, replace=False)
        lo, hi = np.concatenate((lo[keep], lo[d:])), np.concatenate((hi[keep], hi[d:]))
    dense = haar_dense_variance(mech, lo, hi, truth, acc.n)
    np.testing.assert_allclose(mech.range_variance(lo, hi, truth, acc.n), dense, rtol=1e-10)
    # the estimate's per-value std errors (O(d)) are the range formula's, estimated counts plugged in
    v = np.arange(d)
    np.testing.assert_allclose(est.std_error**2, mech.range_variance(v, v, est.counts, acc.n), rtol=1e-10)
    # counts: the O(D) inverse transform equals the per-level sum it replaced
    old = np.full(mech.D, acc.n / mech.D)
    for i, theta in enumerate(acc.coefficients()):
        size = 2 << i
        half = np.concatenate((np.ones(size // 2), -np.ones(size // 2))) / size
        old += (theta[:, None] * half[None, :]).reshape(-1)
    np.testing.assert_allclose(est.counts, old[:d], rtol=1e-12, atol=1e-9 * acc.n)


# --- hierarchical: the previous dense adjoint (verbatim but for names) -------------------------


def dense_range_weights(mech: RangeHierarchical, lo, hi):
    alpha, beta, gamma = mech.constants()
    H, B = mech.H, mech.B
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    v = np.arange(mech.domain_size)[:, None]
    fbar = ((v >= lo[None, :]) & (v <= hi[None, :])).astype(np.float64)
    zbar = [np.zeros((m, lo.size)) for m in mech.nodes]
    for ell in range(H - 1, 0, -1):
        parent = np.arange(mech.nodes[ell]) // B
        g = _sum_groups(gamma[ell][:, None] * fbar, B)
        zbar[ell] += fbar - g[parent]
        fbar = g
    g0 = (gamma[0][:, None] * fbar).sum(axis=0)
    zbar[0] += fbar - g0[None, :]
    xbar: list[np.ndarray] = [np.empty(0)] * H
    for ell in range(H - 1):
        xbar[ell] = alpha[ell][:, None] * zbar[ell]
        child_parent = np.arange(mech.nodes[ell + 1]) // B
        zbar[ell + 1] += (beta[ell][:, None] * zbar[ell])[child_parent]
    xbar[H - 1] = zbar[H - 1]
    return xbar, g0


def dense_range_variance(mech: RangeHierarchical, lo, hi, counts, n):
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    c = np.clip(np.asarray(counts, dtype=np.float64), 0, None)
    a, a0 = dense_range_weights(mech, lo, hi)
    total = np.zeros(lo.size)
    for ell, (o, nt) in enumerate(zip(mech.oracles, mech.node_counts(c), strict=True)):
        p, q = o.p, o.q
        al = a[ell]
        sq, A = (al**2).sum(axis=0), al.sum(axis=0)
        nsq = nt @ al**2
        if isinstance(o, GRR):
            lvl = n * (q * sq - q**2 * A**2) + (p - q) * nsq - 2 * q * (p - q) * A * (nt @ al)
        else:
            lvl = n * q * (1 - q) * sq + (p * (1 - p) - q * (1 - q) + (p - q) ** 2) * nsq
        total += mech.H / (p - q) ** 2 * lvl
    cum = np.concatenate(([0.0], np.cumsum(c)))
    c_r = np.clip(cum[hi + 1] - cum[lo], 0, n)
    return total - c_r * (1 - a0) ** 2 - (n - c_r) * a0**2


@pytest.mark.parametrize(("d", "epsilon", "branching"), [
    (1024, 1.0, None),  # B = 4, complete tree, GRR and OLH levels
    (1000, 1.0, 4),  # incomplete: the last node of each level has fewer children
    (37, 2.0, 3),
    (200, 4.0, 16),
    (5, 1.0, 8),  # one level
    (64, 1.0, 2),
])
def test_hierarchical_closed_form_equals_dense_formula(d: int, epsilon: float, branching: int | None) -> None:
    rng = np.random.default_rng(d)
    mech = RangeHierarchical(epsilon, d, branching)
    counts = rng.multinomial(50_000, rng.dirichlet(np.full(d, 0.3))).astype(float)
    counts[rng.random(d) < 0.2] = 0
    lo, hi = ranges_of(d, rng)
    got = mech.range_variance(lo, hi, counts, 50_000)
    np.testing.assert_allclose(got, dense_range_variance(mech, lo, hi, counts, 50_000), rtol=1e-9,
                               atol=1e-9 * np.abs(got).max())
    assert np.all(got[(lo > 0) | (hi < d - 1)] > 0)  # (the full range [0, d − 1] is exact: N)


def test_hierarchical_ranges_split_over_threads_give_the_same_variances(monkeypatch) -> None:
    from ldptel.mechanisms.kernels import parallel, ranges

    mech = RangeHierarchical(1.0, 300, 4)
    counts = np.random.default_rng(1).multinomial(10_000, np.full(300, 1 / 300)).astype(float)
    lo, hi = ranges_of(300, np.random.default_rng(2))
    one = mech.range_variance(lo, hi, counts, 10_000)
    monkeypatch.setattr(ranges, "MIN_CHUNK", 10)
    parallel.set_threads(3)
    try:
        np.testing.assert_array_equal(mech.range_variance(lo, hi, counts, 10_000), one)
    finally:
        parallel.set_threads(None)
