"""``version=all``'s inverse-variance combination (``aggregator/combine.py``) is unbiased and its
std error is exact: two GRR versions over one domain (ε = 1 and ε = 3, 4,000 reports each, the
same true distribution held by exactly n_v·f devices in each), 400 independent randomizations.

Tolerances: the mean of T = 400 combined estimates is within 4·SD/√T of N·f per item; the
empirical SD over the trials matches the mean reported std error within 4/√(2T) = 14 % (the
relative std error of a sample SD from T draws is ≈ 1/√(2T))."""

from __future__ import annotations

import numpy as np
import pytest

from ldptel.aggregator.decoders import accumulator_for
from ldptel.client import create_mechanism
from ldptel.mechanisms.combine import VersionPart, inverse_variance

TRIALS = 400
F_COUNTS = np.array([2000, 1000, 500, 300, 200])  # per version: n_v·f, n_v = 4,000


def part(mech, values: np.ndarray, rng: np.random.Generator) -> VersionPart:
    acc = accumulator_for(mech)
    acc.add(mech.encode_batch(values, rng=rng, campaign="c"))
    est = acc.estimate()
    return VersionPart(acc.n, est.counts, est.std_error, mech.variance_star())


@pytest.mark.slow
def test_inverse_variance_combination_is_unbiased_with_exact_std_error() -> None:
    mechs = [create_mechanism("grr", epsilon=eps, domain_size=5) for eps in (1.0, 3.0)]
    values = np.repeat(np.arange(5), F_COUNTS)
    rng = np.random.default_rng(2026)
    counts, errors, singles = [], [], []
    for _ in range(TRIALS):
        parts = [part(m, values, rng) for m in mechs]
        est = inverse_variance(parts)
        counts.append(est.counts)
        errors.append(est.std_error)
        singles.append(parts[0].counts * 2)  # version 1 alone, scaled to N: unbiased, noisier
    counts, errors = np.array(counts), np.array(errors)
    truth = 2 * F_COUNTS
    sd = counts.std(axis=0, ddof=1)
    mean = counts.mean(axis=0)
    assert np.all(np.abs(mean - truth) <= 4 * sd / np.sqrt(TRIALS)), (mean, truth)
    ratio = sd / errors.mean(axis=0)
    assert np.all(np.abs(ratio - 1) <= 4 / np.sqrt(2 * TRIALS)), ratio
    assert np.all(sd < np.array(singles).std(axis=0, ddof=1))  # the combination helps


def test_one_version_combines_to_itself_and_weights_follow_variance_star() -> None:
    one = VersionPart(100, np.array([60.0, 40.0]), np.array([5.0, 5.0]), 2.0)
    est = inverse_variance([one], ["a", "b"])
    assert est.n == 100 and np.allclose(est.counts, [60, 40]) and np.allclose(est.std_error, [5, 5])
    # a version with 4x less per-report variance gets 4x the weight per report
    noisy = VersionPart(100, np.array([50.0, 50.0]), np.array([10.0, 10.0]), 4.0)
    quiet = VersionPart(100, np.array([70.0, 30.0]), np.array([5.0, 5.0]), 1.0)
    est = inverse_variance([noisy, quiet])
    assert np.allclose(est.counts, 200 * (np.array([50, 50]) / 4 + np.array([70, 30])) / (100 / 4 + 100))
    assert np.allclose(est.std_error, 200 * np.sqrt((10 / 4) ** 2 + 5.0 ** 2) / 125)
    with pytest.raises(ValueError):
        inverse_variance([])
