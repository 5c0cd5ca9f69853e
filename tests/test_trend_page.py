"""The campaign page's trend view, the window selector's "Latest complete" and "In progress"
entries and the page at 390 px,
in a real headless Chromium against ``ldptel serve`` (the browser fixtures of
test_operator_pages.py). Twelve hourly windows of a frequency campaign are stored as the
collector stores them (one below ``min_reports``) and counted by the real worker. Screenshots go
to ``build/test-artifacts/trend-screenshots/`` (printed at the end of the run)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from agg_support import random_batches, write_config, xadd_batches
from browser_support import artifacts
from http_support import start_collector
from test_operator_pages import Site, browser, signed_in_page  # noqa: F401  (fixture)

from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import Config
from ldptel.server import charts
from ldptel.server.pages.labels import window_label

HOURS = 12
WITHHELD = 4  # the window HOURS - 1 - WITHHELD hours ago has too few reports
CAMPAIGNS = [
    {"name": "platform", "oracle": "grr", "epsilon": 2.0, "domain": ["ios", "android", "web"], "window": "1h",
     "min_reports": 300, "description": "Platform of the device"},
    {"name": "theme", "oracle": "oue", "epsilon": 1.0, "domain": [f"theme {i}" for i in range(40)],
     "min_reports": 100, "description": "Theme chosen in Settings"},
]


@pytest.fixture(scope="module")
def trend_site(tmp_path_factory: pytest.TempPathFactory, redis_url: str):
    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    tmp = tmp_path_factory.mktemp("trend")
    cfg: Config = write_config(tmp / "pages.toml", CAMPAIGNS)
    newest = int(time.time()) // 3600 * 3600
    platform = cfg.campaign("platform")
    for k in range(HOURS):
        n = 100 if k == WITHHELD else 600 + 150 * k
        window = newest - (HOURS - 1 - k) * 3600
        xadd_batches(r, platform, random_batches(platform, n, 100, seed=k), window=window)
    theme = cfg.campaign("theme")
    xadd_batches(r, theme, random_batches(theme, 2000, 500, seed=99), window=0)
    Worker(cfg, r).run(once=True)
    collector = start_collector(tmp, (tmp / "pages.toml").read_text(), redis_url, workers=1)
    try:
        yield Site(collector.url, collector.port, cfg, r, collector.proc), newest
    finally:
        collector.stop()
        r.close()


@pytest.fixture(scope="module")
def trend_shots() -> Path:
    return artifacts("trend-screenshots")


def test_trend_chart_shows_every_window(browser, trend_site, trend_shots: Path) -> None:  # noqa: F811
    site, newest = trend_site
    series = site.api_json("/v1/campaigns/platform/series")["rows"]
    ctx, page = signed_in_page(browser, site, 1440)
    try:
        page.goto("/campaigns/platform")
        svg = page.locator("svg.chart.trend")
        assert svg.get_attribute("data-windows") == str(HOURS)
        assert page.locator("svg.chart.trend rect.n-bar").count() == HOURS
        withheld = page.locator("svg.chart.trend rect.n-bar.withheld")
        assert withheld.count() == 1
        assert withheld.get_attribute("data-window") == str(newest - (HOURS - 1 - WITHHELD) * 3600)
        assert [int(b.get_attribute("data-n")) for b in page.locator("svg.chart.trend rect.n-bar").all()] == [
            100 if k == WITHHELD else 600 + 150 * k for k in range(HOURS)]
        items = page.eval_on_selector_all("svg.chart.trend path.trend-line",
                                          "ps => ps.map(p => p.dataset.item)")
        # the withheld window breaks each of the 3 lines in two
        assert sorted(set(items)) == ["android", "ios", "web"] and len(items) == 6
        assert page.locator("svg.chart.trend path.trend-band").count() == 6
        released = [r for r in series if r["status"] == "released"]
        assert page.locator("svg.chart.trend circle.point").count() == len(released) == 3 * (HOURS - 1)
        # the hour in progress (issue 35): its points hollow (white, stroked), and the hint says so
        hollow = page.locator("svg.chart.trend circle.point.in-progress")
        assert hollow.count() == 3 and {c.get_attribute("fill") for c in hollow.all()} == {"#ffffff"}
        assert [r["complete"] for r in released if r["window"] == newest] == [False] * 3
        assert all(r["complete"] for r in released if r["window"] != newest)
        assert page.locator('[data-stat="trend-in-progress"]').is_visible()
        tips = page.eval_on_selector_all("svg.chart.trend circle.point title",
                                         "ts => ts.map(t => t.textContent)")
        camp = site.config.campaign("platform")
        for r in released:  # every released (window, item) of /series is a point, its numbers in the tooltip
            label = window_label(camp, r["window"])
            tip = (f"{r['item']}, {label}: {charts.fmt_count(r['estimate'])} devices "
                   f"(95% CI {charts.fmt_count(r['ci_low'])} to {charts.fmt_count(r['ci_high'])})")
            if r["window"] == newest:
                tip += "; in progress: not complete, still growing"
            assert tip in tips, tip
        # legend: the newest window's items by decreasing estimate
        newest_rows = sorted((r for r in released if r["window"] == newest), key=lambda r: -r["estimate"])
        assert page.inner_text(".trend .legend").split() == [r["item"] for r in newest_rows]
        page.locator("section.trend").scroll_into_view_if_needed()
        page.screenshot(path=str(trend_shots / "trend-1440.png"), full_page=True)
        # an "all" campaign has one window: no trend panel
        page.goto("/campaigns/theme")
        assert page.locator("section.trend").count() == 0
    finally:
        ctx.close()


def test_latest_entry_names_the_newest_ended_window(browser, trend_site, trend_shots: Path) -> None:  # noqa: F811
    """Issue 35: "Latest" is the newest window that has ended (the current hour, released, is in
    progress: offered apart as "In progress", and said to be when shown)."""
    site, newest = trend_site
    camp = site.config.campaign("platform")
    older = newest - 5 * 3600
    ctx, page = signed_in_page(browser, site, 1440)
    try:
        page.goto(f"/campaigns/platform?window={older}")
        latest = page.inner_text('#window option[value="latest"]')
        assert latest == f"Latest complete: {window_label(camp, newest - 3600)}", latest
        current = page.inner_text('#window option[value="current"]')
        assert current == f"In progress: {window_label(camp, newest)}", current
        assert page.eval_on_selector("#window", "s => s.value") == str(older)
        assert page.locator('[data-stat="in-progress-shown"]').count() == 0
        page.goto("/campaigns/platform")  # latest: the hour before this one, complete
        assert page.inner_text(".card-sub >> nth=0") == window_label(camp, newest - 3600)
        assert page.locator('[data-stat="in-progress-shown"]').count() == 0
        page.goto("/campaigns/platform?window=current")  # the hour in progress, released: said so
        assert page.eval_on_selector("#window", "s => s.value") == "current"
        assert window_label(camp, newest) in page.inner_text(".card-sub >> nth=0")
        assert page.locator('[data-stat="in-progress-shown"]').is_visible()
        page.screenshot(path=str(trend_shots / "in-progress-1440.png"), full_page=True)
    finally:
        ctx.close()


FONT_PX = """sel => [...document.querySelectorAll(sel)].map(t => t.getBoundingClientRect().height)"""


def test_page_is_usable_at_390px(browser, trend_site, trend_shots: Path) -> None:  # noqa: F811
    site, _ = trend_site
    ctx, page = signed_in_page(browser, site, 390)
    try:
        for name in ("platform", "theme"):
            page.goto(f"/campaigns/{name}")
            page.wait_for_load_state()
            # nothing wider than the screen: wide charts and tables scroll inside their own box
            wide = page.evaluate("""() => [...document.querySelectorAll('body *')].filter(e => {
                const r = e.getBoundingClientRect(); return r.right > 391 && r.width > 0; })
                .filter(e => !e.closest('.scroll, .table-wrap')).map(e => e.tagName + '.' + e.className
                + ' ' + Math.round(e.getBoundingClientRect().right)).slice(0, 12)""")
            assert page.evaluate("document.documentElement.scrollWidth") <= 390, (name, wide)
            for sel in ("svg.chart text.tick", "svg.chart text.label"):
                heights = page.evaluate(FONT_PX, sel)
                assert heights and min(heights) >= 10, (name, sel, min(heights or [0]))
            if name == "platform":  # issue 35: scrolled to the newest windows, the y-axis stays in view
                box = page.locator("section.trend .chart-box")
                assert box.evaluate("b => b.scrollLeft") > 0  # the chart is scrolled to the right
                axis, frame = page.locator("svg.chart.trend-y-axis").bounding_box(), box.bounding_box()
                assert axis is not None and frame is not None
                assert abs(axis["x"] - frame["x"]) <= 2, (axis, frame)
                ticks = page.eval_on_selector_all("svg.chart.trend-y-axis text.tick",
                                                  "ts => ts.map(t => t.textContent)")
                assert len(ticks) >= 3 and ticks[0] == "0", ticks
            page.screenshot(path=str(trend_shots / f"{name}-390.png"), full_page=True)
    finally:
        ctx.close()
