"""The planner (ldptel.privacy.planner), composition (ldptel.privacy.accounting) and `ldptel privacy
plan`: the issue's figures, U ≥ L for every plan, the decode simulated at the planned ε₀, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldptel.campaigns.campaign import parse_campaign
from ldptel.campaigns.config import parse_config
from ldptel.commands.cli import main
from ldptel.errors import ConfigError, UncertifiableTarget
from ldptel.mechanisms.grr import perturb_categorical
from ldptel.privacy.accounting import MAX_RELEASES, cumulative_epsilon
from ldptel.privacy.planner import MAX_MU, MIN_DELTA, compute_plan, fakes_curve


def test_shuffled_grr_issue_figures() -> None:
    """GRR, d = 1,024, n = 10⁶, central ε = 1, δ = 10⁻⁸: std error ≤ 10 (FMT21 alone: ε₀ ≈ 9.0, 11.8)."""
    p = compute_plan("shuffled", "grr", 1024, 1.0, 1e-8, 1_000_000)
    assert p.local_epsilon is not None and p.local_epsilon > 9.5
    assert p.std_error is not None and p.std_error <= 10
    assert p.central_epsilon_lower <= p.central_epsilon <= 1.0
    assert p.fake_rate is None


def test_shuffled_fakes_issue_figures() -> None:
    p = compute_plan("shuffled-fakes", "histogram", 1024, 1.0, 1e-8, 100_000)
    assert p.std_error == pytest.approx(7.88, abs=0.01)
    assert p.fake_rate == pytest.approx(0.636, abs=0.001)
    assert p.local_epsilon is None
    assert p.central_epsilon_lower <= p.central_epsilon <= 1.0


@pytest.mark.parametrize("oracle", ["grr", "oue", "sue", "olh", "hadamard", "rappor"])
def test_every_oracle_plans_soundly(oracle: str) -> None:
    p = compute_plan("shuffled", oracle, 100, 0.5, 1e-6, 100_000)
    assert 0 < p.central_epsilon_lower <= p.central_epsilon <= 0.5
    assert p.local_epsilon is not None and p.local_epsilon > 0.5  # amplified
    assert (p.std_error is None) == (oracle == "rappor")


def test_composition() -> None:
    """One release composes to about its own ε; more releases cost more, less than T·ε."""
    curve = fakes_curve(62.1)
    one = cumulative_epsilon([(curve, 1)], 1e-8)
    assert 1.0 <= one <= 1.1
    ten = cumulative_epsilon([(curve, 10)], 1e-8)
    assert one < ten < 10 * one
    assert cumulative_epsilon([(curve, 5), (curve, 5)], 1e-8) == pytest.approx(ten, rel=1e-6)
    p = compute_plan("shuffled-fakes", "histogram", 1024, 1.0, 1e-8, 100_000, windows=10)
    assert p.cumulative_epsilon == pytest.approx(ten, rel=0.01)


def test_errors() -> None:
    with pytest.raises(UncertifiableTarget) as info:
        compute_plan("shuffled-fakes", "histogram", 100_000, 0.1, 1e-8, 1000)
    assert isinstance(info.value, ConfigError)
    assert info.value.suggestion["batch_min"] > 1000
    assert compute_plan("shuffled-fakes", "histogram", 100_000, 0.1, 1e-8, info.value.suggestion["batch_min"])
    for bad in [dict(mode="local"), dict(oracle="histogram"), dict(domain_size=1), dict(central_delta=1.0),
                dict(central_epsilon=0), dict(batch_min=1), dict(windows=0)]:
        args = dict(mode="shuffled", oracle="grr", domain_size=16, central_epsilon=1.0, central_delta=1e-6,
                    batch_min=1000) | bad
        with pytest.raises(ValueError):
            compute_plan(**args)  # type: ignore[arg-type]


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["privacy", "plan", "--mode", "shuffled-fakes", "--oracle", "histogram",
               "--domain-size", "1024",
               "--central-epsilon", "1", "--central-delta", "1e-8", "--batch-min", "100000", "--windows", "4",
               "--format", "json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("mode", "oracle", "local_epsilon", "fake_rate", "central_epsilon", "central_epsilon_lower",
                "central_delta", "batch_min", "std_error", "bound", "cumulative_epsilon"):
        assert key in doc
    assert doc["local_epsilon"] is None and doc["central_epsilon"] <= 1.0


@pytest.mark.parametrize(("mode", "oracle", "extra", "refused"), [
    ("shuffled", "rappor", [], "--oracle must be one of grr, oue, sue, olh, hadamard with --mode shuffled"),
    ("shuffled", "histogram", [], "--oracle must be one of"),
    ("shuffled", "grr", ["--local-epsilon", "2"], "--local-epsilon applies to --mode shuffled-fakes"),
    ("shuffled-fakes", "oue", [], "sends an index"),
    ("shuffled-fakes", "grr", [], "sends an index"),
])
def test_cli_refuses_what_a_config_refuses(capsys: pytest.CaptureFixture[str], mode: str, oracle: str,
                                           extra: list[str], refused: str, tmp_path) -> None:
    """Issue 35: ``privacy plan --mode shuffled --oracle rappor`` printed a plan that the config
    then refused; the command refuses every (mode, oracle) a campaign config refuses."""
    rc = main(["privacy", "plan", "--mode", mode, "--oracle", oracle, "--domain-size", "64",
               "--central-epsilon", "1", "--central-delta", "1e-6", "--batch-min", "10000", *extra])
    out = capsys.readouterr()
    assert rc == 2 and refused in out.err and out.out == "", out
    table = {"name": "x", "kind": "frequency", "domain_size": 64, "privacy_mode": mode, "oracle": oracle,
             "central_epsilon": 1.0, "central_delta": 1e-6, "batch_min": 10000}
    if "--local-epsilon" in extra:
        table["local_epsilon"] = 2.0
    with pytest.raises(ConfigError):  # the config refuses the same
        parse_config({"campaigns": [table]})


def test_cli_text_and_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["privacy", "plan", "--mode", "shuffled", "--oracle", "grr", "--central-epsilon", "1",
            "--central-delta", "1e-6", "--batch-min", "10000"]
    assert main([*base, "--domain-size", "64"]) == 0
    assert "central ε between" in capsys.readouterr().out
    assert main([*base, "--domain-size", "1"]) == 2
    assert "domain_size" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main([*base[:3], "bogus", *base[5:], "--domain-size", "64"])
    assert info.value.code == 2


@pytest.mark.slow
def test_simulated_decode_at_the_planned_epsilon0() -> None:
    """Seeded simulation of the GRR decode at n = 10⁶, d = 1,024, ε₀ planned for central ε = 1,
    δ = 10⁻⁸: the empirical std error of the unbiased count over 12 runs is within 25 % of the
    planned one (≤ 10)."""
    p = compute_plan("shuffled", "grr", 1024, 1.0, 1e-8, 1_000_000)
    assert p.local_epsilon is not None and p.std_error is not None
    e = math.exp(p.local_epsilon)
    keep, q = e / (e + 1023), 1 / (e + 1023)
    rng = np.random.default_rng(2026)
    values = rng.zipf(1.3, 1_000_000) % 512  # buckets 512–1023 stay empty: the null std error
    truth = np.bincount(values, minlength=1024)
    errors = []
    for _ in range(12):
        support = np.bincount(perturb_categorical(values, 1024, keep, rng), minlength=1024)
        errors.append((support - 1_000_000 * q) / (keep - q) - truth)
    empirical = float(np.std(np.concatenate(errors)[np.tile(truth, 12) == 0]))
    print(f"planned ε₀ = {p.local_epsilon}, std error {p.std_error:.3f}, empirical {empirical:.3f}")
    assert empirical == pytest.approx(p.std_error, rel=0.05)
    assert empirical <= 10


def test_delta_below_what_the_bounds_certify_is_refused_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34 item 3: the planner doubled μ without end below δ ≈ 1e-20 (`ldptel privacy plan`
    with δ = 1e-300 reached 5.9 GB in 60 s); now δ < MIN_DELTA is refused before any search."""
    from proc_support import budget

    for delta in (1e-19, 1e-30, 1e-300):
        for mode, oracle in (("shuffled-fakes", "histogram"), ("shuffled", "grr")):
            with budget() as cost, pytest.raises(UncertifiableTarget) as info:
                compute_plan(mode, oracle, 16, 1.0, delta, 1000)
            assert info.value.suggestion == {"central_delta": MIN_DELTA} and "1e-18 works" in str(info.value)
            assert cost["seconds"] < 1 and cost["rss_growth_mb"] < 50, (mode, delta, cost)
    with budget() as cost:
        rc = main(["privacy", "plan", "--mode", "shuffled-fakes", "--oracle", "histogram",
                   "--domain-size", "16", "--central-epsilon", "1", "--central-delta", "1e-300",
                   "--batch-min", "1000"])
    assert rc == 2 and "central_delta = 1e-300 is below 1e-18" in capsys.readouterr().err
    assert cost["seconds"] < 1 and cost["rss_growth_mb"] < 50, cost
    floor = compute_plan("shuffled-fakes", "histogram", 16, 1.0, MIN_DELTA, 1000)
    assert floor.central_epsilon <= 1.0  # the floor itself is certified


