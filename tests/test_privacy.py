"""Empirical ε-LDP check (every mechanism must satisfy P(o | u) ≤ e^ε·P(o | u') for all
inputs u, u' and outputs o): on small domains, estimate the probability of every output
under every input from many seeded samples and test that no output's probability ratio between
two inputs provably exceeds e^ε. A deliberately broken randomizer must fail the same check.

The statistics. For input u the randomizer is run n times; c[u, o] counts output o. Every
P(o | u) gets a two-sided Clopper–Pearson interval at level 1 − α/K (K = number of (u, o) cells),
so by the union bound all K intervals hold at once with probability ≥ 1 − α. If they all hold and
the mechanism is ε-LDP, then for every o, u, v

    lower(P(o|u)) / upper(P(o|v))  ≤  P(o|u) / P(o|v)  ≤  e^ε,

so ``violation = max lower/upper > e^ε`` flags an honest mechanism with probability ≤ α = 1e-6:
the test only fails when the data *prove* a violation. To show the test has power we also check
that the bound is attained: at the output with the largest point-estimate ratio, the simultaneous
interval [lower/upper, upper/lower] of the ratio contains e^ε (every mechanism here has outputs
whose true ratio is exactly e^ε, and on those the interval covers it with probability ≥ 1 − α),
and the negative controls (randomizing with 2ε, or 1.25ε, while claiming ε, and a few classic bugs)
must be flagged.

Any function T of the output is a valid statistic (data processing: T's ratios are ≤ the output's),
so outputs with a huge space are reduced to a small T:
- OLH's output is (seed, y) with a 32-bit seed. The honest randomizer draws the seed uniformly,
  independently of v, and y depends on v only through H_seed(v), so the likelihood is
  P(seed)·(p' if H_seed(v) = y else (1 − p')/(g − 1)). Hence the match vector
  T₁ = (1[H_seed(0) = y], …, 1[H_seed(d−1) = y]) is sufficient for v and has exactly the same
  ratios (max e^ε, at T₁ with a 1 at u and a 0 at v). Because T₁ assumes the seed carries no
  information, a second statistic T₂ = (3 low bits, 3 high bits of the seed) checks that it does
  not (its ratios must be ≤ e^ε as well; honest: 1).
- RAPPOR's output is (cohort, k bits): with k = 4 and ≤ 2 cohorts it is enumerated completely.
- Heavy hitters' output is (level, seed index, y): with 2 levels, a pool of K = 4 public seeds
  and g = 4 (ε = 1) it is enumerated completely (32 outputs). The level and seed index come from
  the device secret, not the value; y is OLH's under the public seed s_{level, index}.
  Its per-report ε is ε₁ (``mech.epsilon``); the permanent RR is drawn per device, i.e. fresh for
  every simulated report in ``randomize``, which is the one-report distribution ε₁ is about.

Both randomizers are checked: the vectorized ``randomize`` (simulations, 400 000 reports per input)
and the one-report path that devices run in production (``randomize_one`` behind ``encode``, OS
randomness, not seeded; 40 000 reports per input, which still resolves the ratio to ≈ ±10–20%:
the 2ε negative controls of that path are flagged by a factor ≈ 2.4). For RAPPOR's device path
each report comes from a fresh device secret (its own cohort and permanent RR), 25 000 per input;
so does each heavy-hitter report (its own level and seed index).
"""

from __future__ import annotations

import copy
import math
import os

import numpy as np
import pytest

from ldptel.client import create_mechanism
from ldptel.mechanisms import GRR, OLH, RAPPOR, hashing
from ldptel.mechanisms.heavy_hitters import HeavyHitters
from ldptel.mechanisms.olh import keep_probability
from ldptel.privacy.ldp_check import ALPHA, LdpCheck, check_ldp  # noqa: F401 (re-exported for other tests)

N_SAMPLES = 400_000  # reports per input value


# --- outputs as small integer codes --------------------------------------------------------

def output_codes(mech, cols: dict) -> tuple[np.ndarray, int]:
    """The output (or a statistic of it, see the module docstring) as codes in [0, size)."""
    if isinstance(mech, RAPPOR):
        k = mech.bloom_bits
        assert k <= 8
        bits = cols["bits"][:, 0].astype(np.int64) >> (8 - k)
        return cols["cohorts"].astype(np.int64) * (1 << k) + bits, mech.cohorts << k
    if isinstance(mech, HeavyHitters):
        slot = cols["levels"].astype(np.int64) * mech.pool_size + cols["seed_indices"]
        return slot * mech.g + cols["values"], mech.levels * mech.pool_size * mech.g
    d = mech.domain_size
    if mech.name == "grr":
        return cols["values"].astype(np.int64), d
    if mech.name in ("sue", "oue"):
        assert d <= 8
        return cols["bits"][:, 0].astype(np.int64) >> (8 - d), 1 << d
    if mech.name == "hadamard":
        return cols["indices"].astype(np.int64) * 2 + cols["signs"], 2 * mech.D
    if mech.name == "olh":
        seeds, ys = cols["seeds"], cols["values"]
        code = np.zeros(seeds.size, dtype=np.int64)
        for v, key in enumerate(mech.keys):
            hv = hashing.olh_hash_batch(seeds, np.full(seeds.size, key, dtype=np.uint32), mech.g)
            code |= (hv == ys).astype(np.int64) << v
        return code, 1 << d
    raise AssertionError(mech.name)


