"""Range and numeric campaigns in a shuffled privacy mode (ldptel.mechanisms.index_stats, grid,
aggregator.index_estimates): the estimates are unbiased and their stated variances are the
variances, measured over many simulated releases with fixed seeds.

Each release is simulated at the level of counts, exactly: the devices' indices (a range's values;
a numeric campaign's values rounded at random to the grid, Binomial per value), their reports
through the oracle (GRR: a multinomial per index; OUE/SUE: independent Binomial bits) and the
fakes (Poisson(λ·n) in all, multinomial over the K indices); then the aggregator's own accumulator
and ``index_estimate`` decode it. With R releases the empirical variance of an estimate has a
relative std error of √(2/(R − 1)); the tolerances are 4.5 of those (and 4.5 std errors of the mean
for the bias)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldptel.aggregator.decoders import accumulator_for
from ldptel.aggregator.decoders.fakes import FakesAccumulator
from ldptel.aggregator.index_estimates import index_estimate
from ldptel.campaigns.config import parse_campaign
from ldptel.mechanisms.estimates import MeanEstimate
from ldptel.mechanisms.grid import GridGRR, GridHistogram
from ldptel.mechanisms.index_stats import IndexStatistics, index_statistics
from ldptel.mechanisms.ranges import RangeEstimate

RUNS = 3000
Z = 4.5


def campaign(kind: str, mode: str, **extra):
    base = {"name": "c", "kind": kind, "privacy_mode": mode, "central_epsilon": 1.0, "central_delta": 1e-6,
            "batch_min": 2000, "min_reports": 1}
    if kind == "range":
        base["domain_size"] = 32
    else:
        base.update(lower=-5.0, upper=15.0, grid_points=11)
    return parse_campaign({**base, **extra}, "t")


def releases(camp, indices: np.ndarray, rng: np.random.Generator) -> list:
    """``RUNS`` decoded releases of the devices whose index counts per run are ``indices``
    (RUNS × K): the index_estimate of each."""
    mech = camp.mechanism()
    k, n = mech.domain_size, int(indices[0].sum())
    if mech.name == "histogram":
        support = indices.copy()
    elif mech.name == "grr":
        support = np.zeros_like(indices)
        for v in range(k):
            probs = np.full(k, mech.q)
            probs[v] = mech.p
            support += rng.multinomial(indices[:, v], probs / probs.sum())
    else:  # unary: independent bits
        support = rng.binomial(indices, mech.p) + rng.binomial(n - indices, mech.q)
    fakes = np.zeros(RUNS, dtype=np.int64)
    rate = getattr(camp.mode, "fake_rate", 0.0)  # shuffled-fakes only
    if rate:
        fakes = rng.poisson(rate * n, RUNS)
        support = support + rng.multinomial(fakes, np.full(k, 1 / k))
    out = []
    for run in range(RUNS):
        acc = FakesAccumulator(mech) if camp.privacy_mode == "shuffled-fakes" else accumulator_for(mech)
        acc.state["support"][:] = support[run]
        acc.state["n"][0] = n
        if "messages" in acc.state:
            acc.state["messages"][0] = n + fakes[run]
        out.append(index_estimate(camp, acc, acc.estimate())[0])
    return out


def check(values: np.ndarray, truth: float, variances: np.ndarray) -> None:
    """Unbiased, and the stated variance (mean over runs) is the empirical one."""
    stated = float(np.mean(variances))
    assert abs(values.mean() - truth) <= Z * math.sqrt(stated / RUNS), (values.mean(), truth)
    ratio = values.var(ddof=1) / stated
    assert abs(ratio - 1) <= Z * math.sqrt(2 / (RUNS - 1)), ratio


RANGE_CASES = [("shuffled-fakes", {}), ("shuffled-fakes", {"oracle": "grr", "local_epsilon": 2.0}),
               ("shuffled", {"oracle": "grr"}), ("shuffled", {"oracle": "oue"}),
               ("shuffled", {"oracle": "sue"})]


@pytest.mark.parametrize(("mode", "extra"), RANGE_CASES, ids=[f"{m}-{e.get('oracle', 'histogram')}"
                                                             for m, e in RANGE_CASES])
def test_ranges_unbiased_with_their_stated_variance(mode: str, extra: dict) -> None:
    camp = campaign("range", mode, **extra)
    rng = np.random.default_rng(26)
    values = np.minimum(rng.geometric(0.12, 2000) - 1, 31)
    truth = np.bincount(values, minlength=32)
    ests = releases(camp, np.tile(truth, (RUNS, 1)), rng)
    assert isinstance(ests[0], RangeEstimate) and ests[0].method == "histogram"
    for lo, hi in ((0, 0), (3, 9), (0, 15), (10, 31), (0, 31)):
        got = [e.ranges([lo], [hi]) for e in ests]
        est = np.array([g[0][0] for g in got])
        var = np.array([g[1][0] ** 2 for g in got])
        if (lo, hi) == (0, 31) and extra.get("oracle") not in ("oue", "sue"):
            # one index per message and F known: the whole domain is exactly n (a variance of 0 up
            # to rounding)
            assert np.allclose(est, 2000) and np.all(var < 1e-6)
            continue
        check(est, float(truth[lo:hi + 1].sum()), var)
    # the per-value std errors are the ranges [v, v]
    e = ests[0]
    assert np.allclose(e.std_error, e.ranges(np.arange(32), np.arange(32))[1])


def test_quantiles_rank_error_as_stated() -> None:
    """The CDF at the true median has the std error the quantile rows state (rank_std_error)."""
    camp = campaign("range", "shuffled-fakes")
    rng = np.random.default_rng(7)
    values = rng.integers(0, 32, 2000)
    truth = np.bincount(values, minlength=32)
    median = int(np.searchsorted(np.cumsum(truth) / 2000, 0.5))
    ests = releases(camp, np.tile(truth, (RUNS, 1)), rng)
    prefix = np.array([e.ranges([0], [median])[0][0] for e in ests]) / 2000
    stated = np.mean([e.ranges([0], [median])[1][0] for e in ests]) / 2000
    assert abs(prefix.std(ddof=1) / stated - 1) <= Z * math.sqrt(1 / (2 * (RUNS - 1)))
    rows = ests[0].quantiles([0.5])
    assert rows[0]["value_ci_low"] <= median <= rows[0]["value_ci_high"]


NUMERIC_CASES = [("shuffled-fakes", {}), ("shuffled-fakes", {"oracle": "grr", "local_epsilon": 2.0}),
                 ("shuffled", {"oracle": "grr"}), ("shuffled", {"oracle": "oue"})]


@pytest.mark.parametrize(("mode", "extra"), NUMERIC_CASES, ids=[f"{m}-{e.get('oracle', 'histogram')}"
                                                                 for m, e in NUMERIC_CASES])
def test_mean_unbiased_with_the_rounding_variance(mode: str, extra: dict) -> None:
    """Values halfway between grid points (t = ½: the rounding's variance is its bound h²/4, so the
    stated variance is exact) and values at grid points (no rounding: the stated one is larger by
    n·h²/4 only)."""
    camp = campaign("numeric", mode, **extra)
    mech = camp.mechanism()
    grid, h = mech.grid(), mech.step  # type: ignore[attr-defined]
    rng = np.random.default_rng(11)
    cells = np.minimum(rng.geometric(0.25, 2000) - 1, 9)
    x = grid[cells] + h / 2  # halfway
    up = rng.binomial(np.tile(np.bincount(cells, minlength=11), (RUNS, 1)), 0.5)
    indices = np.tile(np.bincount(cells, minlength=11), (RUNS, 1)) - up
    indices[:, 1:] += up[:, :-1]
    ests = releases(camp, indices, rng)
    assert isinstance(ests[0], MeanEstimate)
    check(np.array([e.mean for e in ests]), float(x.mean()), np.array([e.std_error ** 2 for e in ests]))
    doc = ests[0].document()
    assert doc["sum"]["estimate"] == pytest.approx(2000 * doc["mean"]["estimate"])
    on_grid = releases(camp, np.tile(np.bincount(cells, minlength=11), (RUNS, 1)), rng)
    means = np.array([e.mean for e in on_grid])
    stated = np.mean([e.std_error ** 2 for e in on_grid])
    assert abs(means.mean() - grid[cells].mean()) <= Z * math.sqrt(stated / RUNS)
    rounding = (h * h / 4) / 2000  # the bound's share of the stated variance of the mean
    assert means.var(ddof=1) <= stated * (1 + Z * math.sqrt(2 / (RUNS - 1)))
    assert means.var(ddof=1) >= (stated - rounding) * (1 - Z * math.sqrt(2 / (RUNS - 1)))


def test_grid_rounding_is_unbiased_with_variance_h2_t_1_minus_t() -> None:
    mech = GridHistogram(11, -5.0, 15.0)  # h = 2
    rng = np.random.default_rng(3)
    for x, t in ((-5.0, 0.0), (0.5, 0.75), (14.9, 0.95), (15.0, 0.0), (99.0, 0.0), (-7.0, 0.0)):
        idx = mech.round_indices(np.full(200_000, x), rng.random(200_000))
        g = mech.grid()[idx]
        clipped = min(max(x, -5.0), 15.0)
        assert g.mean() == pytest.approx(clipped, abs=4.5 * 2 * math.sqrt(t * (1 - t) / 200_000) + 1e-12)
        assert g.var() == pytest.approx(4 * t * (1 - t), rel=0.03, abs=1e-12)
    assert mech.clipped(np.array([-6.0, 0.0, 15.0, 15.5])) == 2


def test_grid_encode_takes_real_values_and_sends_indices() -> None:
    mech = GridGRR(8.0, 5, 0.0, 1.0)
    batch = mech.encode(0.5, campaign="c")
    assert batch.count == 1 and 0 <= batch.grr.values[0] < 5
    many = mech.encode_batch([0.0, 0.3, 1.0], rng=np.random.default_rng(0))
    assert many.count == 3 and max(many.grr.values) < 5
    for bad in (float("nan"), "1", True):
        with pytest.raises(ValueError):
            mech.encode(bad)
    assert mech.public_params() == {"oracle": "grr", "epsilon": 8.0, "domain_size": 5, "lower": 0.0,
                                    "upper": 1.0}


def test_one_index_is_the_oracles_own_count_variance() -> None:
    camp = campaign("range", "shuffled", oracle="oue")
    mech = camp.mechanism()
    stats = index_statistics(mech)
    counts = np.arange(32, dtype=float) * 10
    n = 5000
    assert np.allclose(stats.range_variance(np.arange(32), np.arange(32), counts, n),
                       mech.count_variance(counts, n))
    fakes = IndexStatistics(p=1.0, q=0.0, domain_size=32, fakes=640)
    eight = fakes.range_variance(np.array([0]), np.array([7]), counts, n)[0]
    assert eight == pytest.approx(640 * 0.25 * 0.75)
