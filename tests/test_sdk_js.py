"""The JavaScript SDK (``client-js/``) end to end against a real ``ldptel serve`` (embedded Redis,
collector, shuffler, aggregator):

- a page in headless Chromium (Debian's, driven by Playwright) using the browser bundle reports a
  population, the Python SDK reports the same population to a twin campaign, and the published
  estimates agree within their standard errors (and with the truth);
- an offline page queues its reports in IndexedDB; after reconnecting, a new page delivers them:
  the collector counts each exactly once;
- a Node process queues 10,000 reports in its file queue, a second one is killed (SIGKILL) in the
  middle of its flush, a third finishes: exactly 10,000 reports are counted.

The browser and Node examples of docs/sdk-js.md run as written against the demo's campaigns in
tests/test_docs.py.

The page is served by Playwright's request routing on the collector's own origin (the collector
sends no CORS headers; in production a reverse proxy plays that part); every ``/v1/`` request
goes to the real collector.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from agg_support import EXPORT_TOKEN, INGEST_TOKEN, write_config
from browser_support import REQUIRE_BROWSER, launched
from http_support import Collector, http_request, start_collector, wait_counted
from xdist_support import run_id, shared_lock

from ldptel.client import TelemetryClient

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parent.parent
JS = ROOT / "client-js"
BUNDLE = JS / "dist" / "ldptel.browser.min.js"
LABELS = ["home", "search", "cart", "checkout", "account"]
COUNTS = [900, 600, 300, 150, 50]
COMMON = {"reports_per_window": 1_000_000, "shuffle_max_delay": "1s", "min_reports": 10,
          "window": "all"}
CAMPAIGNS = [
    {"name": "js-grr", "oracle": "grr", "epsilon": 1.0, "domain": LABELS, **COMMON},
    {"name": "py-grr", "oracle": "grr", "epsilon": 1.0, "domain": LABELS, **COMMON},
    {"name": "js-mean", "kind": "numeric", "epsilon": 2.0, "lower": 0.0, "upper": 100.0,
     "mechanism": "piecewise", **COMMON},
    {"name": "py-mean", "kind": "numeric", "epsilon": 2.0, "lower": 0.0, "upper": 100.0,
     "mechanism": "piecewise", **COMMON},
    {"name": "offline", "oracle": "oue", "epsilon": 1.0, "domain_size": 16, **COMMON},
    {"name": "node", "oracle": "olh", "epsilon": 1.0, "domain_size": 16, **COMMON},
]

PAGE = """<!doctype html><title>ldptel SDK test</title><body><script type="module">
import * as ldptel from "./ldptel.browser.min.js";
window.ldptel = ldptel;
</script></body>"""

REPORT_JS = """async ([url, token, campaign, values]) => {
  const c = await ldptel.TelemetryClient.open({ url, token, backoffBaseS: 0.05, maxBackoffS: 1 });
  let queued = 0;
  for (const v of values) if (await c.report(campaign, v)) queued += 1;
  const result = await c.flush(60000);
  const health = c.health();
  await c.close(null);
  return { queued, result, health };
}"""


def node() -> str | None:
    return shutil.which("node")


@pytest.fixture(scope="module")
def bundle() -> Path:
    """The SDK's bundles, built from the working tree (``npm ci`` first if needed) once per run:
    the modules using them may run on two xdist workers at once, and a rebuild by one (esbuild
    rewrites dist/ in place) could hand the other a half-written bundle. The build holds a file
    lock, and ``build/client-js.run`` names the run that built it; nothing else writes dist/
    during the run (tests/test_docs.py installs a copy of client-js/)."""
    if node() is None or shutil.which("npm") is None:
        if REQUIRE_BROWSER:
            pytest.fail("node/npm not found (the JS SDK tests need Node ≥ 20)")
        pytest.skip("node/npm not found")
    built = ROOT / "build" / "client-js.run"
    with shared_lock(ROOT / "build" / "client-js.lock"):
        if built.exists() and built.read_text() == run_id() and BUNDLE.exists():
            return BUNDLE
        if not (JS / "node_modules" / "esbuild").exists():
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, timeout=600,
                           capture_output=True)
        subprocess.run(["node", "scripts/bundle.mjs"], cwd=JS, check=True, timeout=120, capture_output=True)
        built.write_text(run_id())
    return BUNDLE


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bundle: Path) -> Iterator[Collector]:
    tmp = tmp_path_factory.mktemp("sdk-js")
    write_config(tmp / "serve.toml", CAMPAIGNS, aggregator={"block_ms": 100})
    col = start_collector(tmp / "serve", (tmp / "serve.toml").read_text(), None, workers=2,
                          env={"LDPTEL_DATA_DIR": str(tmp / "data")})
    yield col
    col.stop()


@pytest.fixture(scope="module")
def browser(stack: Collector):
    with launched() as b:
        yield b


def serve_pages(ctx, url: str, pages: dict[str, str]) -> None:
    """Answer ``url/sdk/<name>`` from ``pages`` and ``url/sdk/ldptel.browser.min.js`` with the
    bundle, on the collector's origin; everything else goes to the collector."""
    def handle(route) -> None:
        name = route.request.url.rsplit("/", 1)[1]
        if name == "ldptel.browser.min.js":
            route.fulfill(status=200, content_type="text/javascript", body=BUNDLE.read_bytes())
        elif name in pages:
            route.fulfill(status=200, content_type="text/html", body=pages[name])
        else:
            route.fulfill(status=404, body="")
    ctx.route(f"{url}/sdk/**", handle)


