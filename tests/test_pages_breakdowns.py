"""The campaign page of a campaign with dimensions (issue 28), in a real headless Chromium against
``ldptel serve``: the breakdown table (released cells only, the withheld ones counted in total and
not named) and the experiment chart (one bar and one 95 % CI whisker per item, the +5-point item
marked, the page no wider than the screen), at desktop width and 390 px, frequency and numeric.
Screenshots go to ``build/test-artifacts/breakdown-screenshots/``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import write_config, xadd_batches
from browser_support import artifacts
from http_support import start_collector
from test_operator_pages import Site, browser, signed_in_page  # noqa: F401  (fixture)

from ldptel.aggregator.worker import Worker

CHECKOUT = {"name": "checkout", "oracle": "oue", "epsilon": 2.0,
            "domain": ["card", "paypal", "wallet", "bank"], "min_reports": 1000,
            "dimensions": {"platform": ["android", "ios", "web"], "arm": ["control", "treatment"]},
            "experiment": "arm", "description": "Payment method chosen at checkout"}
BASKET = {"name": "basket", "kind": "numeric", "epsilon": 2.0, "lower": 0, "upper": 100, "min_reports": 1000,
          "dimensions": {"arm": ["control", "treatment", "bigger-button"]}, "experiment": "arm"}
SIZES = {"android": 12_000, "ios": 8_000, "web": 300}
CONTROL, TREATMENT = [0.40, 0.30, 0.20, 0.10], [0.45, 0.30, 0.20, 0.05]


def with_dims(batch, **dims):
    for name, value in sorted(dims.items()):
        batch.dimensions.add(name=name, value=value)
    return batch


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, redis_url: str):
    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    tmp = tmp_path_factory.mktemp("breakdown-pages")
    cfg = write_config(tmp / "pages.toml", [CHECKOUT, BASKET], shuffler={"enabled": False})
    collector = start_collector(tmp, (tmp / "pages.toml").read_text(), redis_url, workers=1)
    try:
        rng = np.random.default_rng(30)
        checkout, basket = cfg.campaign("checkout"), cfg.campaign("basket")
        batches = []
        for platform, n in SIZES.items():
            for arm, freqs in (("control", CONTROL), ("treatment", TREATMENT)):
                values = rng.choice(4, size=n, p=freqs)
                batch = checkout.mechanism().encode_batch(values, rng=rng, campaign="checkout")
                batches.append(with_dims(batch, platform=platform, arm=arm))
        xadd_batches(r, checkout, batches)
        means = {"control": 40.0, "treatment": 44.0, "bigger-button": 40.0}
        xadd_batches(r, basket, [with_dims(basket.mechanism().encode_batch(
            rng.uniform(m - 30, m + 30, 4000), rng=rng, campaign="basket"), arm=arm)
            for arm, m in means.items()])
        Worker(cfg, r).run(once=True)
        yield Site(collector.url, collector.port, cfg, r, collector.proc)
    finally:
        collector.stop()
        r.close()


@pytest.fixture(scope="module")
def shots() -> Path:
    return artifacts("breakdown-screenshots")


@pytest.mark.parametrize("width", [1440, 390])
def test_breakdown_table_and_experiment_chart(browser, site, shots: Path, width: int) -> None:  # noqa: F811
    ctx, page = signed_in_page(browser, site, width)
    try:
        page.goto("/campaigns/checkout")
        table = page.locator("section.breakdown table.breakdown")
        cells = page.eval_on_selector_all("section.breakdown tbody tr", "rs => rs.map(r => r.dataset.cell)")
        assert sorted(cells) == ["control|android", "control|ios", "treatment|android", "treatment|ios"]
        assert table.count() == 1 and "web" not in (table.text_content() or "")  # withheld: not named
        note = page.locator("section.breakdown .withheld")
        assert note.get_attribute("data-withheld-cells") == "2"
        assert note.get_attribute("data-withheld-reports") == "600"
        assert re.search(r"600 reports fall in 2 cells below that threshold", note.text_content() or "")
        chart = page.locator("section.experiment svg.chart.bars")
        assert chart.count() == 1 and chart.locator("g.whisker").count() == 4
        assert chart.locator("line.zero").count() == 1
        assert page.locator("section.experiment rect.bar.negative").count() >= 1  # "bank" went down 5 points
        marked = page.eval_on_selector_all("table.differences tr[data-significant='true']",
                                           "rs => rs.map(r => r.dataset.value)")
        assert "card" in marked and "paypal" not in marked
        box = chart.bounding_box()
        assert box is not None and box["x"] >= 0
        # issue 35: scaled down to 390 px the chart's text was ~5 px; it keeps its drawn size
        heights = page.eval_on_selector_all("section.experiment svg.chart.bars text",
                                            "ts => ts.map(t => t.getBoundingClientRect().height)")
        assert heights and min(heights) >= 10, min(heights or [0])
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(shots / f"checkout-{width}.png"), full_page=True)
        page.goto("/campaigns/basket?compare=bigger-button")
        heading = page.locator("section.experiment h2").text_content() or ""
        assert heading.startswith("Experiment: bigger-button − control")
        assert page.locator("section.experiment .seg a").count() == 2  # the arms to compare
        assert page.locator("section.breakdown tbody tr").count() == 3
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(shots / f"basket-{width}.png"), full_page=True)
    finally:
        ctx.close()
