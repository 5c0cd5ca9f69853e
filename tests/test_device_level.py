"""Device-level report types (issue 28): ``unique_devices``, ``per_device_histogram`` and
``per_device_count``, aggregated in the SDK's store over the window and sent once per device and
window, through the real collector app over HTTP, the shuffler and the aggregator.

- 10,000 simulated devices firing 1–50 events a day (and 5,000 active devices firing none) through
  ``report_many``'s simulation path: the estimate of devices with at least one event is within its
  std error of 10,000, the same when every device fires ten times as many events, and the
  collector counts one report per device and window;
- 20 real devices (one ``TelemetryClient`` and SQLite store each) over three days of their own
  clock, firing 1–50 events a day (8 of them none): each window gets exactly one report per device
  at the collector, each charged once in the device's ledger, the window in progress none; a
  device that stops without flushing sends its window at its next start.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack, shuffle_once, signed_in, write_config, xadd_batches
from browser_support import artifacts
from test_operator_pages import browser, signed_in_page  # noqa: F401  (fixture)

from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import ConfigError, parse_campaign
from ldptel.client import TelemetryClient
from ldptel.client.device_level import aggregate, increment, simulated
from ldptel.store import tally

DAY = 86400
UNIQUE = {"name": "crash-seen", "kind": "unique_devices", "epsilon": 2.0, "window": "1d", "min_reports": 10}
HISTOGRAM = {"name": "top-screen", "kind": "per_device_histogram", "epsilon": 2.0, "window": "1d",
             "oracle": "grr", "domain": ["home", "cart", "search"], "min_reports": 10}
COUNT = {"name": "crashes", "kind": "per_device_count", "epsilon": 2.0, "window": "1d", "upper": 20,
         "min_reports": 10}


def test_aggregates_of_a_window() -> None:
    assert aggregate("unique_devices", 0, {}, None) == 0 and aggregate("unique_devices", 37, {}, None) == 1
    labels = ["home", "cart", "search"]
    tie = {"cart": 2, "home": 2, "search": 1}
    assert aggregate("per_device_histogram", 5, tie, labels) == 1  # a tie: the value seen first
    assert aggregate("per_device_histogram", 3, {"search": 3}, labels) == 2
    assert aggregate("per_device_count", 55.0, {}, None) == 55.0  # the mechanism clips to [0, upper]
    with pytest.raises(ValueError, match="crashes"):
        increment({"name": "crashes", "kind": "per_device_count"}, -1)
    assert increment({"kind": "unique_devices"}, "anything") == 1.0


def test_report_many_takes_numpy_event_counts() -> None:
    """Issue 35: ``report_many`` on ``unique_devices`` with NumPy integers raised "a
    per_device_count value … got np.int64(2)" (the wrong kind, and a number refused)."""
    unique = {"name": "crash-seen", "kind": "unique_devices"}
    counts = {"name": "crashes", "kind": "per_device_count"}
    assert [simulated(unique, v) for v in np.array([0, 2, 7], dtype=np.int64)] == [0, 1, 1]
    assert simulated(counts, np.float32(2.5)) == 2.5 and simulated(counts, np.int32(3)) == 3.0
    with pytest.raises(ValueError, match="'crash-seen': a unique_devices value is the number of events"):
        simulated(unique, -1)
    with pytest.raises(ValueError, match="unique_devices"):
        simulated(unique, np.bool_(True))


@pytest.mark.parametrize(("extra", "key"), [({"window": "2d"}, "window"), ({"window": "all"}, "window"),
                                           ({"reports_per_window": 5}, "reports_per_window"),
                                           ({"memoize": True, "epsilon_inf": 4.0}, "memoize")])
def test_device_level_config_errors(extra, key) -> None:
    with pytest.raises(ConfigError) as err:
        parse_campaign({**UNIQUE, **extra}, "w")
    assert str(err.value).startswith(f"campaigns[crash-seen].{key}:")


