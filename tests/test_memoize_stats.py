"""Statistical and privacy must-be-trues of the memoized mechanisms (issue 14), all with fixed
seeds; every tolerance is derived below from the variance formulas or the binomial.

1. Averaging attack (``ldptel.aggregator.attack``): M = 2,000 devices with uniform values in a
   domain of d = 8, R = 100 linked reports each, decoded with the product's estimator. Memoized:
   accuracy ≤ e^{ε∞}/(e^{ε∞} + 7) + 4·√(b(1 − b)/M) (b = the bound; at ε∞ = 2: 0.5135 + 0.0447).
   Plain (memoize = false, the negative control): ≥ 0.9 (measured 0.93–0.999).
2. Per-report privacy of the *device path* (``encode_batch`` with one fresh secret per report, so
   the PRR is the HMAC derivation devices run): the Clopper–Pearson ratio test of test_privacy
   passes at ε₁ and flags the same mechanism with its IRR calibrated to 1.25·ε₁ (N = 100,000
   reports per input: at ε₁ = 1 the smallest output probability of the broken GRR, d = 4, is
   1/(e^{1.25} + 3) = 0.154, so each probability is resolved to ≈ ±2% at the union-bound level and
   the true ratio e^{1.25} = 3.49 exceeds e = 2.72 by 28%).
3. Unbiasedness over N = 200,000 devices reporting once (HMAC path): every item's
   z = (ĉ − c)/√Var_exact(c) within ±4 (P(any of 32 items beyond) ≈ 32·6.3·10⁻⁵ = 0.002).
4. Empirical MSE / formula in [0.9, 1.1]: Σ(ĉ − c)²/ΣVar over d = 1024 items × T repetitions
   of N = 200,000 (two-stage PRR + IRR drawn with the generator: the HMAC only replaces the
   PRR's randomness). The ratio of a χ²-like sum over dT nearly independent terms has sd
   √(2/(dT)): 0.022 at T = 4 for the oracles (±0.1 = 4.5 sd); the Haar per-value errors share
   their level-1 coefficient by pairs, so about dT/2 terms: T = 8 → 0.022. Heavy hitters: the
   per-level estimates of 8 strings against count_variance + pool_variance (the collision term),
   2 levels × 200 repetitions of N = 20,000 → sd 0.025.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from test_oracle_accuracy import zipf_counts
from test_privacy import HH_INPUTS, check_ldp, output_codes

from ldptel.aggregator import accumulator_for
from ldptel.aggregator.attack import averaging_attack
from ldptel.client import create_mechanism
from ldptel.mechanisms.heavy_hitters import HeavyHitters
from ldptel.mechanisms.longitudinal import LOSUE
from ldptel.mechanisms.longitudinal_kinds import (
    LHeavyHitters,
    LRangeHaar,
    LRangeHierarchical,
)
from ldptel.mechanisms.memoize import Chain, unary_instant_keep
from ldptel.mechanisms.range_haar import RangeHaar
from ldptel.mechanisms.range_hierarchical import RangeHierarchical

pytestmark = pytest.mark.slow

ORACLES = ["grr", "sue", "oue", "olh", "hadamard"]
KINDS = [*ORACLES, "heavy_hitters", "range_haar", "range_hierarchical"]
EPS, EPS_INF = 1.0, 2.0


def mechanism(name: str, d: int, memoize: bool = True, eps: float = EPS):
    memo = {"epsilon_inf": EPS_INF} if memoize else {}
    if name in ORACLES:
        return create_mechanism(name, epsilon=eps, domain_size=d, memoize=memoize, **memo)
    if name == "heavy_hitters":
        return (LHeavyHitters if memoize else HeavyHitters)(eps, 4, **memo)
    if name == "range_haar":
        return (LRangeHaar if memoize else RangeHaar)(eps, d, **memo)
    return (LRangeHierarchical if memoize else RangeHierarchical)(eps, d, **memo)


# --- 1. the averaging attack --------------------------------------------------------------------

@pytest.mark.parametrize("name", KINDS)
def test_averaging_attack_is_bounded_by_epsilon_inf(name: str) -> None:
    result = averaging_attack(mechanism(name, 8), devices=2000, reports=100, domain=8, seed=14)
    print(result)
    assert result.claimed_epsilon == EPS_INF and result.domain == 8
    assert result.bound == pytest.approx(np.exp(2) / (np.exp(2) + 7))
    assert result.passed, str(result)


@pytest.mark.parametrize("name", KINDS)
def test_averaging_attack_recovers_plain_values(name: str) -> None:
    """Negative control: without memoization 100 reports of ε₁ = 1 give the value away."""
    result = averaging_attack(mechanism(name, 8, memoize=False), devices=2000, reports=100,
                              domain=8, seed=14)
    print(result)
    assert result.accuracy >= 0.9, str(result)


# --- 2. per-report ratio test on the device path --------------------------------------------

N_DEVICE = 100_000


def range_codes(mech, cols: dict) -> tuple[np.ndarray, int]:
    """Range outputs as codes: Haar (slot of (level, index), sign); hierarchical (level, value)
    (GRR levels only at d = 4)."""
    lev = cols["levels"].astype(np.int64)
    if isinstance(mech, RangeHaar):
        slot = mech.offsets[lev] + cols["indices"]
        return slot * 2 + cols["signs"], int(mech.offsets[-1]) * 2
    assert not mech.uses_olh
    width = max(mech.nodes)
    return lev * width + cols["values"], mech.H * width


def codes(mech, cols: dict) -> tuple[np.ndarray, int]:
    if isinstance(mech, (RangeHaar, RangeHierarchical)):
        return range_codes(mech, cols)
    return output_codes(mech, cols)


def device_path_counts(mech, inputs: list, seed: int) -> np.ndarray:
    """counts[u, o] of N_DEVICE reports of input u, each from a fresh device secret."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in inputs:
        secrets = [rng.bytes(16) for _ in range(N_DEVICE)]
        values = [u] * N_DEVICE if isinstance(u, str) else np.full(N_DEVICE, u)
        c, size = codes(mech, mech.columns(mech.encode_batch(values, rng=rng, secrets=secrets)))
        rows.append(np.bincount(c, minlength=size))
    return np.array(rows)


