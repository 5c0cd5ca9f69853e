"""``ldptel audit`` for the shuffled privacy modes (``commands/audit_central.py``): the empirical δ
of the central claim at n = batch_min stays under the certified δ for the fake-message histogram
(issue 26's figures), GRR with fakes and shuffled GRR; the negative control — the fakes switched off,
checked against the claim made with them — fails; and the command prints and exits accordingly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ldptel.campaigns.config import parse_campaign
from ldptel.commands.audit_central import central_audit

FAKES = {"name": "f", "privacy_mode": "shuffled-fakes", "domain_size": 1024, "central_epsilon": 1.0,
         "central_delta": 1e-8, "batch_min": 100_000}
SMALL = {"name": "g", "privacy_mode": "shuffled-fakes", "domain_size": 16, "central_epsilon": 1.0,
         "central_delta": 1e-6, "batch_min": 300}
GRR = {"name": "s", "privacy_mode": "shuffled", "oracle": "grr", "domain_size": 64, "central_epsilon": 1.0,
       "central_delta": 1e-6, "batch_min": 20_000}


@pytest.mark.parametrize("raw", [FAKES, SMALL, GRR], ids=lambda r: r["name"])
def test_claims_hold(raw: dict) -> None:
    result = central_audit(parse_campaign(raw, "campaigns[0]"))
    assert len(result.points) >= 5 and not result.violated, result.lines()


@pytest.mark.parametrize("raw", [FAKES, SMALL], ids=lambda r: r["name"])
def test_fakes_switched_off_fail(raw: dict) -> None:
    result = central_audit(parse_campaign(raw, "campaigns[0]"), fakes=False)
    assert result.violated, result.lines()


@pytest.mark.slow
def test_audit_command(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[server]\ningest_tokens = ["ingest-token-x"]\n[[campaigns]]\nname = "f"\n'
                   'privacy_mode = "shuffled-fakes"\ndomain_size = 16\ncentral_epsilon = 1.0\n'
                   'central_delta = 1e-6\nbatch_min = 300\n')
    out = subprocess.run([sys.executable, "-m", "ldptel.commands.cli", "audit", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "shuffled-fakes" in out.stdout and "central claim at n = 300" in out.stdout
    assert "1 of 1 audited campaigns keep their claims" in out.stdout


@pytest.mark.slow
def test_audit_counts_the_campaigns_it_leaves_out(tmp_path: Path) -> None:
    """Issue 35: the audit said "9 of 9" for a config with 11 campaigns (numeric ones are not
    audited yet); it now says how many it left out and which."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('[server]\ningest_tokens = ["ingest-token-x"]\n'
                   '[[campaigns]]\nname = "f"\noracle = "grr"\nepsilon = 1.0\ndomain_size = 4\n'
                   '[[campaigns]]\nname = "m"\nkind = "numeric"\nepsilon = 1.0\nlower = 0\nupper = 1\n')
    out = subprocess.run([sys.executable, "-m", "ldptel.commands.cli", "audit", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert ("1 of 1 audited campaigns keep their claims (1 of the config's 2 not audited, the numeric "
            "campaign m)" in out.stdout), out.stdout
