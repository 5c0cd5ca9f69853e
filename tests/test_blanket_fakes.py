"""Poisson fakes inside the GRR blanket (ldptel.privacy.blanket_fakes; issue 38, Build 2): the
issue's plan (μ ≤ 7.2 with the attack's μ printed beside it), the bound against the exact δ of the
real release (brute force over every histogram at d = 3), a deliberately broken bound caught, the
bound ≥ the attack on a grid, and U < L raising instead of being clipped."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from scipy import stats

from ldptel.commands.cli import main
from ldptel.privacy import blanket_fakes, planner
from ldptel.privacy.blanket_fakes import fakes_attack_delta, fakes_blanket_delta
from ldptel.privacy.planner import CentralBound


def test_issue_plan(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """`ldptel privacy plan ... --local-epsilon 8 --domain-size 1024 --central-epsilon 1
    --central-delta 1e-8 --batch-min 100000`: μ ≤ 7.2 (measured 7.051; advanced joint convexity
    asked 46.42), fake_rate ≤ 0.0737, central ε ≤ 1, the attack's μ (7.018) printed beside it."""
    monkeypatch.setenv("LDPTEL_PLAN_CACHE", str(tmp_path / "plans.json"))
    planner._plan.cache_clear()
    started = time.perf_counter()
    rc = main(["privacy", "plan", "--mode", "shuffled-fakes", "--oracle", "grr", "--local-epsilon", "8",
               "--domain-size", "1024", "--central-epsilon", "1", "--central-delta", "1e-8",
               "--batch-min", "100000", "--format", "json"])
    seconds = time.perf_counter() - started
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fakes_per_bucket"] <= 7.2 and doc["fake_rate"] <= 0.0737
    assert doc["central_epsilon_lower"] <= doc["central_epsilon"] <= 1.0
    lower = doc["fakes_per_bucket_lower"]
    assert 7.0 <= lower <= doc["fakes_per_bucket"] <= 1.01 * lower
    assert doc["bound"] == planner.BOUND_FAKES_BLANKET
    assert doc["std_error"] < 7.7  # √(n·q(1−q) + μ)/(p − q): 7.60 against 11.35 with μ = 46.42
    assert seconds < 10, seconds  # measured ≈ 0.6 s on one free core
    rc = main(["privacy", "plan", "--mode", "shuffled-fakes", "--oracle", "grr", "--local-epsilon", "8",
               "--domain-size", "1024", "--central-epsilon", "1", "--central-delta", "1e-8",
               "--batch-min", "100000"])
    assert rc == 0 and "attack needs μ ≥ 7.018 per bucket" in capsys.readouterr().out


def _release_law(values: list[int], d: int, epsilon_l: float, mu: float, top: int) -> np.ndarray:
    """The exact law of the released histogram (counts < ``top`` per bucket; d = 3): each device's
    GRR(ε_l) report plus Poisson(μ) fakes in each bucket (independent: the fakes of n devices at
    rate λ = μ·d/n)."""
    assert d == 3
    e = math.exp(epsilon_l)
    law = np.zeros((top,) * 3)
    law[0, 0, 0] = 1.0
    for v in values:
        nxt = np.zeros_like(law)
        for y in range(d):
            prob = (e if y == v else 1.0) / (e + d - 1)
            shifted = np.roll(law, 1, axis=y)
            index = [slice(None)] * 3
            index[y] = 0
            shifted[tuple(index)] = 0.0
            nxt += prob * shifted
        law = nxt
    fake = stats.poisson.pmf(np.arange(top), mu)
    for axis in range(3):  # convolve each bucket with its Poisson fakes (truncated at top)
        law = np.apply_along_axis(lambda row: np.convolve(row, fake)[:top], axis, law)
    return law


def _exact_delta(epsilon: float, values: list[int], neighbour: list[int], epsilon_l: float,
                 mu: float) -> float:
    top = 40  # P(Poisson(0.8) + 4 reports ≥ 40 in one bucket) < 1e-30: far below the tolerance
    p = _release_law(values, 3, epsilon_l, mu, top)
    q = _release_law(neighbour, 3, epsilon_l, mu, top)
    e = math.exp(epsilon)
    return max(float(np.sum(np.maximum(p - e * q, 0))), float(np.sum(np.maximum(q - e * p, 0))))