def small(name: str):
    """The mechanisms at sizes whose outputs can be enumerated (d = 4; heavy hitters as in
    test_privacy: 2 levels, K = 4 seeds, g = 4)."""
    if name == "heavy_hitters":
        return LHeavyHitters(EPS, max_length=2, levels=2, pool_size=4, pool_seed=7,
                             epsilon_inf=EPS_INF), HH_INPUTS
    return mechanism(name, 4), [0, 1, 2, 3]


def miscalibrated(mech, factor: float):
    """The same mechanism, still claiming ε₁, with its IRR calibrated to ``factor``·ε₁."""
    broken = copy.copy(mech)
    eps = factor * mech.epsilon
    if isinstance(mech, LOSUE):
        broken.p2 = unary_instant_keep(eps, mech.epsilon_inf)
    elif isinstance(mech, LRangeHierarchical):
        broken.chains = [Chain(eps, mech.epsilon_inf, c.k, c.label) for c in mech.chains]
    else:
        broken.chain = Chain(eps, mech.epsilon_inf, mech.chain.k, mech.chain.label)
    return broken


@pytest.mark.parametrize("name", KINDS)
def test_device_path_within_e_epsilon_one(name: str) -> None:
    mech, inputs = small(name)
    result = check_ldp(device_path_counts(mech, inputs, seed=41), mech.epsilon)
    print(name, result)
    assert not result.violation, str(result)
    assert result.attains_bound, str(result)


@pytest.mark.parametrize("name", KINDS)
def test_device_path_miscalibrated_to_more_epsilon_is_flagged(name: str) -> None:
    mech, inputs = small(name)
    broken = miscalibrated(mech, 1.25)
    assert broken.epsilon == EPS
    result = check_ldp(device_path_counts(broken, inputs, seed=42), EPS)
    print(name, "1.25 ε₁", result)
    assert result.violation, str(result)


# --- 3. unbiased over a population reporting once (HMAC path) -------------------------------

N_POP = 200_000


