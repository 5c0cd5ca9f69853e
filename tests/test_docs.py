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
import shutil
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
        if b.lang in JS:  # run against the demo (run_js_examples) or a serve (tests/test_sdk_js_sealed.py)
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
        run_js_examples(port, tmp_path, env)
    finally:
        stop_demo(proc)


def js_block(marker: str) -> str:
    """The block of docs/sdk-js.md after ``<!-- marker: … -->``."""
    match = re.search(rf"<!-- {marker}: [^>]*-->\s*```\w+\n(.*?)```", JS_DOC.read_text(), re.S)
    assert match, f"docs/sdk-js.md has no {marker}"
    return match.group(1)


def run_js_examples(port: int, tmp: Path, env: dict[str, str]) -> None:
    """Issue 35: the Node and browser examples of docs/sdk-js.md as written, against the demo's
    campaigns: the package installed as the docs say (``npm install ./client-js`` from an app's
    folder: its ``prepare`` script builds ``dist/``), the Node example's file in the user's data
    directory, the browser example's page in Chromium on the collector's origin."""
    from browser_support import REQUIRE_BROWSER, launched, missing

    if shutil.which("node") is None or shutil.which("npm") is None:
        assert not REQUIRE_BROWSER, "node/npm not found (the JS examples need Node ≥ 20)"
        print("node/npm not found: the JS examples of docs/sdk-js.md were not run")
        return
    app = tmp / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "docs-example", "private": true, "type": "module"}\n')
    # a copy of client-js/ (its node_modules linked): the install's build writes the copy's dist/,
    # never the working tree's, which tests/test_sdk_js.py may be serving on another xdist worker
    sdk = tmp / "client-js"
    shutil.copytree(ROOT / "client-js", sdk, ignore=shutil.ignore_patterns("node_modules", "dist"))
    if (ROOT / "client-js" / "node_modules").exists():  # else the install's prepare runs npm ci in the copy
        (sdk / "node_modules").symlink_to(ROOT / "client-js" / "node_modules")
    install = next(b for b in all_blocks() if b.path == JS_DOC and "npm install ./client-js" in b.text)
    out = subprocess.run(["bash", "-eu", "-c", install.text.replace("./client-js", str(sdk))],
                         cwd=app, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{install.where}: {out.stderr[-2000:]}"
    (app / "example.mjs").write_text(js_block("node-example"))
    data_home = tmp / "data-home"
    node_env = {**env, "LDPTEL_URL": f"http://127.0.0.1:{port}", "XDG_DATA_HOME": str(data_home)}
    out = subprocess.run(["node", "example.mjs"], cwd=app, capture_output=True, text=True, timeout=120,
                         env=node_env)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["result"]["accepted"] == 4 and doc["result"]["pending"] == 0, doc
    assert doc["health"]["ok"] and not any(doc["health"]["dropped"].values()), doc
    assert len(list((data_home / "ldptel").glob("queue-*.jsonl"))) == 1  # the data directory, not ~/.cache
    if missing() is not None and not REQUIRE_BROWSER:
        print(f"the browser example of docs/sdk-js.md was not run: {missing()}")
        return
    html = js_block("browser-example").replace("YOUR-INGEST-TOKEN", "demo-ingest-token")
    bundle = (sdk / "dist" / "ldptel.browser.min.js").read_bytes()
    url = f"http://127.0.0.1:{port}"

    def handle(route) -> None:  # the page and the bundle on the collector's origin
        name = route.request.url.rsplit("/", 1)[1]
        body, kind = (bundle, "text/javascript") if name.endswith(".js") else (html.encode(), "text/html")
        route.fulfill(status=200, content_type=kind, body=body)

    with launched() as browser:
        ctx = browser.new_context()
        ctx.route(f"{url}/sdk/**", handle)
        page = ctx.new_page()
        page.goto(f"{url}/sdk/example.html")
        page.wait_for_function("() => document.body.dataset.result !== undefined", timeout=30_000)
        result = json.loads(page.evaluate("() => document.body.dataset.result"))
        ctx.close()
    assert result["result"]["accepted"] == 2 and result["result"]["pending"] == 0, result
    assert result["health"]["ok"], result


def test_issue_35_small_doc_fixes() -> None:
    """Issue 35 item 10: the README names every demo campaign (it left out ``demo-sealed``) and no
    longer says "a few seconds" for the first table (45 s measured); the SDK's dependency lists
    name platformdirs (its data directory); the shipped files point at docs/, not at README
    sections that moved; http-api.md says ``/metrics`` needs a token (it answers 401 without)."""
    readme = README.read_text()
    demo = tomllib.loads((ROOT / "examples" / "demo.toml").read_text())
    assert "demo-sealed" in readme and "In a few seconds" not in readme
    assert any(c["name"] == "demo-sealed" for c in demo["campaigns"])
    sdk = [ln for ln in readme.splitlines() if ln.startswith("| `pip install ldptel` |")]
    assert sdk and "platformdirs" in sdk[0]
    assert "platformdirs" in (ROOT / "docs" / "sdk.md").read_text().split("\n\n", 2)[1]
    for shipped in (ROOT / "deploy" / "ldptel.env", ROOT / "examples" / "ldptel.toml"):
        assert "README" not in shipped.read_text(), shipped
    api = (ROOT / "docs" / "http-api.md").read_text()
    assert re.search(r"^\| `GET /metrics` \| admin or export", api, re.M)
    from ldptel.server.health import metrics

    assert getattr(metrics, "__wrapped__", None) is not None  # behind require_token: 401 without one