@pytest.mark.parametrize("others", [[2, 2, 2], [0, 1, 2], [0, 0, 0], [1, 1, 2]])
def test_bound_holds_on_the_real_release(others: list[int]) -> None:
    """n = 4, d = 3, ε_l = 3, μ = 0.8: the exact δ of the real release (every histogram) never
    exceeds the bound; the attack (others on a third value) never exceeds its dataset's exact δ."""
    epsilon_l, mu, n = 3.0, 0.8, 4
    for epsilon in (0.3, 0.8, 1.5, 2.5):
        exact = _exact_delta(epsilon, [0, *others], [1, *others], epsilon_l, mu)
        assert exact <= fakes_blanket_delta(epsilon, mu, epsilon_l, 3, n) + 1e-12, (others, epsilon)
        if others == [2, 2, 2]:
            assert fakes_attack_delta(epsilon, mu, epsilon_l, 3, n) <= exact + 1e-12


def test_negative_control_a_broken_bound_is_caught() -> None:
    """A bound that counts the fakes twice (F ~ Poisson(2·d·μ) instead of Poisson(d·μ)) claims less
    δ than the real release has: the brute force catches it, while the real bound holds."""
    epsilon_l, mu, n, epsilon = 3.0, 0.8, 4, 0.8
    exact = _exact_delta(epsilon, [0, 2, 2, 2], [1, 2, 2, 2], epsilon_l, mu)
    broken = fakes_blanket_delta(epsilon, 2 * mu, epsilon_l, 3, n)
    assert broken < exact <= fakes_blanket_delta(epsilon, mu, epsilon_l, 3, n)


@pytest.mark.parametrize(("d", "n", "epsilon_l"), [(16, 1_000, 4.0), (1024, 100_000, 8.0),
                                                    (64, 10_000, 6.0), (1024, 1_000_000, 10.0)])
def test_bound_is_above_the_attack_and_close_to_it(d: int, n: int, epsilon_l: float) -> None:
    """U ≥ L at every ε and μ of a small grid; where δ is small U/L ≤ 1.3 (the ε gap is far smaller:
    the plan's μ is within 0.5 % of the attack's at the issue's shape)."""
    for mu, epsilon in ((0.5, 0.5), (3.0, 1.0), (7.0, 1.0), (20.0, 0.5), (20.0, 2.0)):
        upper = fakes_blanket_delta(epsilon, mu, epsilon_l, d, n)
        lower = fakes_attack_delta(epsilon, mu, epsilon_l, d, n)
        assert lower <= upper, (mu, epsilon, lower, upper)
        if 1e-12 < upper < 1e-3:
            assert upper <= 1.3 * lower, (mu, epsilon, lower, upper)


def test_both_ways_of_summing_the_blocks_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocks' masses by convolution (small bulks) and by the Poisson cdf (large ones) agree."""
    direct = fakes_blanket_delta(1.0, 7.05, 8.0, 1024, 100_000)
    monkeypatch.setattr(blanket_fakes, "_DIRECT", 0)
    blanket_fakes._draw_blocks.cache_clear()
    blanket_fakes.fakes_blanket_delta.cache_clear()
    assert fakes_blanket_delta(1.0, 7.05, 8.0, 1024, 100_000) == pytest.approx(direct, rel=1e-9)
    blanket_fakes._draw_blocks.cache_clear()
    blanket_fakes.fakes_blanket_delta.cache_clear()


def test_a_lower_bound_above_the_certified_one_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38 Build 4: U < L is a bug and raises; it was clipped (L := U), hiding an unsound U."""
    with pytest.raises(AssertionError, match="unsound bound"):
        planner._checked(CentralBound(epsilon=0.5, epsilon_lower=0.6, delta=1e-8, bound="x"))
    planner.shuffled_bound.cache_clear()
    monkeypatch.setattr(planner, "amplified_epsilon_lower", lambda *a, **k: 9.0)
    with pytest.raises(AssertionError, match="unsound bound"):
        planner.shuffled_bound("grr", 4.0, 16, 1000, 1e-6)
    planner.shuffled_bound.cache_clear()


def test_the_cumulative_curve_is_the_blanket_one() -> None:
    """The window composition uses the blanket-with-fakes curve (advanced joint convexity alone
    certifies no ε at all at μ = 7.05, δ = 10⁻⁸): one window composes to the release's own ε
    (measured 1.0007: the accountant's pessimistic discretization)."""
    one = planner.compute_plan("shuffled-fakes", "grr", 1024, 1.0, 1e-8, 100_000, windows=1,
                               local_epsilon=8.0)
    assert one.cumulative_epsilon is not None and one.cumulative_epsilon <= 1.05, one.cumulative_epsilon
    assert planner.cumulative_epsilon([(planner.fakes_curve(7.05, 8.0, 1024), 1)], 1e-8) == math.inf
