"""The README's tutorial, followed literally from a clean clone (issue 25): ``git clone``, then
``make demo`` (a fresh ``.venv``, the runtime installed, the demo started), then every block of
the README's tutorial in order, as a reader pastes them into a second terminal. The one liberty:
the demo runs on a free port instead of 8000 (``make demo DEMO_PORT=…``; the blocks' port is
replaced alike), and the reader's data directory is the test's. The live change must reach the
devices within 10 s: the last block lists windows of version 2 with reports."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from docs_support import ROOT, blocks, section
from test_docs import reader_env, run_block, start_demo, stop_demo

from ldptel.store.redis_server import free_port

pytestmark = pytest.mark.slow


def tutorial_blocks() -> list:
    text = section(ROOT / "README.md", "Tutorial")
    start = (ROOT / "README.md").read_text().index(text)
    first_line = (ROOT / "README.md").read_text()[:start].count("\n") + 1
    last_line = first_line + text.count("\n")
    return [b for b in blocks(ROOT / "README.md")
            if first_line <= b.line <= last_line and b.lang in ("sh", "python")]


def test_readme_tutorial_from_a_clean_clone(tmp_path: Path) -> None:
    if shutil.which("git") is None or shutil.which("make") is None:
        pytest.fail("the tutorial test needs git and make")
    clone = tmp_path / "ldptel"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    port = free_port()
    env = reader_env(tmp_path, clone / ".venv" / "bin")
    t0 = time.monotonic()
    proc, printed = start_demo(clone, env, port, ["make", "demo", f"DEMO_PORT={port}"], timeout=600)
    print(f"make demo in a clean clone: first page after {time.monotonic() - t0:.0f} s")
    try:
        assert f"operator page: http://127.0.0.1:{port}/" in printed
        assert "admin token: demo-admin-token" in printed
        steps = tutorial_blocks()
        assert len(steps) >= 4, steps
        outputs = []
        for block in steps:
            t = time.monotonic()
            outputs.append(run_block(block, port, env, cwd=clone))
            if "campaigns set" in block.text:
                changed_at = t
        assert "new version, version 2 (epsilon)" in "".join(outputs)
        rows = [ln.split(",") for ln in outputs[-1].strip().split("\n")]
        # window_start,window,version,n_reports,status,decoded_at: version 2 has reports
        assert any(r[2] == "2" and int(r[3]) > 0 for r in rows), outputs[-1]
        assert time.monotonic() - changed_at < 10 + 5, "the tutorial's wait plus the request"
    finally:
        stop_demo(proc)
