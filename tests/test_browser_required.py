"""``make test`` never passes quietly without its browser tests (issue 25: it said "real Chromium"
but skipped 16 browser tests and exited 0 when Chromium was missing): on CI (``$CI`` set, as on
the CI machine, or ``LDPTEL_REQUIRE_BROWSER=1``) a missing Chromium fails them; locally they skip
and the run ends saying how to install it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PROBE = "tests/test_trend_page.py::test_page_is_usable_at_390px"  # needs the browser fixture first


def run(env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "LDPTEL_REQUIRE_BROWSER")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", PROBE],
                          cwd=TESTS.parent, capture_output=True, text=True, timeout=120,
                          env={**base, "LDPTEL_CHROMIUM": "/nonexistent/chromium", **env})


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"CI": "true"}, {"LDPTEL_REQUIRE_BROWSER": "1"}])
def test_missing_chromium_fails_on_ci(env) -> None:
    out = run(env)
    assert out.returncode == 1 and "1 error" in out.stdout, out.stdout[-2000:]  # at setup
    assert "/nonexistent/chromium not found" in out.stdout


@pytest.mark.slow
def test_missing_chromium_says_how_to_install_locally() -> None:
    out = run({})
    assert out.returncode == 0 and "1 skipped" in out.stdout, out.stdout[-2000:]
    assert "browser tests SKIPPED: Chromium is missing" in out.stdout
    assert "apt-get install -y chromium" in out.stdout


def test_ci_requires_the_browser() -> None:
    code = "import browser_support as b; print(b.REQUIRE_BROWSER)"
    env = {k: v for k, v in os.environ.items() if k != "LDPTEL_REQUIRE_BROWSER"}
    out = subprocess.run([sys.executable, "-c", code], cwd=TESTS, capture_output=True, text=True,
                         env={**env, "CI": "true"}, timeout=30)
    assert out.stdout.strip() == "True", out.stderr