def open_page(ctx, url: str):
    page = ctx.new_page()
    page.goto(f"{url}/sdk/page.html")
    page.wait_for_function("() => window.ldptel !== undefined")
    return page


def get_json(url: str, path: str) -> tuple[int, dict]:
    reply = http_request(url, "GET", path, headers={"Authorization": f"Bearer {EXPORT_TOKEN}"}, timeout=10)
    return reply.status, json.loads(reply.body)


def estimates(url: str, name: str, n: int) -> dict:
    return wait_counted(lambda: get_json(url, f"/v1/campaigns/{name}/estimates"), n, 60)


def counted_exactly(url: str, name: str, n: int) -> None:
    """``n`` reports counted, and still ``n`` a moment later (nothing doubled on the way)."""
    estimates(url, name, n)
    time.sleep(2.5)  # the shuffler's delay (1 s) and a few aggregator blocks
    status, doc = get_json(url, f"/v1/campaigns/{name}/estimates")
    assert status == 200 and doc["n_reports"] == n, doc.get("n_reports")


def population() -> list[str]:
    values = [label for label, c in zip(LABELS, COUNTS, strict=True) for _ in range(c)]
    np.random.default_rng(29).shuffle(values)
    return values


def test_browser_and_python_estimates_agree(stack: Collector, browser, tmp_path: Path) -> None:
    url = stack.url
    values = population()
    means = [float(x) for x in np.random.default_rng(7).uniform(10, 70, 1500)]
    ctx = browser.new_context()
    try:
        serve_pages(ctx, url, {"page.html": PAGE})
        page = open_page(ctx, url)
        out = page.evaluate(REPORT_JS, [url, INGEST_TOKEN, "js-grr", values])
        assert out["queued"] == len(values) and out["result"]["pending"] == 0, out
        assert out["health"]["storage"] == "indexeddb" and out["health"]["dropped"] == {}, out
        out = page.evaluate(REPORT_JS, [url, INGEST_TOKEN, "js-mean", means])
        assert out["queued"] == len(means) and out["result"]["pending"] == 0, out
    finally:
        ctx.close()
    with TelemetryClient(url, INGEST_TOKEN, queue_path=tmp_path / "py.sqlite") as py:
        for v in values:
            assert py.report("py-grr", v)
        for x in means:
            assert py.report("py-mean", x)
        assert py.flush().pending == 0
    js_doc, py_doc = estimates(url, "js-grr", len(values)), estimates(url, "py-grr", len(values))
    for js, py, truth in zip(js_doc["items"], py_doc["items"], COUNTS, strict=True):
        both = math.hypot(js["std_error"], py["std_error"])
        assert abs(js["estimate"] - py["estimate"]) <= 4 * both, (js, py)
        assert abs(js["estimate"] - truth) <= 4 * js["std_error"], (js, truth)
        assert 0.8 < js["std_error"] / py["std_error"] < 1.25, (js, py)
    truth = float(np.mean(means))
    docs = {}
    for name in ("js-mean", "py-mean"):
        deadline = time.monotonic() + 60
        while True:
            status, doc = get_json(url, f"/v1/campaigns/{name}/mean")
            if status == 200 and doc["n_reports"] == len(means):
                break
            assert time.monotonic() < deadline, (status, doc)
            time.sleep(0.2)
        docs[name] = doc["mean"]
    js_m, py_m = docs["js-mean"], docs["py-mean"]
    assert abs(js_m["estimate"] - py_m["estimate"]) <= 4 * math.hypot(js_m["std_error"], py_m["std_error"])
    assert abs(js_m["estimate"] - truth) <= 4 * js_m["std_error"], (js_m, truth)