@pytest.fixture
def stack(redis_client: redis.Redis, redis_url: str, tmp_path: Path):
    cfg = write_config(tmp_path / "c.toml", [UNIQUE, HISTOGRAM, COUNT])
    s = HttpStack(cfg, redis_url)
    yield cfg, s
    s.close()


def drain(cfg, r) -> None:
    shuffle_once(cfg, r)
    Worker(cfg, r, log=lambda _m: None).run(once=True)


def estimate(s: HttpStack, name: str, window: int) -> dict:
    import json

    status, _, body = s.get(f"/v1/campaigns/{name}/estimates?window={window}")
    assert status == 200, body
    return {row["value"]: row for row in json.loads(body)["items"]}


def test_ten_thousand_simulated_devices(stack, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, s = stack
    rng = np.random.default_rng(28)
    today = int(time.time()) // DAY * DAY
    firing = rng.integers(1, 51, 10_000)  # events per device and day
    silent = np.zeros(5_000, dtype=int)  # active devices without the event
    client = TelemetryClient(s.url, INGEST_TOKEN, queue_path=tmp_path / "sim.sqlite",
                             rng=np.random.default_rng(3))
    try:
        for day, scale in ((today - 2 * DAY, 1), (today - DAY, 10)):  # then ten times the events
            assert client.report_many("crash-seen", [*(firing * scale).tolist(), *silent.tolist()],
                                      window=day) == 15_000
        assert client.flush(timeout=60).accepted == 30_000
    finally:
        client.close(flush_timeout=None)
    drain(cfg, redis_client)
    camp = cfg.campaign("crash-seen")
    assert tally.window_counts(redis_client, camp) == {today - 2 * DAY: 15_000, today - DAY: 15_000}
    seen = []
    for day in (today - 2 * DAY, today - DAY):
        row = estimate(s, "crash-seen", day)["at_least_once"]
        assert abs(row["estimate"] - 10_000) < 3 * row["std_error"], row  # within its std error band
        seen.append(row["estimate"])
    print(f"unique devices: truth 10,000; estimates {seen[0]:.0f} (1–50 events each), "
          f"{seen[1]:.0f} (10–500 events each), std error {row['std_error']:.0f}")
    assert abs(seen[1] - seen[0]) < 4 * row["std_error"]  # ten times the events: the same devices
    # issue 35: the day in progress said "0 of 10 … reports needed" all day: its devices report
    # once it has ended, and the pages say so
    cookie = {"Cookie": signed_in(s)}
    status, _, page = s.request("GET", f"/campaigns/crash-seen?window={today - DAY}", headers=cookie)
    assert status == 200 and "devices report a window once it has ended" in page.decode()
    status, _, listing = s.request("GET", "/", headers=cookie)
    assert status == 200 and "reported after the window ends" in listing.decode()


@pytest.fixture(scope="module")
def device_level_shots() -> Path:
    return artifacts("device-level-screenshots")


@pytest.mark.parametrize("width", [1440, 390])
def test_unique_devices_page_shows_the_devices_with_their_interval(
        browser, stack, redis_client: redis.Redis, device_level_shots: Path, width: int) -> None:  # noqa: F811
    """Issue 35: a ``unique_devices`` campaign's page drew the two GRR items (``none``,
    ``at_least_once``) as a two-bar histogram; it shows what the campaign estimates, the devices
    with the event with their 95% interval and share, and the trend draws that one line."""
    cfg, s = stack
    camp = cfg.campaign("crash-seen")
    day = int(time.time()) // DAY * DAY - DAY
    rng = np.random.default_rng(35)
    values = rng.permutation(np.r_[np.ones(2000, dtype=int), np.zeros(4000, dtype=int)])  # 2,000 of 6,000
    xadd_batches(redis_client, camp, [camp.mechanism().encode_batch(values[i:i + 500], rng=rng,
                                                                    campaign=camp.name)
                                      for i in range(0, len(values), 500)], window=day)
    Worker(cfg, redis_client, log=lambda _m: None).run(once=True)
    truth = estimate(s, "crash-seen", day)["at_least_once"]
    assert abs(truth["estimate"] - 2000) < 4 * truth["std_error"], truth
    ctx, page = signed_in_page(browser, s, width)
    try:
        page.goto(f"/campaigns/crash-seen?window={day}")
        panel = page.locator('section[data-kind="unique_devices"]')
        assert panel.count() == 1
        shown = panel.locator('[data-stat="unique-devices"] [data-col="estimate"]')
        assert float(shown.get_attribute("data-raw")) == truth["estimate"]
        assert shown.inner_text() == f"{truth['estimate']:,.0f}"
        interval = panel.locator('[data-stat="unique-devices"] [data-col="interval"]')
        assert (float(interval.get_attribute("data-low")), float(interval.get_attribute("data-high"))) == \
            (truth["ci_low"], truth["ci_high"])
        share = panel.locator('tr[data-statistic="share"] td[data-col="estimate"]').inner_text()
        assert share == f"{100 * truth['estimate'] / 6000:.1f}%", share
        # no histogram of the two GRR items: no bar chart, no "none" row
        assert page.locator("svg.chart.bars").count() == 0
        assert "none" not in [t.strip() for t in panel.locator("td").all_inner_texts()]
        legend = page.locator("section.trend ul.legend li").all_inner_texts()
        assert legend == ["devices with the event"], legend  # one line: what it estimates
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(device_level_shots / f"unique-devices-{width}.png"), full_page=True)
    finally:
        ctx.close()


