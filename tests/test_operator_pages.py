"""Operator pages (server/pages/) in a real headless Chromium (Playwright) against the real app:
``ldptel serve`` (gunicorn, two workers, so sessions must work across processes) on a free
127.0.0.1 port, the embedded Redis, reports POSTed over HTTP and counted by the real worker.

Screenshots of every page go to ``build/test-artifacts/operator-screenshots/`` (printed at the
end of the run; ``tests/browser_support.py``). Without Chromium the browser tests skip locally
(the run ends saying how to install it) and fail on CI (``$CI`` or ``LDPTEL_REQUIRE_BROWSER=1``).
The HTTP-level tests (CSRF, cookie flags, shared session secret) and the chart unit tests run
either way.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import (
    EXPORT_TOKEN,
    INGEST_TOKEN,
    HttpStack,
    random_batches,
    shuffle_once,
    signed_in,
    write_config,
    xadd_batches,
)
from browser_support import artifacts, launched
from http_support import http_request, start_collector

from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import Config
from ldptel.keys import GLOBAL_METRICS_KEY, SESSION_SECRET_KEY, published_key
from ldptel.privacy.clones import shuffle_epsilon
from ldptel.server import charts
from ldptel.server.probe import RATE_FORGET_S, IngestRates
from ldptel.store.redis_server import free_port

LONG_NAME = "android-settings-theme-choice-by-device-model-and-region-eu-2025"  # 64 characters
COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white"]
WORDS = np.array(["checkout", "search", "home", "cart", "wishlist", "x"], dtype=object)
RAPPOR = {"bloom_bits": 64, "hashes": 2, "cohorts": 8, "f": 0.25, "p": 0.35, "q": 0.65,
          "candidates": ["email", "google", "apple", "github", "sso"]}


def device_models(n: int) -> list[str]:
    """``n`` distinct item labels, a few of them very long."""
    brands = ["Pixel", "Galaxy", "Xperia", "Moto", "Redmi", "OnePlus", "Nokia", "Oppo"]
    out = [f"{brands[i % len(brands)]} {i // len(brands) + 1}{'a' if i % 3 == 0 else ''}" for i in range(n)]
    out[3] = "Samsung Galaxy S24 Ultra Enterprise Edition (SM-S928B/DS, 512 GB, Titanium Violet)"
    out[11] = "Fairphone 5 — refurbished, dual SIM, 256 GB, “Sky Blue”, EU charger"
    return out


CAMPAIGNS = [
    {"name": "colors", "oracle": "oue", "epsilon": 1.0, "domain": COLORS, "min_reports": 1000,
     "description": "Favourite colour in the onboarding survey"},
    {"name": LONG_NAME, "oracle": "olh", "epsilon": 1.0, "domain": device_models(240), "min_reports": 1000,
     "description": "Theme chosen in Settings, per device model. " * 4},
    {"name": "scarce", "oracle": "grr", "epsilon": 1.0, "domain_size": 5, "min_reports": 5000},
    {"name": "empty", "oracle": "hadamard", "epsilon": 0.5, "domain_size": 16, "window": "1h"},
    {"name": "search", "kind": "heavy_hitters", "epsilon": 4.0, "max_length": 8, "levels": 8, "width": 16,
     "description": "Search terms typed in the app"},
    {"name": "latency", "kind": "range", "epsilon": 2.0, "domain_size": 1024,
     "description": "Page latency in ms (0 to 1023)"},
    {"name": "signup", "oracle": "rappor", **RAPPOR, "description": "Sign-up method"},
    {"name": "hourly", "oracle": "grr", "epsilon": 2.0, "domain": ["ios", "android", "web"], "window": "1h",
     "min_reports": 100},
    # ε = 6 and 300 reports: the shuffle bound certifies no central ε below ε₀
    {"name": "sparse", "oracle": "grr", "epsilon": 6.0, "domain": ["yes", "no"], "min_reports": 100},
]
N = {"colors": 6000, LONG_NAME: 20_000, "scarce": 1200, "search": 12_000, "latency": 20_000, "signup": 3000,
     "hourly": 600, "sparse": 300}


# --- the running site ---------------------------------------------------------------------------

@dataclass
class Site:
    url: str
    port: int
    config: Config
    redis: redis.Redis
    proc: subprocess.Popen

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict | None = None) -> tuple[int, dict, bytes]:
        """(status, headers with ``set-cookie`` as the list of every cookie set, body)."""
        reply = http_request(self.url, method, path, body, headers)
        return reply.status, {**reply.headers, "set-cookie": reply.cookies}, reply.body

    def api(self, path: str) -> bytes:
        status, _, body = self.request("GET", path, headers={"Authorization": f"Bearer {EXPORT_TOKEN}"})
        assert status == 200, (path, status, body[:300])
        return body

    def api_json(self, path: str) -> dict:
        return json.loads(self.api(path))

    def post(self, campaign_name: str, values) -> None:
        camp = self.config.campaign(campaign_name)
        mech = camp.mechanism()
        rng = np.random.default_rng(len(values))
        for start in range(0, len(values), 2000):
            batch = mech.encode_batch(values[start:start + 2000], rng=rng, campaign=camp.name)
            status, _, body = self.request("POST", "/v1/reports", batch.SerializeToString(), {
                "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
            assert status == 202, body

    def aggregate(self) -> None:
        shuffle_once(self.config, self.redis)
        Worker(self.config, self.redis).run(once=True)


def _values(name: str, n: int, rng: np.random.Generator):
    camp = next(c for c in CAMPAIGNS if c["name"] == name)
    if camp.get("kind") == "heavy_hitters":
        return WORDS[rng.choice(WORDS.size, n, p=[0.34, 0.24, 0.18, 0.12, 0.08, 0.04])]
    if camp.get("kind") == "range":
        return np.clip(rng.lognormal(np.log(180), 0.6, n).round(), 0, 1023).astype(np.int64)
    d = len(camp["candidates"] if "candidates" in camp else camp.get("domain") or range(camp["domain_size"]))
    w = 1.0 / np.arange(1, d + 1) ** 1.1
    v = rng.choice(d, size=n, p=w / w.sum())
    return [camp["candidates"][i] for i in v] if "candidates" in camp else v


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, redis_url: str):
    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    tmp = tmp_path_factory.mktemp("pages")
    cfg = write_config(tmp / "pages.toml", CAMPAIGNS)
    collector = start_collector(tmp, (tmp / "pages.toml").read_text(), redis_url, workers=2)
    s = Site(collector.url, collector.port, cfg, r, collector.proc)
    try:
        rng = np.random.default_rng(2026)
        for name, n in N.items():
            s.post(name, _values(name, n, rng))
        hourly = cfg.campaign("hourly")  # an older window, written as the collector stores it
        older = (int(time.time()) // 3600 - 1) * 3600
        xadd_batches(r, hourly, random_batches(hourly, 400, 200, seed=3), window=older)
        s.aggregate()
        yield s
    finally:
        collector.stop()
        r.close()


# --- the browser ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    with launched() as b:
        yield b


@pytest.fixture(scope="module")
def shots() -> Path:
    return artifacts("operator-screenshots")


def new_page(browser, site: Site, state: dict | None = None):
    ctx = browser.new_context(base_url=site.url, viewport={"width": 1440, "height": 900},
                              storage_state=state, accept_downloads=True)
    ctx.set_default_timeout(15_000)
    return ctx, ctx.new_page()


def sign_in(page, token: str = EXPORT_TOKEN) -> None:
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def signed_in_page(browser, site: Site, width: int):
    """(context, page) signed in with the export token, at ``width`` px."""
    ctx, page = new_page(browser, site)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/signin")
    sign_in(page)
    return ctx, page


@pytest.fixture(scope="module")
def signed_in_state(browser, site: Site) -> dict:
    ctx, page = new_page(browser, site)
    page.goto("/signin")
    sign_in(page)
    assert urllib.parse.urlparse(page.url).path == "/"
    state = ctx.storage_state()
    ctx.close()
    return state


@pytest.fixture
def page(browser, site: Site, signed_in_state: dict):
    ctx, pg = new_page(browser, site, signed_in_state)
    yield pg
    ctx.close()


def shoot(page, shots: Path, name: str) -> None:
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)


def table_rows(page) -> list[dict]:
    """The estimates table: value and the exact numbers of each row (``data-*``) and its text."""
    return page.eval_on_selector_all("table.estimates tbody tr", """rows => rows.map(tr => {
        const cell = c => tr.querySelector(`[data-col="${c}"]`);
        const out = {value: tr.dataset.value, text: {}};
        for (const c of ["estimate", "std_error", "estimate_normalized"]) {
            const el = cell(c); if (!el) continue;
            out[c] = JSON.parse(el.dataset.raw); out.text[c] = el.textContent.trim();
        }
        const ci = cell("ci");
        if (ci) { out.ci_low = JSON.parse(ci.dataset.low); out.ci_high = JSON.parse(ci.dataset.high);
                  out.text.ci = ci.textContent.trim(); }
        return out; })""")


ROW_CENTERS = """idx => {
    const bars = [...document.querySelectorAll('svg.chart.bars rect.bar')];
    const rows = [...document.querySelectorAll('table.estimates tbody tr')];
    return idx.map(i => { const b = bars[i].getBoundingClientRect(), r = rows[i].getBoundingClientRect();
                          return [b.top + b.height / 2, r.top + r.height / 2]; }); }"""


def assert_rows_line_up(page, idx: list[int]) -> None:
    """The chart's bar i is level with the table's row i (same row heights, same header)."""
    for bar_y, row_y in page.evaluate(ROW_CENTERS, idx):
        assert abs(bar_y - row_y) <= 2, (idx, bar_y, row_y)


def check_rows_equal_api(rows: list[dict], items: list[dict]) -> None:
    by_value = {str(it["value"]): it for it in items}
    for row in rows:
        it = by_value[row["value"]]
        for key in ("estimate", "std_error", "ci_low", "ci_high", "estimate_normalized"):
            if key in row:
                assert row[key] == it[key], (row["value"], key, row[key], it[key])
        assert row["text"]["estimate"] == charts.fmt_count(it["estimate"])
        assert row["text"]["ci"] == f"{charts.fmt_count(it['ci_low'])} to {charts.fmt_count(it['ci_high'])}"
        assert row["text"]["std_error"] == f"± {charts.fmt_count(it['std_error'])}"


# --- browser tests ----------------------------------------------------------------------------------

def test_unauthenticated_request_lands_on_signin(browser, site: Site, shots: Path) -> None:
    ctx, page = new_page(browser, site)
    try:
        page.goto("/campaigns/colors?view=normalized")
        url = urllib.parse.urlparse(page.url)
        assert url.path == "/signin"
        assert urllib.parse.parse_qs(url.query)["next"] == ["/campaigns/colors?view=normalized"]
        assert page.is_visible("input#token") and "export token" in page.inner_text("main").lower()
        assert page.locator("svg.chart").count() == 0 and page.locator("table").count() == 0
        shoot(page, shots, "01-signin")
        page.goto("/")
        assert urllib.parse.urlparse(page.url).path == "/signin"
    finally:
        ctx.close()


def test_signin_refuses_a_wrong_token_and_accepts_an_export_token(browser, site: Site, shots: Path) -> None:
    ctx, page = new_page(browser, site)
    try:
        page.goto("/campaigns/colors")
        for bad in ("wrong-token-123", INGEST_TOKEN):
            sign_in(page, bad)
            assert urllib.parse.urlparse(page.url).path == "/signin"
            assert "not a valid export token" in page.inner_text("#signin-error")
            assert page.input_value("#token") == ""
        shoot(page, shots, "02-signin-refused")
        assert not any(c["name"] == "ldptel_session" and "auth" in c["value"] for c in ctx.cookies())
        sign_in(page)
        assert urllib.parse.urlparse(page.url).path == "/campaigns/colors"  # back where it started
        assert page.inner_text("h1") == "colors"
        cookie = next(c for c in ctx.cookies() if c["name"] == "ldptel_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and not cookie["secure"]
        assert EXPORT_TOKEN not in cookie["value"]
        assert page.evaluate("document.cookie") == ""  # HttpOnly: invisible to scripts
        # sign out: POST with the CSRF token, back to sign-in, pages closed again
        page.click("form.signout button")
        page.wait_for_load_state()
        assert urllib.parse.urlparse(page.url).path == "/signin" and "signed out" in page.inner_text("main")
        page.goto("/campaigns/colors")
        assert urllib.parse.urlparse(page.url).path == "/signin"
    finally:
        ctx.close()


def test_campaigns_list(page, site: Site, shots: Path) -> None:
    page.goto("/")
    rows = page.locator("table.campaigns tbody tr")
    assert rows.count() == len(CAMPAIGNS)
    assert page.locator(f'tr[data-campaign="{LONG_NAME}"] td.name a').inner_text() == LONG_NAME
    colors = page.locator('tr[data-campaign="colors"]')
    assert colors.locator('[data-col="reports"]').inner_text().startswith("6,000")
    assert "released" in colors.inner_text() and "OUE" in colors.inner_text()
    assert colors.locator('[data-col="lag"]').inner_text() == "up to date"
    assert colors.locator('[data-col="window"]').inner_text().startswith("All time")
    assert re.match(r"(just now|\d+ s ago|\d+ min ago)", colors.locator('[data-col="updated"]').inner_text())
    assert "1,200 of 5,000 needed" in page.locator('tr[data-campaign="scarce"]').inner_text()
    assert "no reports yet" in page.locator('tr[data-campaign="empty"]').inner_text()
    assert "UTC" in page.locator('tr[data-campaign="empty"] [data-col="window"]').inner_text()
    signup = page.locator('tr[data-campaign="signup"] [data-col="epsilon"]').inner_text()
    eps_inf = site.config.campaign("signup").params["epsilon_inf"]
    assert f"ε∞ {charts.fmt_eps(eps_inf)}" in signup
    # the page is wide enough for the long name without a horizontal scrollbar
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shoot(page, shots, "03-campaigns")
    # the list's JSON refresh endpoint, as the page's script calls it
    live = page.evaluate("fetch('/live').then(r => r.json())")
    assert "colors" in live["fragments"]["rows"]


def test_frequency_chart_and_table_equal_the_export_api(page, site: Site, shots: Path) -> None:
    doc = site.api_json("/v1/campaigns/colors/estimates")
    page.goto("/campaigns/colors")
    assert page.locator("svg.chart.bars rect.bar").count() == len(COLORS)
    assert page.locator("svg.chart.bars g.whisker").count() == len(COLORS)
    rows = table_rows(page)
    assert len(rows) == len(COLORS)
    check_rows_equal_api(rows, doc["items"])
    ests = [r["estimate"] for r in rows]
    assert ests == sorted(ests, reverse=True)
    bars = page.eval_on_selector_all("svg.chart.bars rect.bar",
                                     "els => els.map(e => Number(e.dataset.value))")
    assert bars == ests  # the chart shows the table's numbers, in the table's order
    assert page.inner_text('[data-stat="n"]') == "6,000"
    note = page.inner_text("section.privacy")
    assert "ε = 1" in note and "2.7 times" in note
    shoot(page, shots, "04-frequency-raw")

    page.click('a[data-view="normalized"]')
    page.wait_for_load_state()
    assert "view=normalized" in page.url
    assert page.locator("svg.chart.bars rect.bar").count() == len(COLORS)
    assert page.locator("svg.chart.bars g.whisker").count() == 0
    norm = [r["estimate_normalized"] for r in table_rows(page)]
    assert norm == sorted(norm, reverse=True) and min(norm) >= 0
    assert sum(norm) == pytest.approx(6000)
    shoot(page, shots, "05-frequency-normalized")


def test_downloads_are_the_export_api_output(page, site: Site) -> None:
    page.goto("/campaigns/colors")
    with page.expect_download() as dl:
        page.click('a[data-download="csv"]')
    got = Path(dl.value.path()).read_bytes()
    assert dl.value.suggested_filename == "colors-0.csv"
    assert got == site.api("/v1/campaigns/colors/estimates?format=csv")
    rows = list(csv.reader(io.StringIO(got.decode())))
    assert rows[0] == ["value", "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized",
                       "window", "n_reports", "complete"]
    assert [r[0] for r in rows[1:]] == COLORS
    with page.expect_download() as dl:
        page.click('a[data-download="json"]')
    assert json.loads(Path(dl.value.path()).read_bytes()) == site.api_json("/v1/campaigns/colors/estimates")


def test_240_items_long_labels_and_negative_estimates(page, site: Site, shots: Path) -> None:
    doc = site.api_json(f"/v1/campaigns/{LONG_NAME}/estimates")
    page.goto(f"/campaigns/{LONG_NAME}")
    assert page.locator("svg.chart.bars rect.bar").count() == 25
    assert page.locator("table.estimates tbody tr").count() == 25
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate("[...document.querySelectorAll('.table-box')]"
                         ".every(e => e.scrollWidth <= e.clientWidth)")  # no column cut off
    assert_rows_line_up(page, [0, 12, 24])
    shoot(page, shots, "06-many-items-top25")

    page.click('a[data-action="show-all"]')
    page.wait_for_load_state()
    assert page.locator("svg.chart.bars rect.bar").count() == 240
    assert page.locator("svg.chart.bars g.whisker").count() == 240
    check_rows_equal_api(table_rows(page), doc["items"])
    # negative raw estimates are bars left of the zero line
    zero = float(page.get_attribute("svg.chart.bars", "data-zero-x"))
    neg = page.eval_on_selector_all("svg.chart.bars rect.bar.negative",
                                    "els => els.map(e => [Number(e.getAttribute('x'))"
                                    " + Number(e.getAttribute('width')), Number(e.dataset.value)])")
    assert neg and all(right <= zero + 0.1 and v < 0 for right, v in neg)
    assert len(neg) == sum(1 for it in doc["items"] if it["estimate"] < 0)
    # long labels are shortened in the chart, whole in its tooltip
    labels = page.eval_on_selector_all("svg.chart.bars text.label", "els => els.map(e => e.textContent)")
    assert max(map(len, labels)) <= 40 and any(t.endswith("…") for t in labels)
    # the chart scrolls inside the page instead of making it 5000 px tall
    box = page.locator(".chart-box").bounding_box()
    assert box["height"] <= 0.8 * 900
    assert_rows_line_up(page, [0, 5])
    # ... and scrolls together with the table, row for row
    page.eval_on_selector(".table-box", "e => { e.scrollTop = 3000; }")
    page.wait_for_timeout(100)
    assert abs(page.eval_on_selector(".chart-box", "e => e.scrollTop") - 3000) <= 2
    assert_rows_line_up(page, [100, 105])
    shoot(page, shots, "07-many-items-all")


def test_below_threshold_and_empty_campaigns_show_no_numbers(page, site: Site, shots: Path) -> None:
    page.goto("/campaigns/scarce")
    content = page.inner_text('[data-fragment="content"]')
    assert "Not enough reports yet (1,200 of 5,000)" in content
    assert page.locator("svg.chart").count() == 0 and page.locator("table.estimates").count() == 0
    assert page.locator("a[data-download]").count() == 0
    shoot(page, shots, "08-below-threshold")
    page.goto("/campaigns/empty")
    assert "No reports yet" in page.inner_text('[data-fragment="content"]')
    assert page.locator("svg.chart").count() == 0
    shoot(page, shots, "09-empty")


def test_heavy_hitters_page(page, site: Site, shots: Path) -> None:
    doc = site.api_json("/v1/campaigns/search/heavy-hitters")
    page.goto("/campaigns/search")
    rows = table_rows(page)
    assert [r["value"] for r in rows] == [it["value"] for it in doc["items"]]
    assert {"checkout", "search", "home"} <= {r["value"] for r in rows}
    check_rows_equal_api(rows, doc["items"])
    assert page.locator("svg.chart.bars rect.bar").count() == len(rows)
    with page.expect_download() as dl:
        page.click('a[data-download="json"]')
    assert json.loads(Path(dl.value.path()).read_bytes()) == doc
    shoot(page, shots, "10-heavy-hitters")


def test_range_page_cdf_quantiles_and_range_form(page, site: Site, shots: Path) -> None:
    page.goto("/campaigns/latency")
    assert page.locator("svg.chart.cdf path.cdf").count() == 1
    assert page.locator("svg.chart.cdf path.band").count() == 1
    qs = page.eval_on_selector_all("table.quantiles tbody tr", "rows => rows.map(tr => tr.dataset.q)")
    api = site.api_json(f"/v1/campaigns/latency/quantiles?q={','.join(qs)}")
    got = page.eval_on_selector_all("table.quantiles tbody tr", """rows => rows.map(tr => [
        JSON.parse(tr.querySelector('[data-col=value]').dataset.raw),
        JSON.parse(tr.querySelector('[data-col=rank_std_error]').dataset.raw)])""")
    assert got == [[it["value"], it["rank_std_error"]] for it in api["items"]]

    page.fill("#lo", "100")
    page.fill("#hi", "299")
    page.click("#range-form button")
    page.wait_for_load_state()
    ans = site.api_json("/v1/campaigns/latency/range?lo=100&hi=299")
    el = page.locator("p.answer")
    assert json.loads(el.get_attribute("data-estimate")) == ans["estimate"]
    assert json.loads(el.get_attribute("data-std-error")) == ans["std_error"]
    assert f"{charts.fmt_count(ans['estimate'])} devices" in el.inner_text()
    assert page.locator("svg.chart.cdf rect.highlight").count() == 1
    shoot(page, shots, "11-range")

    page.fill("#lo", "500")
    page.fill("#hi", "20")
    page.click("#range-form button")
    page.wait_for_load_state()
    assert "lo: must be <= hi" in page.inner_text("#range-answer")


def test_auto_refresh_replaces_fragments_without_reloading(page, site: Site, shots: Path) -> None:
    page.goto("/campaigns/hourly?window=current")  # the hour in progress (issue 35: not "latest")
    windows = page.eval_on_selector_all("select#window option", "os => os.map(o => o.value)")
    assert windows[:2] == ["latest", "current"] and len(windows) == 4  # + the current and the previous hour
    assert page.inner_text('[data-stat="n"]') == "600"
    page.evaluate("window.__not_reloaded = true")
    before = table_rows(page)
    site.post("hourly", _values("hourly", 400, np.random.default_rng(9)))
    site.aggregate()
    deadline = time.monotonic() + 15  # the page polls every 5 s (the CSP forbids wait_for_function's eval)
    while page.inner_text('[data-stat="n"]') != "1,000":
        assert time.monotonic() < deadline, "the page did not refresh itself"
        page.wait_for_timeout(200)
    assert page.evaluate("window.__not_reloaded") is True
    after = table_rows(page)
    assert after != before
    doc = site.api_json("/v1/campaigns/hourly/estimates?window=current")
    assert doc["n_reports"] == 1000 and doc["complete"] is False
    check_rows_equal_api(after, doc["items"])
    assert "Live · updated" in page.inner_text("#live-status")
    shoot(page, shots, "12-after-refresh")

    with page.expect_navigation():  # choosing a window submits the form (a full navigation)
        page.select_option("select#window", windows[3])  # the previous hour
    assert f"window={windows[3]}" in page.url and page.inner_text('[data-stat="n"]') == "400"


def test_rappor_page_and_a_bad_window(page, site: Site, shots: Path) -> None:
    eps_inf = charts.fmt_eps(site.config.campaign("signup").params["epsilon_inf"])
    page.goto("/campaigns/signup")
    assert f"ε∞ = {eps_inf}" in page.inner_text("section.privacy")
    check_rows_equal_api(table_rows(page), site.api_json("/v1/campaigns/signup/estimates")["items"])
    shoot(page, shots, "13-rappor")
    page.goto("/campaigns/hourly?window=123")
    assert "is not the start of a 1h window" in page.inner_text("p.notice.warn")
    assert page.inner_text('[data-stat="n"]') == charts.fmt_count(site.api_json(
        "/v1/campaigns/hourly/estimates")["n_reports"])  # the latest window instead
    shoot(page, shots, "14-bad-window")


def test_campaign_page_states_the_central_epsilon(page, site: Site, shots: Path) -> None:
    """The head and the privacy panel say why a local campaign's window claims no central ε
    (issue 36, reproduction 7: it is republished per report, so two publications can differ by one
    report), where the old page printed the shuffle bound of the window's n; the live refresh
    carries both fragments; the decode time is the hour."""
    eps_c = shuffle_epsilon(1.0, N["colors"], 1e-6)
    doc = site.api_json("/v1/campaigns/colors/estimates")
    privacy = doc["privacy"]
    assert eps_c is not None and privacy["central_epsilon"] is None and privacy["shuffled"] is True
    assert privacy["central_reason"].startswith("republished per report") and doc["decoded_at"] % 3600 < 60
    page.goto("/campaigns/colors")
    words = ("comparing two publications can isolate one report, so no central ε is claimed and each "
             "report's own ε = 1 is the guarantee")
    assert words in page.inner_text('section.privacy [data-stat="central"]')
    assert f"{eps_c:.3g}" not in page.inner_text("section.privacy")
    head = page.inner_text('[data-fragment="central_head"]')
    assert head == "· no central ε (republished per report)"
    assert "ε = 1 per report" in page.inner_text("p.meta")
    assert "decoded in the hour from" in page.inner_text('[data-stat="decoded"]')
    page.locator("section.privacy").scroll_into_view_if_needed()
    shoot(page, shots, "15-central-epsilon")
    live = page.evaluate("fetch('/campaigns/colors/live').then(r => r.json())")
    assert words in live["fragments"]["central"]
    assert live["fragments"]["central_head"] == head


# --- HTTP-level tests (no browser) ---------------------------------------------------------------------

def _cookie(headers: dict) -> str:
    return next(c.split(";", 1)[0] for c in headers.get("set-cookie", []) if c.startswith("ldptel_session="))


def _signin_form(site: Site) -> tuple[str, str]:
    status, headers, body = site.request("GET", "/signin")
    assert status == 200
    csrf = re.search(rb'name="csrf_token" value="([^"]+)"', body).group(1).decode()
    return _cookie(headers), csrf


def test_csrf_cookie_flags_and_session_across_workers(site: Site) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    cookie, csrf = _signin_form(site)
    # no CSRF token, or a wrong one: refused even with the right export token
    for data in ({"token": EXPORT_TOKEN}, {"token": EXPORT_TOKEN, "csrf_token": "forged"}):
        status, headers, body = site.request("POST", "/signin", urllib.parse.urlencode(data),
                                             {**form, "Cookie": cookie})
        assert status == 400 and b"expired" in body
        assert not any("auth" in c for c in headers.get("set-cookie", []))
    cookie, csrf = _signin_form(site)
    data = {"token": EXPORT_TOKEN, "csrf_token": csrf, "next": "https://evil.example/"}
    status, headers, _ = site.request("POST", "/signin", urllib.parse.urlencode(data),
                                      {**form, "Cookie": cookie})
    assert status == 302 and headers["location"] == "/"  # never off-site
    set_cookie = next(c for c in headers["set-cookie"] if c.startswith("ldptel_session="))
    assert "HttpOnly" in set_cookie and "SameSite=Lax" in set_cookie and "Secure" not in set_cookie
    session = set_cookie.split(";", 1)[0]
    # two gunicorn workers, one secret (created once in Redis): every new connection works
    assert site.redis.get(SESSION_SECRET_KEY)
    for _ in range(12):
        status, headers, _ = site.request("GET", "/", headers={"Cookie": session})
        assert status == 200 and "script-src 'nonce-" in headers["content-security-policy"]
    # sign-out without the CSRF token does nothing
    status, _, _ = site.request("POST", "/signout", "", {**form, "Cookie": session})
    assert status == 400
    assert site.request("GET", "/", headers={"Cookie": session})[0] == 200
    # without a session: pages redirect, the refresh endpoint answers 401, downloads redirect
    status, headers, _ = site.request("GET", "/campaigns/colors")
    assert status == 302 and headers["location"].startswith("/signin?next=")
    status, _, body = site.request("GET", "/campaigns/colors/live")
    assert status == 401 and json.loads(body)["error"] == "unauthorized"
    status, headers, _ = site.request("GET", "/campaigns/colors/download/estimates.csv?format=csv")
    assert status == 302 and "/signin" in headers["location"]
    # a forged cookie is no session
    assert site.request("GET", "/", headers={"Cookie": "ldptel_session=eyJhdXRoIjoieCJ9.x.y"})[0] == 302


def _signed_in_cookie(site: Site) -> str:
    cookie, csrf = _signin_form(site)
    status, headers, _ = site.request("POST", "/signin", urllib.parse.urlencode(
        {"token": EXPORT_TOKEN, "csrf_token": csrf}), {"Content-Type": "application/x-www-form-urlencoded",
                                                        "Cookie": cookie})
    assert status == 302
    return _cookie(headers)


def test_downloads_answer_as_the_api_does(site: Site) -> None:
    cookie = {"Cookie": _signed_in_cookie(site)}
    auth = {"Authorization": f"Bearer {EXPORT_TOKEN}"}
    api_path = "/v1/campaigns/colors/estimates?format=csv&window=0"
    status, api_headers, api_body = site.request("GET", api_path, None, auth)
    assert status == 200
    path = "/campaigns/colors/download/estimates.csv?window=0"
    status, headers, body = site.request("GET", path, None, cookie)
    assert status == 200 and body == api_body
    for h in ("etag", "last-modified", "x-ldptel-campaign", "x-ldptel-window", "x-ldptel-n-reports"):
        assert headers[h] == api_headers[h], h
    assert headers["content-disposition"] == 'attachment; filename="colors-0.csv"'
    assert headers["vary"] == "Cookie" and headers["cache-control"] == "no-store"
    status, headers, body = site.request("GET", "/campaigns/colors/download/estimates.json?window=0", None,
                                         {**cookie, "If-None-Match": api_headers["etag"]})
    assert (status, body, headers["etag"], headers["vary"]) == (304, b"", api_headers["etag"], "Cookie")
    assert "content-disposition" not in headers
    # heavy hitters as CSV: the API's JSON rows, written with the one CSV writer
    doc = site.api_json("/v1/campaigns/search/heavy-hitters")
    status, headers, body = site.request("GET", "/campaigns/search/download/heavy-hitters.csv", None, cookie)
    assert status == 200
    assert headers["content-disposition"] == 'attachment; filename="search-heavy-hitters-latest.csv"'
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert rows[0] == [*doc["items"][0], "window", "n_reports", "complete"]
    assert len(rows) == len(doc["items"]) + 1
    assert rows[1:] == [["" if v is None else str(v) for v in it.values()]
                        + [str(doc["window"]), str(doc["n_reports"]), "false"] for it in doc["items"]]
    q = "q=0.1,0.5,0.9"
    status, _, body = site.request("GET", f"/campaigns/latency/download/quantiles.json?{q}", None, cookie)
    assert status == 200 and json.loads(body) == site.api_json(f"/v1/campaigns/latency/quantiles?{q}")
    status, _, body = site.request("GET", "/campaigns/latency/download/cdf.csv", None, cookie)
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert status == 200 and len(rows) == 1025
    assert rows[0] == ["value", "cdf", "cdf_ci_low", "cdf_ci_high", "window", "n_reports", "complete"]
    values = np.array([r[:4] for r in rows[1:]], dtype=float)
    assert (np.diff(values[:, 1]) >= 0).all() and (values[:, 2] <= values[:, 1]).all()
    assert (values[:, 1] <= values[:, 3]).all() and values[:, 2:].min() >= 0 and values[:, 2:].max() <= 1
    # errors are the API's JSON errors
    for page_path, api_path in (("/campaigns/scarce/download/estimates.csv",
                                 "/v1/campaigns/scarce/estimates"),
                                ("/campaigns/colors/download/estimates.csv?window=x",
                                 "/v1/campaigns/colors/estimates?window=x"),
                                ("/campaigns/latency/download/quantiles.json?q=2",
                                 "/v1/campaigns/latency/quantiles?q=2")):
        status, headers, body = site.request("GET", page_path, None, cookie)
        api_status, _, api_body = site.request("GET", api_path, None, auth)
        assert (status, body) == (api_status, api_body) and status in (400, 409), page_path
        assert headers["vary"] == "Cookie"
    status, _, body = site.request("GET", "/campaigns/latency/download/estimates.csv", None, cookie)
    assert status == 404 and b"No such download" in body


def test_session_secret_is_created_once_in_redis(redis_url: str, tmp_path: Path) -> None:
    from ldptel.server.app import create_app

    r = redis.Redis.from_url(redis_url)
    r.delete(SESSION_SECRET_KEY)
    cfg = write_config(tmp_path / "c.toml", CAMPAIGNS[:1])
    a, b = create_app(cfg, redis_url), create_app(cfg, redis_url)
    assert a.secret_key and a.secret_key == b.secret_key == r.get(SESSION_SECRET_KEY).decode()
    fixed = write_config(tmp_path / "d.toml", CAMPAIGNS[:1], server={"secret_key": "k" * 32})
    assert create_app(fixed, redis_url).secret_key == "k" * 32


def test_pages_answer_503_while_redis_is_down(tmp_path: Path) -> None:
    from ldptel.server.app import create_app

    cfg = write_config(tmp_path / "c.toml", CAMPAIGNS[:1])
    app = create_app(cfg, f"redis://127.0.0.1:{free_port()}")  # nothing listens there
    client = app.test_client()
    resp = client.get("/campaigns/colors")
    assert resp.status_code == 503 and b"Storage unavailable" in resp.data and resp.mimetype == "text/html"
    resp = client.get("/campaigns/colors/live")
    assert resp.status_code == 503 and resp.get_json()["error"] == "unavailable"


def _signed_in_client(app):
    client = app.test_client()
    form = client.get("/signin").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    assert client.post("/signin", data={"token": EXPORT_TOKEN, "csrf_token": csrf}).status_code == 302
    return client


def _redis_snapshot(r: redis.Redis) -> dict:
    """Every key but the request-metrics hash, with its value (as DUMP bytes)."""
    return {k: r.dump(k) for k in r.scan_iter(count=1000) if k != GLOBAL_METRICS_KEY.encode()}


def test_ingest_rate_from_the_counter_and_page_views_write_nothing(redis_url: str, tmp_path: Path) -> None:
    from ldptel.server.app import create_app

    r = redis.Redis.from_url(redis_url)
    probe = {"name": "rate-probe", "oracle": "grr", "epsilon": 1.0, "domain_size": 4, "min_reports": 10}
    cfg = write_config(tmp_path / "c.toml", [probe])
    t0 = time.time()  # the app's probe takes its first reading as it starts
    app = create_app(cfg, redis_url)
    client = _signed_in_client(app)
    stat = re.compile(r'data-stat="rate">([^<]*)<')
    first = stat.search(client.get("/campaigns/rate-probe").get_data(as_text=True)).group(1)
    assert first in ("measuring…", "0 reports/s")  # "0" once the app is RATE_GAP_S old
    camp = cfg.campaign("rate-probe")
    rng = np.random.default_rng(1)
    batch = camp.mechanism().encode_batch(np.arange(400) % 4, rng=rng, campaign=camp.name)
    resp = client.post("/v1/reports", data=batch.SerializeToString(), headers={
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
    assert resp.status_code == 202
    app.extensions["ldptel"].metrics.flush()
    before = _redis_snapshot(r)
    time.sleep(2.1)  # the first reading must be RATE_GAP_S old
    paths = ("/campaigns/rate-probe", "/", "/live", "/campaigns/rate-probe/live")
    views = [client.get(path) for path in paths]
    assert [v.status_code for v in views] == [200] * 4
    elapsed = time.time() - t0
    shown = stat.search(views[0].get_data(as_text=True)).group(1)
    rate = float(shown.removesuffix(" reports/s").replace(",", ""))
    # 400 reports between the two readings, taken 2.1 s to `elapsed` apart
    assert 400 / elapsed * 0.95 <= rate <= 400 / 2.1 * 1.05, shown
    app.extensions["ldptel"].metrics.flush()
    assert _redis_snapshot(r) == before  # page views wrote nothing (request metrics aside)


def test_ingest_rate_in_a_worker_never_asked_before(redis_url: str, tmp_path: Path) -> None:
    """Issue 35: each worker process kept its own readings, taken at page views only, so a worker
    not asked before said "measuring…" (47 s after the last report); now every worker's probe
    reads the counter in the background from its start. Two apps on one Redis are two workers:
    reports go to ``a``, and ``b``'s first page view shows their rate."""
    probe = {"name": "rate-probe", "oracle": "grr", "epsilon": 1.0, "domain_size": 4, "min_reports": 10}
    cfg = write_config(tmp_path / "c.toml", [probe])
    t0 = time.time()
    a, b = HttpStack(cfg, redis_url), HttpStack(cfg, redis_url)
    try:
        cookie = signed_in(a)  # the session is in Redis: good for both
        camp = cfg.campaign("rate-probe")
        a.post_batch(camp.mechanism().encode_batch(np.arange(400) % 4, rng=np.random.default_rng(1),
                                                   campaign=camp.name))
        time.sleep(2.5)  # RATE_GAP_S, and b's probe reads every second meanwhile
        status, _, body = b.get("/campaigns/rate-probe", token=None, headers={"Cookie": cookie})
        elapsed = time.time() - t0
    finally:
        a.close()
        b.close()
    assert status == 200
    shown = re.search(r'data-stat="rate">([^<]*)<', body.decode()).group(1)
    assert shown.endswith(" reports/s"), shown  # was "measuring…"
    rate = float(shown.removesuffix(" reports/s").replace(",", ""))
    # 400 reports since b's first reading (at its start, before them), from 2 s to `elapsed` ago
    print(f"first view of a second worker: {shown} (400 reports, {elapsed:.1f} s after its start)")
    assert 400 / elapsed * 0.95 <= rate <= 400 / 2.0 * 1.05, shown


