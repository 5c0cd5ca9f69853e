"""The planner (ldptel.privacy_plan), composition (ldptel.privacy_accounting) and `ldptel privacy
plan`: the issue's figures, U ≥ L for every plan, the decode simulated at the planned ε₀, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldptel.commands.cli import main
from ldptel.config import parse_config
from ldptel.errors import ConfigError, UncertifiableTarget
from ldptel.mechanisms.grr import perturb_categorical
from ldptel.privacy_accounting import cumulative_epsilon
from ldptel.privacy_plan import fakes_curve, plan


def test_shuffled_grr_issue_figures() -> None:
    """GRR, d = 1,024, n = 10⁶, central ε = 1, δ = 10⁻⁸: std error ≤ 10 (FMT21 alone: ε₀ ≈ 9.0, 11.8)."""
    p = plan("shuffled", "grr", 1024, 1.0, 1e-8, 1_000_000)
    assert p.local_epsilon is not None and p.local_epsilon > 9.5
    assert p.std_error is not None and p.std_error <= 10
    assert p.central_epsilon_lower <= p.central_epsilon <= 1.0
    assert p.fake_rate is None


def test_shuffled_fakes_issue_figures() -> None:
    p = plan("shuffled-fakes", "histogram", 1024, 1.0, 1e-8, 100_000)
    assert p.std_error == pytest.approx(7.88, abs=0.01)
    assert p.fake_rate == pytest.approx(0.636, abs=0.001)
    assert p.local_epsilon is None
    assert p.central_epsilon_lower <= p.central_epsilon <= 1.0


@pytest.mark.parametrize("oracle", ["grr", "oue", "sue", "olh", "hadamard", "rappor"])
def test_every_oracle_plans_soundly(oracle: str) -> None:
    p = plan("shuffled", oracle, 100, 0.5, 1e-6, 100_000)
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
    p = plan("shuffled-fakes", "histogram", 1024, 1.0, 1e-8, 100_000, windows=10)
    assert p.cumulative_epsilon == pytest.approx(ten, rel=0.01)


def test_errors() -> None:
    with pytest.raises(UncertifiableTarget) as info:
        plan("shuffled-fakes", "histogram", 100_000, 0.1, 1e-8, 1000)
    assert isinstance(info.value, ConfigError)
    assert info.value.suggestion["batch_min"] > 1000
    assert plan("shuffled-fakes", "histogram", 100_000, 0.1, 1e-8, info.value.suggestion["batch_min"])
    for bad in [dict(mode="local"), dict(oracle="histogram"), dict(domain_size=1), dict(central_delta=1.0),
                dict(central_epsilon=0), dict(batch_min=1), dict(windows=0)]:
        args = dict(mode="shuffled", oracle="grr", domain_size=16, central_epsilon=1.0, central_delta=1e-6,
                    batch_min=1000) | bad
        with pytest.raises(ValueError):
            plan(**args)  # type: ignore[arg-type]


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
    p = plan("shuffled", "grr", 1024, 1.0, 1e-8, 1_000_000)
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
