"""The documentation cannot go stale (issue 25): README.md is one screen with the two set-up
commands and a table of contents of docs/; every link of README.md and docs/*.md points at a
file and heading that exist; every code block is code that loads (``toml`` as an ldptel config,
``python`` compiles, ``sh`` parses) and, in the slow test, runs: every ``sh`` and ``python``
block of every document, in order, against one running demo (``ldptel demo --config
examples/demo.toml``, on a free port instead of 8000). A block that cannot run says why in its
info string (``{no-run: why}``); there are few."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from docs_support import CODE, DEMO, DOCS, JS, JS_DOC, PICTURES, ROOT, all_blocks, anchors, links

from ldptel.campaigns.config import parse_config

README = ROOT / "README.md"
MAX_NO_RUN = 5


def test_readme_is_one_screen_with_two_setup_commands() -> None:
    text = README.read_text()
    assert len(text.split("\n")) <= 150
    first = next(b for b in all_blocks() if b.path == README and b.lang == "sh")
    commands = [ln.split("#")[0].strip() for ln in first.text.strip().split("\n")]
    assert commands == ["make demo", "make test"], commands
    assert "## Tutorial" in text and "## Documentation" in text
    for doc in ("sdk", "campaigns", "http-api", "operator-pages", "privacy", "operations", "performance",
                "architecture", "CHANGELOG"):
        assert f"(docs/{doc}.md)" in text, doc


def test_every_link_resolves() -> None:
    broken = []
    for path in DOCS:
        for line, target in links(path):
            where = f"{path.relative_to(ROOT)}:{line}: {target}"
            if target.startswith(("http://", "https://")):
                if not re.match(r"https?://[\w.-]+(:\d+)?(/\S*)?$", target):
                    broken.append(where)
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists() or (anchor and (dest.suffix != ".md" or anchor not in anchors(dest))):
                broken.append(where)
    assert not broken, "\n".join(broken)


def test_every_block_is_code_that_loads() -> None:
    found = all_blocks()
    no_run = [b.where for b in found if b.no_run]
    assert len(no_run) <= MAX_NO_RUN, no_run
    for b in found:
        if b.lang in JS:  # tests/test_sdk_js.py::test_docs_examples_run runs these
            assert b.path == JS_DOC, f"{b.where}: a {b.lang} block outside docs/sdk-js.md runs nowhere"
            continue
        assert b.lang in CODE | PICTURES, f"{b.where}: a fence needs a language ({sorted(CODE | PICTURES)})"
        if b.lang == "toml":
            doc = tomllib.loads(b.text)
            parse_config({k: v for k, v in doc.items()})
        elif b.lang == "json":
            json.loads(b.text)
        elif b.lang == "yaml":
            yaml.safe_load(b.text)
        elif b.lang == "python":
            compile(b.text, b.where, "exec")
        elif b.lang == "sh":
            out = subprocess.run(["bash", "-n"], input=b.text, capture_output=True, text=True)
            assert out.returncode == 0, f"{b.where}: {out.stderr}"


def runnable() -> list:
    return [b for b in all_blocks() if b.lang in ("sh", "python") and not b.no_run]


def run_block(block, port: int, env: dict[str, str], cwd: Path = ROOT) -> str:
    """Run one ``sh`` or ``python`` block as a reader would, against the demo on ``port``."""
    text = block.text.replace(DEMO, f"127.0.0.1:{port}")
    argv = ["bash", "-eu", "-c", text] if block.lang == "sh" else [str(Path(sys.executable)), "-c", text]
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    said = f"{out.stdout[-1500:]}\n{out.stderr[-1500:]}"
    assert out.returncode == 0, f"{block.where} exited {out.returncode}:\n{said}"
    if block.lang == "sh":
        assert '"error":' not in out.stdout, f"{block.where}: an error answer:\n{out.stdout[-1500:]}"
    return out.stdout


def start_demo(cwd: Path, env: dict[str, str], port: int, argv: list[str], timeout: float = 300.0):
    """The demo as a process; returns it once its first page is ready (its stdout so far)."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if "first page ready" in line:
            return proc, "".join(lines)
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise AssertionError("the demo did not start:\n" + "".join(lines)[-3000:])


def stop_demo(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def reader_env(tmp: Path, venv_bin: Path) -> dict[str, str]:
    """The environment of a reader of the docs: the venv's ``ldptel`` on the PATH, a data
    directory of its own, no CI secrets."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "LDPTEL_REDIS_CREDENTIALS")}
    return {**env, "PATH": f"{venv_bin}:{env.get('PATH', '')}", "LDPTEL_DATA_DIR": str(tmp / "data")}


@pytest.mark.slow
def test_every_block_runs_against_the_demo(tmp_path: Path) -> None:
    from ldptel.store.redis_server import free_port

    port = free_port()
    env = reader_env(tmp_path, Path(sys.executable).parent)
    argv = [sys.executable, "-m", "ldptel.commands.cli", "demo", "--config", "examples/demo.toml",
            "--port", str(port), "--users", "5000", "--change-after", "-1"]
    proc, _ = start_demo(ROOT, env, port, argv)
    try:
        for block in runnable():
            run_block(block, port, env)
    finally:
        stop_demo(proc)
