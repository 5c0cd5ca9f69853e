"""Numeric mechanisms: the mean is unbiased on a skewed population, its variance is the formula,
and the published 95 % CI covers at its nominal rate — for every mechanism at ε ∈ {0.5, 1, 2, 4}.

Population: values ~ lognormal(μ = 0.5, σ = 1) clipped to [0, 10] (≈ 3.6 % clipped at 10; mean
≈ 2.4, a long right tail). Each check runs the mechanism's vectorized randomizer (what
``encode_batch`` packs) and its unbiased values ``unbiased_unit`` (what the accumulator sums).

Tolerances, from the variance formulas (R repetitions of N reports):
- unbiased: with a fixed population of N = 1000 values, the grand mean of R = 2000 repeated
  means has variance V/R, V = ``mean_variance`` = Σ Var(y | tᵢ)/N²; we require
  |grand mean − population mean| ≤ 4·√(V/R).
- variance ratio: the sample variance of the R means, divided by V, has sd ≈ √(2/(R − 1)) =
  0.032 (the means are near normal: averages of 1000 bounded values), so the required
  [0.85, 1.15] is ±4.7 sd.
- coverage: R = 2000 populations drawn afresh (the devices are a sample of the lognormal
  population, the model the published std error s/√N is exact for); the CI mean ± 1.96·s/√N
  must contain the population's true mean E[min(X, 10)] (closed form below) in a share of
  Binomial(R, 0.95)/R: sd = √(0.95·0.05/R) = 0.0049, required within ±4 sd of 0.95.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from ldptel.mechanisms import NUMERIC_MECHANISMS
from ldptel.mechanisms.base import Z95
from ldptel.mechanisms.numeric import NumericMechanism

pytestmark = pytest.mark.slow

MU, SIGMA, LOWER, UPPER = 0.5, 1.0, 0.0, 10.0
N, R = 1000, 2000
EPSILONS = [0.5, 1.0, 2.0, 4.0]


def population(rng: np.random.Generator, size: int) -> np.ndarray:
    return np.clip(rng.lognormal(MU, SIGMA, size), LOWER, UPPER)


def true_mean() -> float:
    """E[min(X, U)] for X ~ lognormal(μ, σ): e^{μ+σ²/2}·Φ((ln U − μ − σ²)/σ) + U·P(X > U)."""
    z = (math.log(UPPER) - MU) / SIGMA
    return math.exp(MU + SIGMA ** 2 / 2) * norm.cdf(z - SIGMA) + UPPER * norm.sf(z)


def repeated_means(mech: NumericMechanism, values: np.ndarray, rng: np.random.Generator,
                   reps: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, variance of the mean) in value units of each of ``reps`` rows of ``values``
    (shape reps × N, or N repeated), as the accumulator computes them (``mean_estimate``)."""
    rows = np.broadcast_to(values, (reps, values.shape[-1]))
    y = mech.unbiased_unit(mech.randomize(rows.reshape(-1), rng)).reshape(rows.shape)
    n = rows.shape[1]
    est = [mech.mean_estimate(n, float(s1), float(s2))
           for s1, s2 in zip(y.sum(axis=1), np.square(y).sum(axis=1), strict=True)]
    return np.array([e[0] for e in est]), np.array([e[1] for e in est])


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("name", list(NUMERIC_MECHANISMS))
def test_mean_unbiased_with_formula_variance(name: str, epsilon: float) -> None:
    mech = NUMERIC_MECHANISMS[name](epsilon, LOWER, UPPER)
    rng = np.random.default_rng(1000 + int(epsilon * 10))
    values = population(rng, N)
    means, _ = repeated_means(mech, values, rng, R)
    formula = mech.mean_variance(values) * mech.half_width ** 2  # Var[ȳ] in value units
    z = (means.mean() - values.mean()) / math.sqrt(formula / R)
    ratio = means.var(ddof=1) / formula
    print(f"{name} ε={epsilon}: bias {z:+.2f} se, variance ratio {ratio:.3f}")
    assert abs(z) <= 4, z
    assert 0.85 <= ratio <= 1.15, ratio


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("name", list(NUMERIC_MECHANISMS))
def test_ci_coverage(name: str, epsilon: float) -> None:
    mech = NUMERIC_MECHANISMS[name](epsilon, LOWER, UPPER)
    rng = np.random.default_rng(2000 + int(epsilon * 10))
    means, variances = repeated_means(mech, population(rng, (R, N)), rng, R)
    se = np.sqrt(variances)
    covered = np.abs(means - true_mean()) <= Z95 * se
    sd = math.sqrt(0.95 * 0.05 / R)
    print(f"{name} ε={epsilon}: coverage {covered.mean():.4f}")
    assert abs(covered.mean() - 0.95) <= 4 * sd, covered.mean()


def test_true_mean_formula() -> None:
    """The closed form above against a large sample (sd of the sample mean ≈ 0.0013)."""
    sample = population(np.random.default_rng(5), 4_000_000)
    assert abs(sample.mean() - true_mean()) < 4 * sample.std() / 2000
