"""Plans on disk (``ldptel.privacy.plan_cache``): a plan is computed once per machine; a cached call answers
in well under a second without importing the privacy math, with the same figures; a bad target is
raised, not cached; an unreadable file is a missing cache."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ldptel.errors import UncertifiableTarget
from ldptel.privacy import plan, plan_cache

ARGS = ("shuffled-fakes", "histogram", 1024, 1.0, 1e-8, 100_000)


def test_cached_plan_is_fast_and_equal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "plans.json"
    monkeypatch.setenv("LDPTEL_PLAN_CACHE", str(path))
    monkeypatch.setattr(plan_cache, "_memory", {})
    first = plan(*ARGS)
    assert path.exists() and len(json.loads(path.read_text())) == 1
    monkeypatch.setattr(plan_cache, "_memory", {})
    t0 = time.perf_counter()
    again = plan(*ARGS)
    assert time.perf_counter() - t0 < 1.0
    assert again.as_dict() == first.as_dict() and again.fake_rate == pytest.approx(0.6358706, rel=1e-6)
    # a fresh process answers from the file without importing the privacy math
    code = ("import sys, time; t = time.perf_counter(); from ldptel.privacy import plan; "
            f"p = plan(*{ARGS!r}); dt = time.perf_counter() - t; "
            "assert 'ldptel.privacy.planner' not in sys.modules; print(dt, p.std_error)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         env={"LDPTEL_PLAN_CACHE": str(path), "PATH": "/usr/bin:/bin"})
    dt, std = out.stdout.split()
    assert float(dt) < 1.0 and float(std) == pytest.approx(first.std_error)


def test_errors_are_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDPTEL_PLAN_CACHE", str(tmp_path / "plans.json"))
    with pytest.raises(UncertifiableTarget):
        plan("shuffled-fakes", "histogram", 1024, 0.01, 1e-8, 100)
    assert not (tmp_path / "plans.json").exists()
    (tmp_path / "plans.json").write_text("not json")
    assert plan(*ARGS).fake_rate > 0