def test_ingest_rate_readings() -> None:
    rates = IngestRates()
    assert rates.rate("a", 100, 1000.0) is None  # one reading: no rate yet
    assert rates.rate("a", 150, 1001.0) is None  # less than RATE_GAP_S later: not kept
    assert rates.rate("a", 300, 1010.0) == pytest.approx(20.0)  # (300 - 100) / 10 s
    assert rates.rate("a", 900, 1040.0) == pytest.approx(20.0)  # from the oldest reading in the last minute
    assert rates.rate("a", 1500, 1100.0) == pytest.approx(10.0)  # (1500 - 900) / 60 s: the span moved on
    assert rates.rate("a", 1500, 1300.0) == 0.0  # nothing within the span: the newest older reading
    assert rates.rate("a", 0, 1310.0) == 0.0  # a counter that went back (new storage) is no negative rate
    assert rates.rate("b", 5, 1310.0) is None  # per campaign
    assert rates.rate("a", 7, 1310.0 + RATE_FORGET_S + 1) is None  # readings over an hour old are forgotten


# --- chart and formatting units ----------------------------------------------------------------------

def test_number_formatting() -> None:
    assert charts.fmt_count(1234.6) == "1,235" and charts.fmt_count(-3.2) == "\u22123"
    assert charts.fmt_count(-0.2) == "0" and charts.fmt_count(None) == "—"
    assert charts.fmt_count(float("nan")) == "—"
    assert charts.fmt_compact(1500) == "1.5k" and charts.fmt_compact(-2_000_000) == "\u22122M"
    assert charts.fmt_eps(2.0) == "2" and charts.fmt_eps(1.0718) == "1.07"
    assert charts.fmt_pct(0.1234) == "12.3%" and charts.fmt_rate(3.21) == "3.2"
    assert charts.fmt_rate(12345.6) == "12,346"
    assert charts.nice_ticks(-130, 980) == [-250.0, 0.0, 250.0, 500.0, 750.0, 1000.0]
    assert charts.nice_ticks(0, 1) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert charts.nice_ticks(5, 5)[0] <= 5 <= charts.nice_ticks(5, 5)[-1]


