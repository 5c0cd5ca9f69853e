"""``ldptel audit``: the per-report ratio test and the averaging attack on each campaign's
mechanism as configured, with deliberately broken mechanisms as negative controls.

Ratio test: 200 000 reports per input, Clopper–Pearson at α = 1e-6 (``ldptel.privacy.ldp_check``), so an
honest mechanism is flagged with probability ≤ 1e-6; GRR randomizing at 1.25·ε while claiming ε
has a true ratio e^{1.25ε} that the intervals (±≈1.5 % at these counts) resolve easily.
Averaging attack: 2 000 devices, 100 reports, d = 8; an honest memoized GRR with ε∞ = 2 must stay
within e²/(e² + 7) ≈ 0.513 + 4·√(0.513·0.487/2000) ≈ 0.045; a device that forgets its memoized
response (fresh permanent response per report) is decoded almost always (accuracy ≈ 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldptel.client import create_mechanism
from ldptel.commands.audit import audit_mechanism
from ldptel.commands.cli import main
from ldptel.mechanisms.grr import GRR

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ldptel.toml"


class OverspendingGRR(GRR):
    """Claims ε but randomizes with 1.25·ε."""

    def randomize(self, values: np.ndarray, rng) -> dict:
        return GRR(1.25 * self.epsilon, self.domain_size).randomize(values, rng)


def forgetful(mech):
    """A memoized mechanism whose devices draw a new permanent response for every report."""
    plain_encode_batch = mech.encode_batch

    def encode_batch(values, rng=None, campaign="", batch_id=None, secrets=None):
        return plain_encode_batch(values, rng=rng, campaign=campaign, batch_id=batch_id)

    mech.encode_batch = encode_batch
    return mech


def test_honest_mechanisms_keep_their_claims() -> None:
    plain = audit_mechanism("plain", GRR(1.0, 8))
    assert not plain.violated and not plain.ratio.violation
    assert plain.attack is not None and plain.attack.accuracy > 0.99  # fresh reports: R·ε₁ leaks the value
    memo = audit_mechanism("memo", create_mechanism("grr", epsilon=1.0, epsilon_inf=2.0, domain_size=8,
                                                    memoize=True))
    assert not memo.violated, memo.lines()
    assert memo.attack is not None and memo.attack.claimed_epsilon == 2.0
    assert memo.attack.accuracy <= memo.attack.bound + memo.attack.margin


def test_broken_mechanisms_are_flagged() -> None:
    over = audit_mechanism("over", OverspendingGRR(1.0, 8))
    assert over.ratio.violation and over.violated
    assert over.ratio.proven_epsilon > 1.1  # the true ratio is e^1.25
    leaky = audit_mechanism("leaky", forgetful(create_mechanism("grr", epsilon=1.0, epsilon_inf=2.0,
                                                                domain_size=8, memoize=True)))
    assert leaky.attack is not None and not leaky.attack.passed and leaky.violated
    assert leaky.attack.accuracy > 0.9


def test_cli_on_the_example_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--config", str(EXAMPLE), "--campaign", "homepage", "--reports", "50000"]) == 0
    out = capsys.readouterr().out
    assert "homepage (GRR" in out and "per-report ε₁: claimed 1" in out and "1 of 1 audited campaigns" in out
    assert main(["audit", "--config", str(EXAMPLE), "--campaign", "nope"]) == 2
    assert "no campaign 'nope'" in capsys.readouterr().err
