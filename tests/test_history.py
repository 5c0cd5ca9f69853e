"""History and the window in progress on the export API (issue 25):

- ``window=latest`` is the newest *released* window: it went to 409 "withheld" at every window
  start (the window in progress, below ``min_reports``), then back;
- ``/series`` and ``/windows`` take ``version=all`` (every version's rows, each with its version;
  estimates of different versions never summed): it answered 400;
- a campaign of one window (``window = "all"``) has no date: its rows were dated 1970;
- the 409 of a window in progress counts the reports accepted and waiting in the shuffler.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack, write_config, xadd_batches

from ldptel.aggregator.worker import Worker
from ldptel.store import registry

HOURLY = {"name": "hourly", "oracle": "grr", "epsilon": 2.0, "domain_size": 4, "window": "1h",
          "min_reports": 100}
FOREVER = {"name": "forever", "oracle": "grr", "epsilon": 2.0, "domain_size": 4, "min_reports": 100}
QUIET = {**FOREVER, "name": "quiet"}  # reports only through the collector


def batch(campaign, n: int, seed: int, version: int = 1):
    rng = np.random.default_rng(seed)
    b = campaign.mechanism().encode_batch(rng.integers(0, 4, n), rng=rng, campaign=campaign.name)
    b.campaign_version = version
    return b


@pytest.fixture
def site(tmp_path: Path, redis_url: str, redis_client: redis.Redis):
    cfg = write_config(tmp_path / "c.toml", [HOURLY, FOREVER, QUIET])
    registry.apply(redis_client, cfg.tables)
    stack = HttpStack(cfg, redis_url)
    now = int(time.time()) // 3600 * 3600
    live = stack.app.extensions["ldptel"].live
    live.refresh(force=True)
    hourly = live.config.campaign("hourly")
    xadd_batches(redis_client, hourly, [batch(hourly, 500, 1)], window=now - 7200)
    xadd_batches(redis_client, hourly, [batch(hourly, 400, 2)], window=now - 3600)
    xadd_batches(redis_client, hourly, [batch(hourly, 20, 3)], window=now)  # the window in progress
    forever = live.config.campaign("forever")
    xadd_batches(redis_client, forever, [batch(forever, 300, 4)], window=0)
    Worker(live.config, redis_client).run(once=True)
    yield stack, redis_client, now
    stack.close()


def doc(stack: HttpStack, path: str) -> tuple[int, dict]:
    status, _, body = stack.get(path)
    return status, json.loads(body)


def test_latest_is_the_newest_released_window(site) -> None:
    stack, _, now = site
    status, est = doc(stack, "/v1/campaigns/hourly/estimates")
    assert status == 200 and est["window"] == now - 3600 and est["n_reports"] == 400
    assert doc(stack, "/v1/campaigns/hourly/estimates?window=latest")[1]["window"] == now - 3600
    status, err = doc(stack, f"/v1/campaigns/hourly/estimates?window={now}")  # asked for: withheld
    assert status == 409 and err["detail"]["n_reports"] == 20


def test_series_and_windows_of_every_version(site) -> None:
    stack, r, now = site
    registry.put(r, {**HOURLY, "epsilon": 1.0})  # version 2
    live = stack.app.extensions["ldptel"].live
    live.refresh(force=True)
    v2 = live.config.campaign("hourly")
    assert v2.version == 2
    xadd_batches(r, v2, [batch(v2, 150, 5, version=2)], window=now)
    Worker(live.config, r).run(once=True)
    status, windows = doc(stack, "/v1/campaigns/hourly/windows?version=all")
    assert status == 200 and windows["version"] == "all" and windows["versions"] == [1, 2]
    assert [(w["window"], w["version"], w["n_reports"]) for w in windows["windows"]] == [
        (now - 7200, 1, 500), (now - 3600, 1, 400), (now, 1, 20), (now, 2, 150)]
    status, series = doc(stack, "/v1/campaigns/hourly/series?version=all&items=0")
    assert status == 200
    rows = [(r["window"], r["version"], r["status"], r["n_reports"]) for r in series["rows"]]
    assert rows == [(now - 7200, 1, "released", 500), (now - 3600, 1, "released", 400),
                    (now, 1, "withheld", 20), (now, 2, "released", 150)]  # side by side, not summed
    status, csv = stack.get("/v1/campaigns/hourly/series?version=all&items=0&format=csv")[::2]
    assert status == 200 and csv.decode().count("\n") == 5


def test_one_window_campaign_has_no_date(site) -> None:
    stack, _, _ = site
    status, series = doc(stack, "/v1/campaigns/forever/series")
    assert status == 200 and {r["window_start"] for r in series["rows"]} == {None}
    assert {w["window_start"] for w in doc(stack, "/v1/campaigns/forever/windows")[1]["windows"]} == {None}


def test_withheld_counts_reports_waiting_in_the_shuffler(site) -> None:
    stack, _, now = site
    mech = stack.app.extensions["ldptel"].config.campaign("hourly").mechanism()
    body = mech.encode_batch(np.zeros(7, dtype=np.int64), rng=np.random.default_rng(0),
                             campaign="hourly").SerializeToString()
    status, _, _ = stack.request("POST", "/v1/reports", body, {
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
    assert status == 202  # in the ingress stream: the shuffler holds it
    status, err = doc(stack, f"/v1/campaigns/hourly/estimates?window={now}")
    assert status == 409 and err["detail"]["n_reports"] == 20 and err["detail"]["waiting"] == 7
    assert "7 more accepted and waiting" in err["detail"]["message"]


def test_shuffler_holding_is_not_a_warning(site) -> None:
    """Reports the shuffler holds until shuffle_min_reports are its normal state: the pages said
    "1 batch waiting" in warning amber; they now say the shuffler holds them, in a neutral colour."""
    from ldptel.server.pages.status import campaign_status, status_view
    from ldptel.server.probe import IngestRates

    stack, r, _ = site
    camp = stack.app.extensions["ldptel"].live.config.campaign("quiet")
    body = camp.mechanism().encode_batch(np.zeros(7, dtype=np.int64), rng=np.random.default_rng(0),
                                         campaign="quiet").SerializeToString()
    assert stack.request("POST", "/v1/reports", body, {
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})[0] == 202
    view = status_view(campaign_status(r, camp, IngestRates(), shuffled=True))
    assert view["lag_class"] == "holding" and view["lag_ok"], view["lag"]
    assert view["lag"] == "7 reports held by the shuffler"
    assert view["lag_note"] == "released at 1,000 reports or after 60s"