def test_fakes_per_bucket_are_capped() -> None:
    """μ stops at MAX_MU: a target that needs more is refused with the smallest one that works."""
    with pytest.raises(UncertifiableTarget) as info:
        compute_plan("shuffled-fakes", "histogram", 16, 0.001, 1e-8, 10**7)
    least = info.value.suggestion["central_epsilon"]
    assert "central_epsilon = 0.001 at δ = 1e-08 needs more than 1e+06 fakes" in str(info.value)
    p = compute_plan("shuffled-fakes", "histogram", 16, least, 1e-8, 10**7)
    assert p.fakes_per_bucket is not None and p.fakes_per_bucket <= MAX_MU


def test_a_tiny_central_epsilon_is_named_as_given() -> None:
    """Issue 34 item 10: central_epsilon = 1e-9 was refused as "epsilon must satisfy 0.01 <= epsilon
    <= 10, got 0.001" (the planner's fallback ε₀, not the value given)."""
    table = {"name": "x", "domain_size": 16, "central_epsilon": 1e-9, "batch_min": 1000}
    for mode in ("shuffled", "shuffled-fakes"):
        with pytest.raises(UncertifiableTarget) as info:
            parse_campaign({**table, "privacy_mode": mode}, "campaigns[0]")
        message = str(info.value)
        assert message.startswith("campaigns[x].central_epsilon: ") and "central_epsilon = 1e-09" in message
        assert "got 0.001" not in message, message
        least = info.value.suggestion["central_epsilon"]
        camp = parse_campaign({**table, "privacy_mode": mode, "central_epsilon": least}, "c")
        assert camp.mode.central_epsilon == least


