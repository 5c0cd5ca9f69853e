"""The JavaScript SDK in the shuffled privacy modes end to end (issue 29 on top of 26 and 28): pages
in headless Chromium (Debian's, driven by Playwright) using the browser bundle, each JS device a
client of its own (its own store, device secret and ledger: a shuffled campaign takes one report
per device and window), report to a real ``ldptel serve`` (embedded Redis, collector, shuffler,
aggregator with its analyzer keys). Every message is HPKE-sealed in the page to the analyzer key
the collector publishes, with Poisson fakes (``shuffled-fakes``) or as a GRR report at the planned
ε₀ (``shuffled``), dimension values in the clear on the envelope; the shuffler releases each
(campaign, cell) as one whole batch (``batch_min`` is the number of devices sent, so nothing is
left waiting), the aggregator opens and decodes it. Heavy hitters in ``shuffled`` (issue 39): each JS
device seals its local report (level, pool index, hash at ε₀); the walk finds the heaviest string,
every reported count within 4.5 std errors of the truth, as for the Python devices beside them.

The Python SDK sends the same population to a twin campaign (same config, so the same planned
fake rate or ε₀). The JS estimates agree with the truth and with Python's within 4.5 of their
stated standard errors, per item, per cell with dimensions and for the whole fleet; a value the
dimension's closed list does not hold travels as ``other`` (its own cell, released on its own). A
numeric campaign in ``shuffled-fakes`` rounds each value at random to its grid in the page; the
mean agrees with the truth (of the clipped values) and with Python's. Device-level windows
(``unique_devices``) from Node: one report per device naming its ended window, counted by the
collector, the estimate within 4.5 std errors of the truth per platform (and of 0 for a campaign
none of the devices saw an event of: they report its window too).

The JS devices draw from ``crypto.getRandomValues`` (the SDK takes no seed in production paths);
the Python twins and the populations are seeded. At 4.5 std errors a comparison fails about once
in 150,000 runs by chance.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from agg_support import EXPORT_TOKEN, INGEST_TOKEN, write_config
from browser_support import launched
from http_support import Collector, http_request, start_collector
from test_sdk_js import JS, PAGE, bundle, doc_example, open_page, serve_pages  # noqa: F401 (bundle: a fixture)

from ldptel.client import TelemetryClient

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LABELS = ["home", "search", "cart", "checkout", "account"]
Z = 4.5
N_FLEET = 500  # devices of the campaign without dimensions
N_CELL = 300  # devices per cell of the campaign with dimensions
N_GRR = 300
SEALED = {"window": "all", "central_epsilon": 1.0, "central_delta": 1e-6, "min_reports": 1,
          "domain": LABELS}
FAKES = {"privacy_mode": "shuffled-fakes", "batch_min": N_FLEET, **SEALED}
DIMS = {"privacy_mode": "shuffled-fakes", "batch_min": N_CELL,
        "dimensions": {"platform": ["android", "ios"]}, **SEALED}
GRR = {"privacy_mode": "shuffled", "oracle": "grr", "batch_min": N_GRR, **SEALED}
N_MEAN = 300
MEAN = {"kind": "numeric", "privacy_mode": "shuffled-fakes", "lower": 0.0, "upper": 100.0, "grid_points": 16,
        "batch_min": N_MEAN, **{k: v for k, v in SEALED.items() if k != "domain"}}
N_HH = 300  # heavy hitters in shuffled (issue 39): 2-byte strings over 2 levels
HH = {"kind": "heavy_hitters", "privacy_mode": "shuffled", "max_length": 2, "levels": 2, "width": 8,
      "batch_min": N_HH, **{k: v for k, v in SEALED.items() if k != "domain"}}
WORDS = ["ho", "se", "ca", "ch", "ac"]  # LABELS' first two letters, with their probabilities
CAMPAIGNS = [{"name": "js-sf", **FAKES}, {"name": "py-sf", **FAKES},
             {"name": "js-hh", **HH}, {"name": "py-hh", **HH},
             {"name": "js-sf-dims", **DIMS}, {"name": "py-sf-dims", **DIMS},
             {"name": "js-sh", **GRR}, {"name": "py-sh", **GRR},
             {"name": "js-mean", **MEAN}, {"name": "py-mean", **MEAN},
             {"name": "js-daily", "kind": "unique_devices", "epsilon": 2.0, "window": "1d", "min_reports": 1,
              "shuffle_max_delay": "1s",
              "dimensions": {"platform": ["android", "ios"]}}]
# the campaigns of docs/sdk-js.md's sealed example (its devices wait for batch_min: nothing released)
CAMPAIGNS += [
    {"name": "checkout-step", **FAKES, "batch_min": 1000, "dimensions": {"platform": ["android", "ios"]}},
    {"name": "load-time", **MEAN, "privacy_mode": "shuffled", "batch_min": 1000},
    {"name": "crash-seen", "kind": "unique_devices", "epsilon": 1.0, "window": "1d", "min_reports": 1,
     "shuffle_max_delay": "1s"},
]
SEALED_NAMES = [c["name"] for c in CAMPAIGNS if "privacy_mode" in c]

# devices: [[value, platform or null], …]; `batch` devices at a time, each its own client
DEVICES_JS = """async ([url, token, campaign, devices, batch, analyzerSigningKey]) => {
  const out = { queued: 0, accepted: 0, duplicates: 0, pending: 0, dropped: {}, errors: [] };
  for (let i = 0; i < devices.length; i += batch) {
    await Promise.all(devices.slice(i, i + batch).map(async ([value, platform]) => {
      const c = await ldptel.TelemetryClient.open({ url, token, storage: new ldptel.MemoryBackend(),
        acceptUnrandomized: true, backoffBaseS: 0.05, maxBackoffS: 1, analyzerSigningKey,
        ...(platform === null ? {} : { dimensions: { platform } }) });
      if (await c.report(campaign, value)) out.queued += 1;
      const r = await c.flush(60000);
      out.accepted += r.accepted; out.duplicates += r.duplicates; out.pending += r.pending;
      if (r.error) out.errors.push(r.error);
      for (const [k, n] of Object.entries(c.health().dropped)) out.dropped[k] = (out.dropped[k] ?? 0) + n;
      await c.close(null);
    }));
  }
  return out;
}"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bundle: Path) -> Iterator[Collector]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("sdk-js-sealed")
    write_config(tmp / "serve.toml", CAMPAIGNS, aggregator={"block_ms": 100}, shuffler={"batch_reports": 400})
    col = start_collector(tmp / "serve", (tmp / "serve.toml").read_text(), None, workers=2,
                          env={"LDPTEL_DATA_DIR": str(tmp / "data")}, timeout=60)
    PINNED[col.url] = analyzer_key_show(col.config_path, tmp / "data")
    yield col
    col.stop()