def test_bar_chart_svg() -> None:
    bars = [charts.Bar("<script>alert(1)</script>", 100.0, 60.0, 140.0), charts.Bar("b", -20.0, -60.0, 20.0),
            charts.Bar("c", None), charts.Bar("x" * 200, 5.0, float("nan"), 9.0)]
    svg = str(charts.bar_chart(bars))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert svg.count('class="bar"') == 2 and svg.count('class="bar negative"') == 1
    assert svg.count('class="whisker"') == 2  # no whisker without both CI ends
    zero = float(re.search(r'data-zero-x="([\d.]+)"', svg).group(1))
    neg = re.search(r'class="bar negative" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)
    x, w = map(float, neg.groups())
    assert abs(x + w - zero) < 0.2
    many = str(charts.bar_chart([charts.Bar(f"item {i}", float(i), i - 1.0, i + 1.0) for i in range(250)]))
    assert many.count('class="bar"') == 250 and 'data-rows="250"' in many


def test_campaign_page_says_when_its_estimates_were_decoded(site: Site) -> None:
    """The page shows the publication it reads ("decoded … from N reports", N = the API's
    n_reports); before a released window's first publication it says the estimates are being
    decoded, and the API answers 503 not_yet_published with Retry-After."""
    cookie = {"Cookie": _signed_in_cookie(site)}
    doc = site.api_json("/v1/campaigns/colors/estimates")
    status, _, body = site.request("GET", "/campaigns/colors", None, cookie)
    found = re.search(rb'data-stat="decoded">Estimates decoded (.+?) from ([\d,]+) reports\.', body)
    assert status == 200 and found, body[-2000:]
    assert int(found.group(2).replace(b",", b"")) == doc["n_reports"]
    key = published_key("colors", doc["window"])
    saved = site.redis.dump(key)
    site.redis.delete(key)
    try:
        status, _, body = site.request("GET", "/campaigns/colors", None, cookie)
        assert status == 200 and b'data-state="pending"' in body and b'data-stat="decoded"' not in body
        status, headers, body = site.request("GET", "/v1/campaigns/colors/estimates", None,
                                             {"Authorization": f"Bearer {EXPORT_TOKEN}"})
        assert status == 503 and json.loads(body)["error"] == "not_yet_published"
        assert int(headers["retry-after"]) >= 1
    finally:
        site.redis.restore(key, 0, saved)
    assert site.api_json("/v1/campaigns/colors/estimates") == doc
