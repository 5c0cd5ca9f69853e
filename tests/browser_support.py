"""What the browser tests share: where Chromium is, whether it is required, where screenshots go.

- ``CHROMIUM``: ``$LDPTEL_CHROMIUM``, default Debian's ``/usr/bin/chromium``;
- ``REQUIRE_BROWSER``: a missing Chromium (or Playwright) fails the browser tests instead of
  skipping them, with ``LDPTEL_REQUIRE_BROWSER=1`` (``.ci/run`` sets it) and on CI (``$CI`` set),
  unless ``LDPTEL_REQUIRE_BROWSER=0``. Locally they skip, and the end of the run says how to
  install Chromium (``conftest.pytest_terminal_summary``);
- ``launched()``: the Chromium of a module's ``browser`` fixture, or its skip/failure;
- ``artifacts(name)``: a fresh directory for screenshots, ``$LDPTEL_ARTIFACTS`` or
  ``build/test-artifacts`` of the repository, plus ``name``; the end of the run prints every
  directory used, so a CI log says where its screenshots are. Under pytest-xdist a module's tests
  may run on both workers: the directory is emptied once per run (the first worker to ask, under a
  file lock), and the workers hand their ``USED`` to the controller (``conftest``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("LDPTEL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
_REQUIRE = os.environ.get("LDPTEL_REQUIRE_BROWSER", "")
REQUIRE_BROWSER = _REQUIRE == "1" or (_REQUIRE != "0" and bool(os.environ.get("CI")))
INSTALL_HINT = ("install Debian's chromium (`sudo apt-get install -y chromium`, or run .ci/run) and the "
                "test extras (`pip install -e '.[test]'` for Playwright)")
SKIP_MARK = "browser test skipped:"  # starts every skip reason (conftest counts them)
ROOT = Path(__file__).resolve().parent.parent
USED: list[Path] = []


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} not found: {INSTALL_HINT}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return f"Playwright for Python is not installed: {INSTALL_HINT}"
    return None


@contextmanager
def launched() -> Iterator[Any]:
    """A headless Chromium for a module's ``browser`` fixture; where it cannot run (``missing``)
    the test fails if ``REQUIRE_BROWSER``, else skips with ``SKIP_MARK``."""
    import pytest

    reason = missing()
    if reason:
        if REQUIRE_BROWSER:
            pytest.fail(f"the browser tests are required here (CI or LDPTEL_REQUIRE_BROWSER=1) but {reason}")
        pytest.skip(f"{SKIP_MARK} {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def artifacts(name: str) -> Path:
    """A fresh directory for this run's screenshots named ``name`` (printed at the end): emptied
    by the first process of this run to ask (``.run`` holds the run's id), kept by the others."""
    from xdist_support import run_id, shared_lock

    root = Path(os.environ.get("LDPTEL_ARTIFACTS") or ROOT / "build" / "test-artifacts")
    root.mkdir(parents=True, exist_ok=True)
    path, marker = root / name, root / name / ".run"
    with shared_lock(root / f".{name}.lock"):
        if not marker.exists() or marker.read_text() != run_id():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            marker.write_text(run_id())
    USED.append(path)
    return path