PINNED: dict[str, str] = {}  # collector URL → its analyzer signing key (what the devices pin)


def analyzer_key_show(config: Path, data_dir: Path) -> str:
    """``ldptel analyzer-key show --quiet`` for the serve's config (its keys directory)."""
    out = subprocess.run([sys.executable, "-m", "ldptel.commands.cli", "analyzer-key", "show",
                          "--config", str(config), "--quiet"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "LDPTEL_DATA_DIR": str(data_dir)}, check=True)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def browser(stack: Collector):
    with launched() as b:
        yield b


def get_json(url: str, path: str, token: str = EXPORT_TOKEN) -> tuple[int, dict]:
    reply = http_request(url, "GET", path, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    return reply.status, json.loads(reply.body)


def wait_for_keys(url: str) -> dict:
    """The devices' configs once the aggregator has published its analyzer key."""
    deadline = time.monotonic() + 60
    while True:
        status, doc = get_json(url, "/v1/campaigns", INGEST_TOKEN)
        configs = {c["name"]: c for c in doc.get("campaigns", [])} if status == 200 else {}
        if all(configs.get(name, {}).get("analyzer_key") for name in SEALED_NAMES):
            return configs
        assert time.monotonic() < deadline, (status, doc)
        time.sleep(0.2)


def released(url: str, name: str, n: int, query: str = "") -> dict:
    """The campaign's document once its ``n`` devices are decoded."""
    deadline = time.monotonic() + 90
    while True:
        status, doc = get_json(url, f"/v1/campaigns/{name}/estimates?{query}")
        if status == 200 and doc.get("n_reports") == n:
            return doc
        assert time.monotonic() < deadline, (status, doc)
        time.sleep(0.25)


def population(n: int, seed: int) -> list[str]:
    p = np.array([0.4, 0.25, 0.2, 0.1, 0.05])
    return [LABELS[i] for i in np.random.default_rng(seed).choice(len(LABELS), size=n, p=p)]


def send_js(browser, url: str, campaign: str, devices: list[list]) -> dict:
    ctx = browser.new_context()
    try:
        serve_pages(ctx, url, {"page.html": PAGE})
        page = open_page(ctx, url)
        started = time.monotonic()
        out = page.evaluate(DEVICES_JS, [url, INGEST_TOKEN, campaign, devices, 25, PINNED[url]])
        print(f"{campaign}: {len(devices)} JS devices in {time.monotonic() - started:.1f} s")
    finally:
        ctx.close()
    assert out["queued"] == len(devices) and out["pending"] == 0, out
    assert out["accepted"] + out["duplicates"] == len(devices) and out["dropped"] == {}, out
    return out


def send_py(url: str, tmp: Path, campaign: str, values: list[str], dims: dict | None = None,
            seed: int = 1) -> None:
    with TelemetryClient(url, INGEST_TOKEN, queue_path=tmp / f"{campaign}-{seed}.sqlite",
                         accept_unrandomized=True, rng=np.random.default_rng(seed),
                         analyzer_signing_key=PINNED[url]) as client:
        assert client.report_many(campaign, values, dimensions=dims) == len(values)
        assert client.flush(timeout=60).pending == 0


def agree(js: dict, py: dict, truth: np.ndarray, what: str) -> list[str]:
    """Each item's JS estimate within Z std errors of the truth and of Python's; returns lines
    for the test's output."""
    lines = []
    for k, (j, p) in enumerate(zip(js["items"], py["items"], strict=True)):
        assert abs(j["estimate"] - truth[k]) <= Z * j["std_error"], (what, k, j, truth[k])
        both = math.hypot(j["std_error"], p["std_error"])
        assert abs(j["estimate"] - p["estimate"]) <= Z * both, (what, k, j, p)
        lines.append(f"{what} {LABELS[k]:>8}: truth {truth[k]:4d}  JS {j['estimate']:7.1f} ± "
                     f"{j['std_error']:5.1f}  Python {p['estimate']:7.1f} ± {p['std_error']:5.1f}")
    return lines


def counts(values: list[str]) -> np.ndarray:
    return np.array([values.count(label) for label in LABELS])


def test_shuffled_fakes_page_agrees_with_python_and_truth(stack: Collector, browser, tmp_path: Path) -> None:
    url = stack.url
    configs = wait_for_keys(url)
    assert configs["js-sf"]["fake_rate"] == configs["py-sf"]["fake_rate"] > 0
    values = population(N_FLEET, 29)
    send_js(browser, url, "js-sf", [[v, None] for v in values])
    send_py(url, tmp_path, "py-sf", values)
    js, py = released(url, "js-sf", N_FLEET), released(url, "py-sf", N_FLEET)
    for doc in (js, py):
        assert doc["privacy"]["privacy_mode"] == "shuffled-fakes" and doc["privacy"]["batches"] == [N_FLEET]
        assert 0 < doc["privacy"]["central_epsilon"] <= 1.0
    # the fakes are the std error (λ·n/d fakes per item, uniform): JS sent as many as Python
    ratio = js["items"][0]["std_error"] / py["items"][0]["std_error"]
    assert 0.7 < ratio < 1.4, (js["items"][0], py["items"][0])
    print(f"shuffled-fakes, λ = {configs['js-sf']['fake_rate']:.3f}, {N_FLEET} devices")
    print("\n".join(agree(js, py, counts(values), "fleet")))


def test_shuffled_fakes_with_dimensions(stack: Collector, browser, tmp_path: Path) -> None:
    url = stack.url
    wait_for_keys(url)
    android, ios, other = population(N_CELL, 1), population(N_CELL, 2), population(N_CELL, 3)
    # the page's devices give their platform; "Android" and "linux" are not in the closed list:
    # the device sends "other", a cell of its own
    devices = ([[v, "android"] for v in android] + [[v, "ios"] for v in ios]
               + [[v, "linux" if i % 2 else "Android"] for i, v in enumerate(other)])
    order = np.random.default_rng(4).permutation(len(devices))
    send_js(browser, url, "js-sf-dims", [devices[i] for i in order])
    for seed, (vals, platform) in enumerate(((android, "android"), (ios, "ios"), (other, "linux")), 10):
        send_py(url, tmp_path, "py-sf-dims", vals, {"platform": platform}, seed=seed)
    n = 3 * N_CELL
    js, py = released(url, "js-sf-dims", n, "by=platform"), released(url, "py-sf-dims", n, "by=platform")
    truth = {"android": counts(android), "ios": counts(ios), "other": counts(other)}
    lines = []
    for doc in (js, py):
        assert sorted(doc["privacy"]["batches"]) == [N_CELL] * 3, doc["privacy"]
        assert sorted(c["dimensions"]["platform"] for c in doc["cells"]) == ["android", "ios", "other"]
    py_cells = {c["dimensions"]["platform"]: c for c in py["cells"]}
    for cell in js["cells"]:
        name = cell["dimensions"]["platform"]
        assert cell["n_reports"] == N_CELL
        lines += agree(cell, py_cells[name], truth[name], f"{name:>7}")
    fleet_js, fleet_py = released(url, "js-sf-dims", n), released(url, "py-sf-dims", n)
    lines += agree(fleet_js, fleet_py, truth["android"] + truth["ios"] + truth["other"], "  fleet")
    print("\n".join(lines))


def test_shuffled_grr_page(stack: Collector, browser, tmp_path: Path) -> None:
    url = stack.url
    configs = wait_for_keys(url)
    eps0 = configs["js-sh"]["epsilon"]
    assert eps0 == configs["py-sh"]["epsilon"] and eps0 > 1.0  # amplified: ε₀ above the central target
    values = population(N_GRR, 5)
    send_js(browser, url, "js-sh", [[v, None] for v in values])
    send_py(url, tmp_path, "py-sh", values, seed=6)
    js, py = released(url, "js-sh", N_GRR), released(url, "py-sh", N_GRR)
    assert js["privacy"]["privacy_mode"] == "shuffled" and js["privacy"]["batches"] == [N_GRR]
    assert 0.8 < js["items"][0]["std_error"] / py["items"][0]["std_error"] < 1.25
    print(f"shuffled GRR at ε₀ = {eps0:.3f}, {N_GRR} devices")
    print("\n".join(agree(js, py, counts(values), "fleet")))


def test_shuffled_heavy_hitters_page(stack: Collector, browser, tmp_path: Path) -> None:
    """Each JS device (its own random secret: its own level and pool index) seals the local
    heavy-hitter report at ε₀ as one 12-byte message; the aggregator's walk finds the heaviest
    string and every reported count is within 4.5 std errors of the truth, as for the Python
    devices beside them (bad strings: client-js/test/sealedClient.test.ts)."""
    url = stack.url
    configs = wait_for_keys(url)
    eps0 = configs["js-hh"]["epsilon"]
    assert eps0 == configs["py-hh"]["epsilon"] and eps0 > 1.0
    values = [w[:2] for w in population(N_HH, 7)]
    assert {w[:2] for w in LABELS} == set(WORDS)
    send_js(browser, url, "js-hh", [[v, None] for v in values])
    send_py(url, tmp_path, "py-hh", values, seed=8)
    truth = {w: values.count(w) for w in WORDS}
    docs = {}
    for name in ("js-hh", "py-hh"):
        deadline = time.monotonic() + 90
        while True:
            status, doc = get_json(url, f"/v1/campaigns/{name}/heavy-hitters")
            if status == 200 and doc.get("n_reports") == N_HH:
                break
            assert time.monotonic() < deadline, (status, doc)
            time.sleep(0.25)
        assert doc["privacy"]["privacy_mode"] == "shuffled" and doc["privacy"]["batches"] == [N_HH]
        assert "ho" in {it["value"] for it in doc["items"]}, (name, doc["items"])  # 40 % of devices
        for it in doc["items"]:
            assert abs(it["estimate"] - truth.get(it["value"], 0)) <= Z * it["std_error"], (name, it, truth)
        docs[name] = {it["value"]: it for it in doc["items"]}
    js, py = docs["js-hh"]["ho"], docs["py-hh"]["ho"]
    assert 0.7 < js["std_error"] / py["std_error"] < 1.4, (js, py)
    print(f"shuffled heavy hitters at ε₀ = {eps0:.3f}, {N_HH} devices: 'ho' truth {truth['ho']}, "
          f"JS {js['estimate']:.1f} ± {js['std_error']:.1f}, "
          f"Python {py['estimate']:.1f} ± {py['std_error']:.1f}")


def mean_doc(url: str, name: str, n: int) -> dict:
    deadline = time.monotonic() + 90
    while True:
        status, doc = get_json(url, f"/v1/campaigns/{name}/mean?window=current")
        if status == 200 and doc.get("n_reports") == n:
            return doc
        assert time.monotonic() < deadline, (status, doc)
        time.sleep(0.25)


def test_shuffled_numeric_page_rounds_to_the_grid(stack: Collector, browser, tmp_path: Path) -> None:
    """A numeric campaign in shuffled-fakes: each page device rounds its value at random to one of
    16 grid points (values above 100 clipped on the device), seals the index with its fakes."""
    url = stack.url
    wait_for_keys(url)
    reals = [float(x) for x in np.random.default_rng(11).gamma(4.0, 8.0, N_MEAN)]
    out = send_js(browser, url, "js-mean", [[x, None] for x in reals])
    assert out["accepted"] == N_MEAN
    with TelemetryClient(url, INGEST_TOKEN, queue_path=tmp_path / "py-mean.sqlite",
                         accept_unrandomized=True, rng=np.random.default_rng(12),
                         analyzer_signing_key=PINNED[url]) as client:
        assert client.report_many("py-mean", reals) == N_MEAN
        assert client.flush(timeout=60).pending == 0
    js, py = mean_doc(url, "js-mean", N_MEAN)["mean"], mean_doc(url, "py-mean", N_MEAN)["mean"]
    truth = float(np.mean(np.clip(reals, 0, 100)))
    assert abs(js["estimate"] - truth) <= Z * js["std_error"], (js, truth)
    assert abs(js["estimate"] - py["estimate"]) <= Z * math.hypot(js["std_error"], py["std_error"]), (js, py)
    print(f"mean over a 16-point grid, {N_MEAN} devices: truth {truth:.2f}  JS {js['estimate']:.2f} ± "
          f"{js['std_error']:.2f}  Python {py['estimate']:.2f} ± {py['std_error']:.2f}")


def test_node_device_level_windows(stack: Collector) -> None:
    """``unique_devices`` from Node: 400 devices, each its own client, record their events in a
    window (their clock a day behind the collector's), then report it once it has ended: one
    randomized bit per device naming the window, with its platform; devices without an event
    report "none". The collector counts 400 reports in that window; the estimate of devices with
    an event is within 4.5 std errors of the truth, for the fleet and per platform."""
    rng = np.random.default_rng(31)
    events = np.where(rng.random(400) < 0.6, rng.integers(1, 6, 400), 0)
    platforms = ["android" if i % 2 else "ios" for i in range(400)]
    devices = [[int(e), p] for e, p in zip(events, platforms, strict=True)]
    started = time.monotonic()
    script = JS / "test" / "e2e" / "node-device-level.mjs"
    run = subprocess.run(["node", str(script), stack.url, INGEST_TOKEN, "js-daily", json.dumps(devices)],
                         capture_output=True, text=True, timeout=300, check=True)
    out = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"js-daily: 400 Node devices in {time.monotonic() - started:.1f} s: {out}")
    # every unique_devices campaign the device knows reports its window: js-daily and the docs'
    # crash-seen (no event there: "none"); today's windows are opened, not sent
    assert out["queued"] == int(events.sum()) and out["accepted"] == 800 and out["pending"] == 0, out
    assert out["dropped"] == {} and out["windows"] == 800, out
    window = out["window"]

    def window_doc(name: str, query: str = "") -> dict:
        deadline = time.monotonic() + 60
        while True:
            status, doc = get_json(stack.url, f"/v1/campaigns/{name}/estimates?window={window}{query}")
            if status == 200 and doc.get("n_reports") == 400:
                return doc
            assert time.monotonic() < deadline, (status, doc)
            time.sleep(0.25)

    doc = window_doc("js-daily", "&by=platform")
    quiet = {row["value"]: row for row in window_doc("crash-seen")["items"]}["at_least_once"]
    assert abs(quiet["estimate"]) <= Z * quiet["std_error"], quiet
    truth = {p: int(sum(1 for e, q in zip(events, platforms, strict=True) if e > 0 and q == p))
             for p in ("android", "ios")}
    lines = []
    for cell in doc["cells"]:
        p = cell["dimensions"]["platform"]
        item = {row["value"]: row for row in cell["items"]}["at_least_once"]
        assert cell["n_reports"] == 200, cell
        assert abs(item["estimate"] - truth[p]) <= Z * item["std_error"], (p, item)
        lines.append(f"{p}: devices with an event: truth {truth[p]}, estimate {item['estimate']:.1f} ± "
                     f"{item['std_error']:.1f}")
    item = {row["value"]: row for row in window_doc("js-daily")["items"]}["at_least_once"]
    assert abs(item["estimate"] - int((events > 0).sum())) <= Z * item["std_error"], item
    lines.append(f"crash-seen (no device had the event): {quiet['estimate']:.1f} ± {quiet['std_error']:.1f}")
    print("\n".join(lines))


def test_docs_sealed_example_runs(stack: Collector, tmp_path: Path) -> None:
    """docs/sdk-js.md's Node example of the shuffled modes, as written (URL, token, queue filled
    in): two sealed reports accepted (the third, device-level, waits for its window's end)."""
    wait_for_keys(stack.url)
    modules = tmp_path / "node_modules" / "@ldptel"
    modules.mkdir(parents=True)
    (modules / "client").symlink_to(JS)
    (tmp_path / "example.mjs").write_text(doc_example("sealed-example"))
    out = subprocess.run(["node", "example.mjs"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LDPTEL_URL": stack.url, "LDPTEL_TOKEN": INGEST_TOKEN,
                              "LDPTEL_QUEUE": str(tmp_path / "q.jsonl"),
                              "LDPTEL_ANALYZER_SIGNING_KEY": PINNED[stack.url]})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["result"]["accepted"] == 2 and doc["result"]["pending"] == 0, doc
    # the day of crash-seen (its event) and of js-daily (opened by the flush: a device-level campaign)
    assert doc["windows"] == 2 and doc["health"]["dropped"] == {}, doc