def population_estimate(mech, counts: np.ndarray, seed: int, secrets: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.permutation(np.repeat(np.arange(counts.size), counts))
    sec = [rng.bytes(16) for _ in range(values.size)] if secrets else None
    acc = accumulator_for(mech)
    acc.add(mech.encode_batch(values, rng=rng, secrets=sec))
    return np.asarray(acc.estimate().counts, dtype=np.float64)


def exact_variance(mech, counts: np.ndarray) -> np.ndarray:
    n = int(counts.sum())
    if isinstance(mech, (RangeHaar, RangeHierarchical)):
        v = np.arange(counts.size)
        return mech.range_variance(v, v, counts, n)
    return mech.count_variance(counts, n)


@pytest.mark.parametrize("name", [k for k in KINDS if k != "heavy_hitters"])
def test_unbiased_with_one_report_per_device(name: str) -> None:
    mech = mechanism(name, 32)
    counts = zipf_counts(N_POP, 32, seed=5)
    est = population_estimate(mech, counts, seed=6, secrets=True)
    z = (est - counts) / np.sqrt(exact_variance(mech, counts))
    print(name, "max |z| =", float(np.abs(z).max()))
    assert np.abs(z).max() < 4, z


def test_heavy_hitters_unbiased_with_one_report_per_device() -> None:
    """Eight strings with Zipf counts over N = 200,000 devices: each is found, its count within 4
    of the decoder's std errors (which carry the collision and level-sampling terms)."""
    mech = LHeavyHitters(2.0, 4, epsilon_inf=4.0)
    words = ["home", "feed", "cart", "pay", "help", "menu", "tv", "x"]
    counts = zipf_counts(N_POP, len(words), seed=7)
    rng = np.random.default_rng(8)
    values = [words[i] for i in rng.permutation(np.repeat(np.arange(len(words)), counts))]
    acc = accumulator_for(mech)
    acc.add(mech.encode_batch(values, rng=rng, secrets=[rng.bytes(16) for _ in values]))
    est = acc.estimate()
    found = dict(zip(est.labels, zip(est.counts, est.std_error, strict=True), strict=True))
    z = {w: (found[w][0] - c) / found[w][1] for w, c in zip(words, counts, strict=True)}
    print("heavy hitters z:", z)
    assert set(words) <= set(found)
    assert max(abs(v) for v in z.values()) < 4, z


# --- 4. MSE at the formula ----------------------------------------------------------------------

@pytest.mark.parametrize(("name", "reps"), [*((o, 4) for o in ORACLES), ("range_haar", 8),
                                            ("range_hierarchical", 4)])
def test_mse_matches_the_variance_formula(name: str, reps: int) -> None:
    mech = mechanism(name, 1024)
    counts = zipf_counts(N_POP, 1024, seed=9)
    err2 = sum(float(np.sum((population_estimate(mech, counts, seed=10 + r, secrets=False)
                             - counts) ** 2)) for r in range(reps))
    ratio = err2 / (reps * float(np.sum(exact_variance(mech, counts))))
    print(name, "MSE / formula =", ratio)
    assert 0.9 <= ratio <= 1.1


def test_heavy_hitters_level_estimates_match_the_variance_formula() -> None:
    """MSE of the per-level estimates Ĉ_j(u) = (C_j(u) − n_j q)/(p − q) (C_j from the count table
    with ``hashing.pool_support``, as the decoder's walk reads it) against their exact variance
    count_variance(c_ju, n_j) + pool_variance(P2_j(u)), P2_j(u) = Σ_k Σ_{v≠u} n_jkv(n_jkv − 1)
    counted from the simulated reports. A small pool (K = 64, g = 8) makes the collision term
    84% of the summed variance (58–87% per string), so both terms are tested. The formula
    averages over the pool's hash values, so each repetition draws another ``pool_seed``.
    8 strings × 2 levels × 200 repetitions of N = 20,000: the ratio's sd ≈ √(2/3200) = 0.025
    (±0.1 = 4 sd)."""
    from ldptel.mechanisms import hashing

    words = ["home", "feed", "cart", "pay", "help", "menu", "tv", "x"]
    counts = zipf_counts(20_000, len(words), seed=11)
    rng = np.random.default_rng(12)
    err2 = var = 0.0
    for rep in range(200):
        mech = LHeavyHitters(2.0, 4, levels=2, pool_size=64, pool_seed=rep, epsilon_inf=4.0)
        idx = rng.permutation(np.repeat(np.arange(len(words)), counts))
        cols = mech.columns(mech.encode_batch([words[i] for i in idx], rng=rng))
        acc = accumulator_for(mech)
        acc.add_columns(cols, idx.size)
        table = acc.state["counts"]
        devices = np.zeros((mech.levels, mech.pool_size, len(words)))
        np.add.at(devices, (cols["levels"], cols["seed_indices"], idx), 1)
        pairs = devices * (devices - 1)
        rows = np.frombuffer(b"".join(w.encode().ljust(4, b"\0") for w in words),
                             np.uint8).reshape(len(words), 4)
        for j in range(mech.levels):
            a, b = hashing.seed_params(mech.pool[j])
            support = hashing.pool_support(a, b, table[j], mech.keys(rows, j))
            n_j = int(table[j].sum())
            c = devices[j].sum(axis=0)
            est = mech.unbiased_counts(support, n_j)
            p2 = pairs[j].sum() - pairs[j].sum(axis=0)
            err2 += float(np.sum((est - c) ** 2))
            var += float(np.sum(mech.count_variance(c, n_j) + mech.pool_variance(p2)))
    print("heavy hitters level estimates: MSE / formula =", err2 / var)
    assert 0.9 <= err2 / var <= 1.1
