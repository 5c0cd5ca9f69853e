"""The operator pages' first hour (issue 25), in a real headless Chromium against ``ldptel
serve``: the trend of a campaign with a version change (a marker and label at the change, each
version's points on their own, one colour per item, at least 5 time labels, as wide as its card)
and the campaigns list at 390 px as cards (every column shown, no name broken mid-word, nothing
wider than the screen). Screenshots at 390 px and desktop width go to
``build/test-artifacts/history-screenshots/`` (printed at the end of the run)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from agg_support import EXPORT_TOKEN, random_batches, write_config, xadd_batches
from browser_support import artifacts
from http_support import http_request, start_collector
from test_operator_pages import Site, browser, signed_in_page  # noqa: F401  (fixture)

from ldptel.aggregator.worker import Worker
from ldptel.store import registry

PLATFORM = {"name": "platform", "oracle": "grr", "epsilon": 2.0, "domain": ["ios", "android", "web", "tv"],
            "window": "1h", "min_reports": 300, "description": "Platform of the device"}
OTHERS = [
    {"name": "demo-session-seconds", "kind": "numeric", "epsilon": 2.0, "lower": 0, "upper": 3600,
     "window": "1h", "min_reports": 300, "description": "Session length in seconds"},
    {"name": "android-theme-by-region", "oracle": "oue", "epsilon": 1.0, "domain_size": 16},
    {"name": "search-terms", "kind": "heavy_hitters", "epsilon": 4.0, "max_length": 8, "levels": 8,
     "width": 16},
]
HOURS = 6  # windows: 3 of version 1, then 3 of version 2 (version 3, a rollback to 1, has none yet)


def knows_version_3(url: str) -> bool:
    """Whether the collector has version 3 of ``platform`` as its current version."""
    reply = http_request(url, "GET", "/v1/campaigns/platform/versions", None,
                         {"Authorization": f"Bearer {EXPORT_TOKEN}"})
    doc = reply.parsed()
    assert reply.status == 200 and isinstance(doc, dict), (reply.status, doc)
    return [v["version"] for v in doc["versions"] if v["status"] == "current"] == [3]


@pytest.fixture(scope="module")
def history_site(tmp_path_factory: pytest.TempPathFactory, redis_url: str):
    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    tmp = tmp_path_factory.mktemp("history")
    cfg = write_config(tmp / "pages.toml", [PLATFORM, *OTHERS])
    collector = start_collector(tmp, (tmp / "pages.toml").read_text(), redis_url, workers=1)
    try:
        registry.put(r, {**PLATFORM, "epsilon": 1.0})  # version 2: ε 2 → 1
        registry.rollback(r, "platform", 1)  # version 3: back to ε 2, no reports yet
        live = registry.Live(cfg, r)
        live.refresh(force=True)
        newest = int(time.time()) // 3600 * 3600 - 3600  # every window has ended
        v1, v2, _ = live.config.versions("platform")
        for k in range(HOURS):
            camp = v1 if k < HOURS // 2 else v2
            batches = random_batches(camp, 500 + 100 * k, 100, seed=k)
            for b in batches:
                b.campaign_version = camp.version
            xadd_batches(r, camp, batches, window=newest - (HOURS - 1 - k) * 3600)
        Worker(live.config, r).run(once=True)
        # the collector's workers read the registry every 0.5 s: wait until serve knows version 3
        deadline = time.monotonic() + 10
        while not knows_version_3(collector.url):
            assert time.monotonic() < deadline, "serve never took version 3 of platform"
            time.sleep(0.1)
        yield Site(collector.url, collector.port, cfg, r, collector.proc), newest
    finally:
        collector.stop()
        r.close()


@pytest.fixture(scope="module")
def history_shots() -> Path:
    return artifacts("history-screenshots")


def test_trend_colours_labels_and_width(browser, history_site) -> None:  # noqa: F811
    """A colour per item (a stylesheet rule painted every point in the accent colour), at least
    5 time labels (there were 2), and the card's whole width (it used half)."""
    ctx, page = signed_in_page(browser, history_site[0], 1440)
    try:
        page.goto("/campaigns/platform")
        svg = page.locator("svg.chart.trend")
        fills = page.eval_on_selector_all("svg.chart.trend circle.point",
                                          "cs => cs.map(c => getComputedStyle(c).fill)")
        assert len(set(fills)) == 4, set(fills)  # a colour per item
        ticks = page.eval_on_selector_all("svg.chart.trend text.x-tick", "ts => ts.map(t => t.textContent)")
        assert len(ticks) >= 5 and len(set(ticks)) == len(ticks), ticks
        box = svg.bounding_box()
        panel = page.locator("section.panel.trend .chart-box").bounding_box()
        assert box is not None and panel is not None
        assert box["width"] >= panel["width"] - 2, (box, panel)  # the card's whole width
    finally:
        ctx.close()


TRANSFORMS = "tds => tds.map(td => getComputedStyle(td, '::before').textTransform)"
MARKERS = """gs => gs.map(g => [g.dataset.version, g.querySelector('text').textContent,
                                g.querySelector('line').x1.baseVal.value])"""