def olh_seed_bits(cols: dict) -> tuple[np.ndarray, int]:
    """T₂: the seed's 3 low and 3 high bits."""
    s = cols["seeds"].astype(np.int64)
    return (s & 7) | ((s >> 29) << 3), 64


def output_counts(mech, inputs: list, n: int, seed: int, statistic=output_codes) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = []
    for u in inputs:
        values = [u] * n if isinstance(mech, (RAPPOR, HeavyHitters)) else np.full(n, u, dtype=np.int64)
        codes, size = statistic(mech, mech.randomize(values, rng))
        rows.append(np.bincount(codes, minlength=size))
    return np.array(rows)


def check_mechanism(mech, inputs: list, seed: int, statistic=output_codes) -> LdpCheck:
    return check_ldp(output_counts(mech, inputs, N_SAMPLES, seed, statistic), mech.epsilon)


N_SCALAR = 40_000  # one-report encodes per input value (OS randomness, ~2–15 µs each)
N_DEVICES = 25_000  # RAPPOR devices per input value (~55 µs each: HMACs for cohort and PRR)


def one_report_columns(mech, value, n: int) -> dict:
    """``n`` reports of ``value`` from the device path, stacked into columns. RAPPOR: ``encode``
    with a fresh device secret per report; the others: ``randomize_one`` (what ``encode`` packs)."""
    if isinstance(mech, RAPPOR):
        rows = []
        for _ in range(n):
            mech.secret = os.urandom(32)
            rows.append(mech.columns(mech.encode(value)))
    elif isinstance(mech, HeavyHitters):
        args = {k: v for k, v in mech.public_params().items() if k not in ("oracle", "g")}
        rows = [mech.columns(type(mech)(**args, secret=os.urandom(32)).encode(value)) for _ in range(n)]
    else:
        rows = [mech.randomize_one(value) for _ in range(n)]
    return {key: np.concatenate([np.asarray(r[key]) for r in rows]) for key in rows[0]}


def check_one_report_path(mech, inputs: list, n: int = N_SCALAR) -> LdpCheck:
    rows = []
    for u in inputs:
        codes, size = output_codes(mech, one_report_columns(mech, u, n))
        rows.append(np.bincount(codes, minlength=size))
    return check_ldp(np.array(rows), mech.epsilon)


# --- mechanisms under test --------------------------------------------------------------------

RAPPOR_CONFIGS = {
    "h2-m2": dict(bloom_bits=4, hashes=2, cohorts=2, f=0.5, p=0.5, q=0.75),  # ε₁ ≈ 1.07
    "h1-m1": dict(bloom_bits=4, hashes=1, cohorts=1, f=0.25, p=0.25, q=0.75),  # ε₁ ≈ 1.58
}


def rappor_inputs(mech: RAPPOR) -> list[str]:
    """Three strings; the first two have disjoint Bloom filters with h distinct bits each in cohort
    0, so some output has ratio exactly e^ε₁ (the bound is attainable); the third is arbitrary."""
    def bits(s: str) -> set[int]:
        return set(mech.bloom_positions(s, 0))

    names = [f"value-{i}" for i in range(200)]
    first = next(s for s in names if len(bits(s)) == mech.hashes)
    second = next(s for s in names if len(bits(s)) == mech.hashes and not bits(s) & bits(first))
    return [first, second, next(s for s in names if s not in (first, second))]


def rappor(config: str, **changes) -> RAPPOR:
    return create_mechanism("rappor", **{**RAPPOR_CONFIGS[config], **changes}, candidates=[],
                            secret=bytes(32))


CASES = [(2, 0.5), (3, 1.0), (4, 2.0)]  # (d, ε)


@pytest.mark.parametrize(("d", "epsilon"), CASES)
@pytest.mark.parametrize("oracle", ["grr", "sue", "oue", "olh", "hadamard"])
def test_honest_mechanism_within_e_epsilon(oracle: str, d: int, epsilon: float) -> None:
    mech = create_mechanism(oracle, epsilon=epsilon, domain_size=d)
    result = check_mechanism(mech, list(range(d)), seed=d)
    print(oracle, d, result)
    assert not result.violation, str(result)
    assert result.attains_bound, str(result)