def test_offline_page_queues_in_indexeddb_and_delivers_once(stack: Collector, browser) -> None:
    url = stack.url
    ctx = browser.new_context()
    try:
        serve_pages(ctx, url, {"page.html": PAGE})
        page = open_page(ctx, url)
        page.evaluate("""async ([url, token]) => {
          const c = await ldptel.TelemetryClient.open({ url, token });
          await c.fetchConfigs(); await c.close(null); }""", [url, INGEST_TOKEN])
        ctx.set_offline(True)
        out = page.evaluate("""async ([url, token]) => {
          const c = await ldptel.TelemetryClient.open({ url, token, backoffBaseS: 0.05, maxBackoffS: 0.2 });
          let queued = 0;
          for (let i = 0; i < 300; i++) if (await c.report("offline", i % 16)) queued += 1;
          const result = await c.flush(1500);
          await c.close(null);
          return { queued, result };
        }""", [url, INGEST_TOKEN])
        assert out["queued"] == 300 and out["result"]["pending"] == 300, out
        assert out["result"]["error"], out
        page.close()  # the tab is gone; its queue is in IndexedDB
        ctx.set_offline(False)
        page = open_page(ctx, url)
        out = page.evaluate("""async ([url, token]) => {
          const c = await ldptel.TelemetryClient.open({ url, token });
          const before = c.pending();
          const result = await c.flush(30000);
          await c.close(null);
          return { before, result };
        }""", [url, INGEST_TOKEN])
        assert out["before"] == 300 and out["result"]["pending"] == 0, out
        assert out["result"]["accepted"] + out["result"]["duplicates"] == 300, out
    finally:
        ctx.close()
    counted_exactly(url, "offline", 300)


def run_node(url: str, queue: Path, mode: str, timeout: float = 300) -> dict:
    out = subprocess.run(["node", str(JS / "test" / "e2e" / "node-report.mjs"), url, INGEST_TOKEN,
                          str(queue), "node", "10000", mode, "250"],
                         capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_node_10000_reports_exactly_once_through_a_kill(stack: Collector, tmp_path: Path) -> None:
    url, queue = stack.url, tmp_path / "node-queue.jsonl"
    first = run_node(url, queue, "report")
    assert first["queued"] == 10_000 and first["health"]["pending"] == 10_000, first
    proc = subprocess.Popen(["node", str(JS / "test" / "e2e" / "node-report.mjs"), url, INGEST_TOKEN,
                             str(queue), "node", "10000", "flush", "250"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.6)  # some chunks are sent, one is likely in flight
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    last = run_node(url, queue, "flush")
    assert last["result"]["pending"] == 0 and last["health"]["pending"] == 0, last
    print(f"after the kill: {last['result']['accepted']} accepted, "
          f"{last['result']['duplicates']} duplicates (a chunk in flight at the kill)")
    counted_exactly(url, "node", 10_000)


def doc_example(marker: str) -> str:
    """The block of docs/sdk-js.md after ``<!-- marker: … -->`` (test_sdk_js_sealed runs the
    sealed one)."""
    text = (ROOT / "docs" / "sdk-js.md").read_text()
    match = re.search(rf"<!-- {marker}: [^>]*-->\s*```\w+\n(.*?)```", text, re.S)
    assert match, f"docs/sdk-js.md has no {marker}"
    return match.group(1)