def test_real_devices_send_one_report_per_window(stack, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, s = stack
    rng = np.random.default_rng(29)
    start = (int(time.time()) // DAY - 3) * DAY  # three whole days ago, in the device's clock
    devices = []
    for k in range(20):
        client = TelemetryClient(s.url, INGEST_TOKEN, queue_path=tmp_path / f"d{k}.sqlite",
                                 rng=np.random.default_rng(100 + k), dimensions={})
        devices.append(client)
    firing = set(range(12))
    truth = {}
    for day in range(3):
        for k, client in enumerate(devices):
            base = start + day * DAY
            events = int(rng.integers(1, 51)) if k in firing else 0
            for e in range(events):
                client.clock.now = lambda t=base + 60 * e + 1: t  # type: ignore[method-assign]
                assert client.report("crash-seen", 1)
                assert client.report("top-screen", ["home", "cart", "search"][(k + e) % 3 if e % 4 else 0])
                assert client.report("crashes", 1)
            client.clock.now = lambda t=base + DAY - 5: t  # type: ignore[method-assign]
            if k == 11 and day == 1:
                continue  # stopped before its flush: its day-1 window is sent at its next start
            assert client.flush(timeout=30).pending == 0
            truth.setdefault(base, []).append(events)
    for client in devices:  # the next day: every ended window goes out, the new one stays open
        client.clock.now = lambda t=start + 3 * DAY + 30: t  # type: ignore[method-assign]
        assert client.flush(timeout=30).pending == 0
    drain(cfg, redis_client)
    windows = {start + d * DAY: 20 for d in range(3)}
    assert tally.window_counts(redis_client, cfg.campaign("crash-seen")) == windows  # one per device
    assert tally.window_counts(redis_client, cfg.campaign("crashes")) == windows  # zeros included
    assert tally.window_counts(redis_client, cfg.campaign("top-screen")) == {w: 12 for w in windows}
    for client in devices:
        spent = client.privacy_ledger()["campaigns"]
        assert spent["crash-seen"]["reports"] == 3 and spent["crash-seen"]["over_window"] == 0
        assert spent["crash-seen"]["epsilon_spent"] == pytest.approx(3 * 2.0)  # once per window
        assert client.device_windows.pending_windows() == 2  # the open day of unique_devices and count
        client.close(flush_timeout=None)