@pytest.mark.parametrize("d", [2, 4])
def test_honest_olh_seed_carries_no_information(d: int) -> None:
    mech = create_mechanism("olh", epsilon=1.0, domain_size=d)
    result = check_mechanism(mech, list(range(d)), seed=7, statistic=lambda m, cols: olh_seed_bits(cols))
    print("olh seed", d, result)
    assert not result.violation, str(result)
    assert result.max_point_ratio < math.exp(mech.epsilon)


@pytest.mark.parametrize("config", sorted(RAPPOR_CONFIGS))
def test_honest_rappor_within_e_epsilon_one(config: str) -> None:
    mech = rappor(config)
    result = check_mechanism(mech, rappor_inputs(mech), seed=11)
    print("rappor", config, result)
    assert not result.violation, str(result)
    assert result.attains_bound, str(result)


HH_INPUTS = ["ab", "ac", "b"]  # share level 0 ("a"), differ at level 1; differ at both


def heavy_hitters(cls: type[HeavyHitters] = HeavyHitters) -> HeavyHitters:
    return cls(1.0, max_length=2, levels=2, pool_size=4, pool_seed=7)


def test_honest_heavy_hitters_within_e_epsilon() -> None:
    mech = heavy_hitters()
    assert mech.levels * mech.pool_size * mech.g == 32
    result = check_mechanism(mech, HH_INPUTS, seed=13)
    print("heavy hitters", result)
    assert not result.violation, str(result)
    assert result.attains_bound, str(result)


@pytest.mark.slow
@pytest.mark.parametrize("oracle", ["grr", "sue", "oue", "olh", "hadamard"])
def test_one_report_path_within_e_epsilon(oracle: str) -> None:
    mech = create_mechanism(oracle, epsilon=1.0, domain_size=3)
    result = check_one_report_path(mech, [0, 1, 2])
    print(oracle, "one-report", result)
    assert not result.violation, str(result)
    assert result.attains_bound, str(result)


@pytest.mark.slow
def test_heavy_hitters_device_path_within_e_epsilon() -> None:
    result = check_one_report_path(heavy_hitters(), HH_INPUTS[:2], N_DEVICES)
    print("heavy hitters device", result)
    assert not result.violation, str(result)
    assert result.attains_bound, str(result)


@pytest.mark.slow
def test_rappor_device_path_within_e_epsilon_one() -> None:
    mech = rappor("h2-m2")
    result = check_one_report_path(mech, rappor_inputs(mech)[:2], N_DEVICES)
    print("rappor device", result)
    assert not result.violation, str(result)
    assert result.attains_bound, str(result)


# --- negative controls: the same check must flag these ----------------------------------------

def leaky(mech, factor: float):
    """The same mechanism, claiming ``mech.epsilon`` but randomizing with ``factor``·ε (for OLH
    the hash range g stays that of the claimed ε, so only the keep probability p' changes)."""
    class Leaky(type(mech)):
        def actual(self):
            actual = copy.copy(self)
            actual.epsilon = factor * self.epsilon
            return actual

        def randomize(self, values, rng):
            return type(mech).randomize(self.actual(), values, rng)

        def randomize_one(self, value):
            return type(mech).randomize_one(self.actual(), value)

    broken = copy.copy(mech)
    broken.__class__ = Leaky
    return broken


class GrrOffByOne(GRR):
    """Classic bug: 'uniform other value' drawn from [0, d − 1) without skipping the true value,
    so d − 1 is never reported by other inputs and the true value is over-reported."""

    def randomize(self, values, rng):
        keep = rng.random(values.size) < self.p
        other = rng.integers(0, self.domain_size - 1, values.size)
        return {"values": np.where(keep, values, other).astype(np.uint32)}


class OlhSeedLeak(OLH):
    """The seed's low bits carry the value (e.g. a seed 'derived from' the value)."""

    def randomize(self, values, rng):
        cols = super().randomize(values, rng)
        cols["seeds"] = (cols["seeds"] & np.uint32(~7 & 0xFFFFFFFF)) | values.astype(np.uint32)
        return cols


class HhSlotFromValue(HeavyHitters):
    """The seed index 'derived from' the value (e.g. a per-value seed) instead of the secret."""

    def randomize(self, values, rng):
        cols = super().randomize(values, rng)
        rows, inverse = self.string_rows(values)
        cols["seed_indices"] = (rows[inverse, -1] % self.pool_size).astype(np.uint32)
        return cols


class HhDoubleEpsilon(HeavyHitters):
    """Keeps the hashed value with the probability of 2ε while claiming ε (both paths)."""

    @property
    def p(self) -> float:
        return keep_probability(2 * self.epsilon, self.g)


class RapporNoPrr(RAPPOR):
    """Forgets the permanent randomized response (f effectively 0)."""

    def randomize(self, values, rng):
        actual = copy.copy(self)
        actual.f = 1e-12
        return RAPPOR.randomize(actual, values, rng)


