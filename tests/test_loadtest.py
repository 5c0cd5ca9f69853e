"""Runs of the load test (``loadtest/run.sh``): the real stack on loopback — embedded Redis,
``ldptel serve`` (granian), a shuffler, an aggregator — under a few locust devices, then its
exactly-once check (clients vs collector metrics vs shuffler counters vs store vs export API).
The smoke run has a one-second Redis outage in the middle (intended 503s, retried by the
devices); the fault run kills the shuffler with SIGKILL 10 times while it moves reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_load_test_smoke(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("LDPTEL_")}
    env["LDPTEL_PYTHON"] = sys.executable
    proc = subprocess.run(
        ["bash", str(ROOT / "loadtest" / "run.sh"), "--users", "4", "--run-time", "8s", "--workers", "1",
         "--invalid", "0.05", "--resend", "0.05", "--outage", "5:1", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK: every accepted report counted exactly once" in proc.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["accepted_reports"] > 0 and not summary["problems"]
    assert summary["statuses"].get("400", 0) > 0 and summary["statuses"].get("202", 0) > 0
    assert summary["statuses"].get("503", 0) > 0  # the outage was felt, and nothing was lost
    for kind, statuses in summary["invalid"].items():  # one status per kind (or 503 in the outage)
        assert len(set(statuses) - {"503"}) == 1, (kind, statuses)
    assert (tmp_path / "locust_stats.csv").exists() and (tmp_path / "locust.html").exists()


def test_shuffler_killed_ten_times_loses_and_doubles_nothing(tmp_path: Path) -> None:
    """kill -9 of the shuffler 10 times during an 80 s load (``--kill-shuffler 10``: kills due every
    5.8 s over the first 64 s, each once the current process has moved reports — a dead shuffler's
    lease keeps its successor off for up to 5 s — the next one started at once): every accepted
    report went through the shuffler once (its counters) and was counted once (store, export)."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("LDPTEL_")}
    env["LDPTEL_PYTHON"] = sys.executable
    proc = subprocess.run(
        ["bash", str(ROOT / "loadtest" / "run.sh"), "--users", "4", "--run-time", "80s", "--workers", "1",
         "--kill-shuffler", "10", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK: every accepted report counted exactly once" in proc.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert not summary["problems"]
    kills = summary["shuffler_kills"]
    assert len(kills) == 10 and all(k["moved_reports"] > 0 for k in kills), kills
    assert kills[-1]["t"] < 80  # all during the load
    shuffled = summary["shuffler"]
    # lt-sealed (shuffled-fakes): fewer than batch_min devices may wait in ingress at the end, by design
    waiting = sum(summary["waiting"].values())
    assert waiting < 1000
    collector = sum(row[3] for row in summary["campaigns"])
    assert shuffled["ingress_reports"] == shuffled["analysis_reports"] == collector - waiting > 0
    assert shuffled["ingress_entries"] == waiting