def test_composition_bounds() -> None:
    """Issue 34 items 2 and 4: a curve with mass at infinite loss (fakes: e^−μ, no fake in a bucket)
    composes, that mass going to +∞, instead of "δ(ε) stays above 1e-16 up to ε = 60"; more
    releases than MAX_RELEASES are refused before any work (T = 5.27 M grew > 1 GB)."""
    curve = fakes_curve(16.0)  # central_delta = 0.001 plans μ ≈ 16 for a target of 1
    eps = cumulative_epsilon([(curve, 30)], 1e-3)
    assert 1 < eps < 30
    assert cumulative_epsilon([(curve, 30)], 1e-9) == math.inf  # 30·e^−16 > 1e-9: no ε reaches it
    with pytest.raises(ValueError, match="10,000"):
        cumulative_epsilon([(curve, MAX_RELEASES + 1)], 1e-3)
    with pytest.raises(ValueError, match="windows"):
        compute_plan("shuffled-fakes", "histogram", 16, 1.0, 1e-8, 1000, windows=5_270_400)


def test_a_retention_composing_too_many_windows_is_refused() -> None:
    from proc_support import budget

    table = {"name": "x", "domain_size": 16, "privacy_mode": "shuffled-fakes", "central_epsilon": 1.0,
             "batch_min": 1000, "window": "1m"}
    with budget() as cost, pytest.raises(ConfigError) as info:
        parse_campaign({**table, "retention": "3660d"}, "c")
    assert str(info.value) == ("campaigns[x].retention: keeps 5,270,400 windows of 1m: a shuffled campaign's "
                               "cumulative ε composes at most 10,000 (MAX_RELEASES_COMPOSED); retention <= "
                               "\"6d\" works with window = '1m', got '3660d'")
    assert cost["seconds"] < 1 and cost["rss_growth_mb"] < 50, cost
    assert parse_campaign({**table, "retention": "6d"}, "c").retention == "6d"
    assert parse_campaign({"name": "y", "oracle": "grr", "epsilon": 1.0, "domain_size": 4, "window": "1m",
                           "retention": "3660d"}, "c").retention == "3660d"  # local: nothing composed