@pytest.mark.parametrize("width", [1440, 390])
def test_trend_across_a_version_change(browser, history_site, history_shots: Path, width: int) -> None:  # noqa: F811
    ctx, page = signed_in_page(browser, history_site[0], width)
    try:
        page.goto("/campaigns/platform")
        svg = page.locator("svg.chart.trend")
        assert svg.count() == 1
        # a marker where each version starts, in order; the rollback labelled (issue 35: "v2: ε 2 → 1"
        # was drawn at the right edge after v3's, and the heading said "2 versions")
        marks = page.eval_on_selector_all("svg.chart.trend g.version-marker", MARKERS)
        assert [m[:2] for m in marks] == [["2", "v2: ε 2 → 1"], ["3", "v3: rollback to v1 (ε 1 → 2)"]], marks
        assert marks[0][2] < marks[1][2], marks
        assert "3 versions" in page.inner_text("section.trend h2")
        versions = set(page.eval_on_selector_all("svg.chart.trend path.trend-line",
                                                 "ps => ps.map(p => p.dataset.version)"))
        assert versions == {"1", "2"}  # each version's points on their own lines
        points = page.locator("svg.chart.trend circle.point").count()
        assert points == HOURS * 4  # every window of both versions, each item
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(history_shots / f"trend-version-change-{width}.png"), full_page=True)
    finally:
        ctx.close()


def test_campaign_list_at_390px_is_cards(browser, history_site, history_shots: Path) -> None:  # noqa: F811
    ctx, page = signed_in_page(browser, history_site[0], 390)
    try:
        page.goto("/")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        cards = "table.campaigns tbody tr[data-campaign]"
        rows = page.eval_on_selector_all(cards, """rows => rows.map(tr => ({
            name: tr.dataset.campaign,
            cells: [...tr.querySelectorAll('td')].map(td => {
                const r = td.getBoundingClientRect();
                return {label: td.dataset.label, left: r.left, right: r.right, width: r.width};
            }),
            nameLines: tr.querySelector('td.name a').getClientRects().length,
        }))""")
        assert len(rows) == 1 + len(OTHERS)
        for row in rows:
            assert len(row["cells"]) == 8
            for cell in row["cells"]:  # every column shown, inside the screen
                assert cell["width"] > 0 and cell["left"] >= 0 and cell["right"] <= 390, (row["name"], cell)
            assert row["nameLines"] == 1, row["name"]  # never broken mid-word
        labels = page.eval_on_selector_all(f"{cards}:first-child td:not(.name)",
                                           "tds => tds.map(td => getComputedStyle(td, '::before').content)")
        assert '"Aggregator lag"' in labels
        # issue 35: an uppercase transform showed "ε per report" as "Ε PER REPORT" ("E PER REPORT")
        transforms = page.eval_on_selector_all(f"{cards}:first-child td:not(.name)", TRANSFORMS)
        assert set(transforms) == {"none"} and '"ε per report"' in labels, transforms
        page.screenshot(path=str(history_shots / "campaigns-390.png"), full_page=True)
        page.set_viewport_size({"width": 1440, "height": 900})
        page.screenshot(path=str(history_shots / "campaigns-1440.png"), full_page=True)
    finally:
        ctx.close()


@pytest.mark.parametrize("width", [1440, 390])
def test_old_versions_windows_on_the_page_and_the_api(browser, history_site, history_shots: Path,  # noqa: F811
                                                      width: int) -> None:
    """Issue 35: a window of version 1 read without ``version=`` was "0 of 300 · No device has
    reported in this window yet" on the page and a bare 409 "(0 so far)" on the API. The page
    now shows the version that holds it, the selector lists every (version, window) pair, and
    the 409 names the version."""
    site, newest = history_site
    v1_window = newest - (HOURS - 1) * 3600  # the oldest: version 1's, 500 reports
    reply = http_request(site.url, "GET", f"/v1/campaigns/platform/estimates?window={v1_window}", None,
                         {"Authorization": f"Bearer {EXPORT_TOKEN}"})
    err = reply.parsed()
    assert reply.status == 409 and isinstance(err, dict), (reply.status, err)
    assert err["detail"]["versions_with_reports"] == [{"version": 1, "n_reports": 500}], err
    assert "version 1 holds 500 reports of this window (version=1)" in err["detail"]["message"], err
    ctx, page = signed_in_page(browser, site, width)
    try:
        page.goto(f"/campaigns/platform?window={v1_window}")
        assert page.inner_text('[data-stat="n"]') == "500"
        assert page.inner_text('[data-stat="version"]') == "version 1 of 3"
        options = page.eval_on_selector_all("#window option", "os => os.map(o => [o.value, o.text])")
        pairs = [value for value, _ in options[2:]]  # after "latest" and "current"
        assert pairs == [f"{newest - k * 3600}-v{2 if k < 3 else 1}" for k in range(HOURS)], options
        assert all(text.endswith(f" · version {value[-1]}") for value, text in options[2:]), options
        assert page.eval_on_selector("#window", "s => s.value") == f"{v1_window}-v1"
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(history_shots / f"old-version-window-{width}.png"), full_page=True)
        with page.expect_navigation():  # a window of version 2: the pair's version is shown
            page.select_option("#window", f"{newest}-v2")
        assert f"window={newest}-v2" in page.url
        assert page.inner_text('[data-stat="version"]') == "version 2 of 3"
        assert page.inner_text('[data-stat="n"]') == f"{500 + 100 * (HOURS - 1):,}"
    finally:
        ctx.close()