class RapporHalfF(RAPPOR):
    """Mis-parametrized: the permanent RR uses f/2 (ε₁ 1.07 → 1.63 for the h2-m2 config)."""

    def randomize(self, values, rng):
        actual = copy.copy(self)
        actual.f = self.f / 2
        return RAPPOR.randomize(actual, values, rng)


@pytest.mark.parametrize("factor", [2.0, 1.25])
@pytest.mark.parametrize(("d", "epsilon"), [(2, 0.5), (4, 1.0)])
@pytest.mark.parametrize("oracle", ["grr", "sue", "oue", "olh", "hadamard"])
def test_mechanism_randomizing_with_more_epsilon_is_flagged(oracle: str, d: int, epsilon: float,
                                                           factor: float) -> None:
    broken = leaky(create_mechanism(oracle, epsilon=epsilon, domain_size=d), factor)
    assert broken.epsilon == epsilon
    result = check_mechanism(broken, list(range(d)), seed=100 + d)
    print(oracle, d, factor, result)
    assert result.violation, str(result)


class RapporDeviceNoPrr(RAPPOR):
    """Device path that reports the instantaneous RR of the true Bloom filter (no permanent RR)."""

    def permanent_bits(self, value, cohort):
        return self.bloom_table(value)[cohort]


@pytest.mark.slow
@pytest.mark.parametrize("oracle", ["grr", "olh"])
def test_one_report_path_with_more_epsilon_is_flagged(oracle: str) -> None:
    broken = leaky(create_mechanism(oracle, epsilon=1.0, domain_size=3), 2.0)
    result = check_one_report_path(broken, [0, 1, 2])
    print(oracle, "one-report 2ε", result)
    assert result.violation, str(result)


def test_heavy_hitters_with_more_epsilon_is_flagged() -> None:
    broken = leaky(heavy_hitters(), 2.0)
    assert broken.epsilon == 1.0
    result = check_mechanism(broken, HH_INPUTS, seed=17)
    print("heavy hitters 2ε", result)
    assert result.violation, str(result)


@pytest.mark.slow
def test_heavy_hitters_device_path_with_more_epsilon_is_flagged() -> None:
    result = check_one_report_path(heavy_hitters(HhDoubleEpsilon), HH_INPUTS[:2], N_DEVICES)
    print("heavy hitters device 2ε", result)
    assert result.violation, str(result)


@pytest.mark.slow
def test_rappor_device_path_without_permanent_rr_is_flagged() -> None:
    honest = rappor("h2-m2")
    broken = RapporDeviceNoPrr(**RAPPOR_CONFIGS["h2-m2"], candidates=[], secret=bytes(32))
    result = check_one_report_path(broken, rappor_inputs(honest)[:2], N_DEVICES)
    print("rappor device without PRR", result)
    assert result.violation, str(result)


@pytest.mark.slow
def test_classic_bugs_are_flagged() -> None:
    results = {
        "grr-off-by-one": check_mechanism(GrrOffByOne(1.0, 4), list(range(4)), seed=1),
        "olh-seed-leak": check_mechanism(OlhSeedLeak(1.0, 4), list(range(4)), seed=2,
                                         statistic=lambda m, cols: olh_seed_bits(cols)),
        "hh-slot-from-value": check_mechanism(heavy_hitters(HhSlotFromValue), HH_INPUTS, seed=4),
    }
    for config in sorted(RAPPOR_CONFIGS):
        honest = rappor(config)
        for cls in (RapporNoPrr, RapporHalfF):
            broken = cls(**RAPPOR_CONFIGS[config], candidates=[], secret=bytes(32))
            results[f"{cls.__name__}-{config}"] = check_mechanism(broken, rappor_inputs(honest), seed=3)
    for name, result in results.items():
        print(name, result)
    assert {name: r.violation for name, r in results.items()} == dict.fromkeys(results, True)


def test_checker_on_exact_distributions() -> None:
    """The checker itself, on known counts: exactly e^ε is allowed, a proven excess is not, and
    rare outputs (few counts, wide intervals) cannot fake a violation."""
    eps = 1.0
    n = 10**6
    p = math.e / (math.e + 1)
    exact = np.array([[round(n * p), n - round(n * p)], [n - round(n * p), round(n * p)]])
    assert not check_ldp(exact, eps).violation
    assert check_ldp(exact, eps).attains_bound
    assert check_ldp(exact, 0.9).violation  # the same data prove more than e^0.9
    rare = np.array([[n - 5, 5], [n, 0]])  # 5 vs 0 occurrences: ratio ∞ as point estimate
    assert not check_ldp(rare, eps).violation
    assert check_ldp(np.array([[n - 500, 500], [n, 0]]), eps).violation
