"""The fake-message analysis (ldptel.privacy.fake_messages) against a brute-force sum over both
Poisson counts, the issue's figures (ε = 1, δ = 10⁻⁸: μ ≈ 62.1, std error ≈ 7.9), and negative
controls: an analysis with the fakes switched off, or the wrong δ sum, is caught."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldptel.privacy.fake_messages import (
    fake_delta,
    fake_epsilon,
    fake_rate,
    fakes_for,
    grr_gamma,
    local_fake_delta,
)


def brute_force_delta(epsilon: float, mu: float, fakes_in_a: bool = True) -> float:
    """Σ over (x, y) of max(0, P − e^ε Q): P = (A + 1, B), Q = (A, B + 1), A, B ~ Poisson(μ), straight
    from the definition (both coordinates up to where the Poisson mass is < 10⁻³⁰). With
    ``fakes_in_a=False`` bucket a holds no fakes (a broken deployment)."""
    top = int(mu + 40 * math.sqrt(mu) + 60)
    pmf = stats.poisson.pmf(np.arange(top + 1), mu)
    fakes_a = pmf if fakes_in_a else (np.arange(top + 1) == 0).astype(float)
    shifted = np.concatenate([[0.0], pmf[:-1]])  # law of B + 1 (or A + 1) at each count
    shifted_a = np.concatenate([[0.0], fakes_a[:-1]])
    p = np.outer(shifted_a, pmf)  # P(x, y): x = A + 1, y = B
    q = np.outer(fakes_a, shifted)  # Q(x, y): x = A, y = B + 1
    return float(np.sum(np.maximum(0.0, p - math.exp(epsilon) * q)))


@pytest.mark.parametrize("epsilon, mu", [(1.0, 62.1), (0.5, 30.0), (2.0, 8.0), (0.2, 150.0), (1.0, 3.0)])
def test_matches_brute_force(epsilon: float, mu: float) -> None:
    exact = brute_force_delta(epsilon, mu)
    upper, lower = fake_delta(epsilon, mu), fake_delta(epsilon, mu, upper=False)
    assert lower <= exact * (1 + 1e-9) + 1e-300
    assert upper >= exact * (1 - 1e-9)
    assert upper == pytest.approx(exact, rel=1e-7, abs=1e-25)


def test_issue_figures() -> None:
    """ε = 1, δ = 10⁻⁸: μ ≈ 62.1 fakes per bucket, std error √μ ≈ 7.9; d = 1,024 over 10⁵ devices:
    λ ≈ 0.64 fake messages per device."""
    mu = fakes_for(1.0, 1e-8)
    assert 62.0 <= mu <= 62.2
    assert fake_delta(1.0, mu) <= 1e-8 < fake_delta(1.0, mu / (1 + 2e-4))  # smallest on its grid
    assert math.sqrt(mu) == pytest.approx(7.88, abs=0.01)
    assert fake_rate(mu, 1024, 100_000) == pytest.approx(0.636, abs=0.001)
    assert fake_epsilon(mu, 1e-8) <= 1.0
    assert 0.999 <= fake_epsilon(mu, 1e-8, upper=False) <= 1.0


def test_delta_falls_in_mu_and_epsilon_and_has_the_floor() -> None:
    deltas = [fake_delta(1.0, mu) for mu in (10.0, 20.0, 40.0, 80.0)]
    assert deltas == sorted(deltas, reverse=True)
    assert [fake_delta(e, 40.0) for e in (0.5, 1.0, 2.0)] == sorted(
        [fake_delta(e, 40.0) for e in (0.5, 1.0, 2.0)], reverse=True)
    for mu in (5.0, 20.0):  # B = 0: ratio ∞, so δ ≥ e^{−μ} at every ε
        assert fake_delta(30.0, mu) >= math.exp(-mu) * (1 - 1e-9)


def test_negative_control_fakes_switched_off_is_caught() -> None:
    """A deployment that drops bucket a's fakes is far worse than the claim; the brute force sees
    it, and the claimed bound is below it (the test above would fail on such an analysis)."""
    mu = fakes_for(1.0, 1e-8)
    broken = brute_force_delta(1.0, mu, fakes_in_a=False)
    assert broken > 100 * fake_delta(1.0, mu)


def test_negative_control_wrong_sum_is_caught() -> None:
    """Dropping the e^ε·μ/(a+1) term (a wrong δ sum) overstates δ; one summing only b = 0 (the
    floor e^{−μ}) understates it: both miss the brute force by far more than the tolerance."""
    epsilon, mu = 1.0, 30.0
    exact = brute_force_delta(epsilon, mu)
    only_floor = math.exp(-mu)
    assert abs(only_floor - exact) > 1e-3 * exact
    assert fake_delta(epsilon, mu) == pytest.approx(exact, rel=1e-7)


def test_local_randomization_on_top() -> None:
    """GRR at ε_l on top: γ·(…)·δ(ε) is never above the plain δ at the same ε, and it needs fewer
    fakes; with γ = 1 it cannot be below the plain analysis."""
    gamma = grr_gamma(4.0, 1024)
    assert gamma == pytest.approx((math.exp(4) - 1) / (math.exp(4) + 1023))
    mu = fakes_for(1.0, 1e-8, local_epsilon=4.0, domain_size=1024)
    assert mu < fakes_for(1.0, 1e-8)
    assert local_fake_delta(1.0, mu, 4.0, 1024) <= 1e-8
    assert local_fake_delta(1.0, 30.0, 4.0, 1024) <= fake_delta(1.0, 30.0)
