"""Numeric campaigns end to end through the real app over HTTP and a real Redis: the SDK's
``report``/``report_many`` (clipping counted), the collector's validation (a report outside the
mechanism's output range rejects the batch, naming the lowest bad index, and stores nothing), the
worker's accumulator and publication, and ``GET /v1/campaigns/<name>/mean`` (JSON and CSV)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import redis
from agg_support import (
    EXPORT_TOKEN,
    INGEST_TOKEN,
    HttpStack,
    shuffle_once,
    signed_in,
    write_config,
    xadd_batches,
)

from ldptel.aggregator.decoders import accumulator_for
from ldptel.aggregator.worker import Worker
from ldptel.client import TelemetryClient
from ldptel.mechanisms.base import Z95
from ldptel.proto import NumericPayload, ReportBatch
from ldptel.store import tally

LOWER, UPPER = 0.0, 600.0
SESSION = {"name": "session_seconds", "kind": "numeric", "epsilon": 2.0, "lower": LOWER,
           "upper": UPPER, "min_reports": 1000, "reports_per_window": 10}  # 2 report() calls
MEMORY = {"name": "memory", "kind": "numeric", "epsilon": 1.0, "lower": 0, "upper": 64,
          "mechanism": "1bitmean", "buckets": 4, "min_reports": 1000}
DUCHI = {"name": "crashes", "kind": "numeric", "epsilon": 1.0, "lower": 0, "upper": 10,
         "mechanism": "duchi", "min_reports": 1000}
HOURLY = {"name": "latency_ms", "kind": "numeric", "epsilon": 4.0, "lower": 0, "upper": 1000,
          "mechanism": "piecewise", "window": "1h", "min_reports": 1000}
HOURS = 3  # windows of HOURLY with reports, each with a mean 100 ms higher than the one before
FREQ = {"name": "freq", "epsilon": 1.0, "domain_size": 4, "oracle": "grr", "min_reports": 10}
N = 6000


def population(rng: np.random.Generator, n: int) -> np.ndarray:
    """Session lengths: lognormal around 150 s, ≈ 3 % above the 600 s bound (clipped)."""
    return rng.lognormal(math.log(150), 0.75, n)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str):
    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    tmp = tmp_path_factory.mktemp("numeric")
    cfg = write_config(tmp / "c.toml", [SESSION, MEMORY, DUCHI, HOURLY, FREQ])
    s = HttpStack(cfg, redis_url)
    rng = np.random.default_rng(11)
    values = population(rng, N)
    client = TelemetryClient(s.url, INGEST_TOKEN, queue_path=tmp / "q.sqlite",
                             rng=np.random.default_rng(12))
    try:
        assert client.report_many("session_seconds", values.tolist()) == N
        client.report("session_seconds", 312.5)
        client.report("session_seconds", 1e6)  # clipped to 600
        assert client.report_many("memory", (values / 10).tolist()) == N
        result = client.flush(timeout=60)
        assert result.ok and client.pending() == 0, result
        health = client.health()
        hourly = cfg.campaign("latency_ms")
        now = int(time.time()) // 3600 * 3600
        for k in range(HOURS):
            batches = [hourly.mechanism().encode_batch(rng.normal(200 + 100 * k, 50, 1500), rng=rng,
                                                       campaign="latency_ms")]
            xadd_batches(r, hourly, batches, window=now - 3600 * (HOURS - 1 - k))
        shuffle_once(cfg, r)
        Worker(cfg, r).run(once=True)
        yield s, cfg, r, np.append(values, [312.5, 1e6]), health
    finally:
        client.close(flush_timeout=None)
        s.close()
        r.close()


def get(s: HttpStack, path: str) -> tuple[int, dict, bytes]:
    return s.get(path)


def test_mean_endpoint_json(stack) -> None:
    s, _, _, values, _ = stack
    status, headers, body = get(s, "/v1/campaigns/session_seconds/mean")
    assert status == 200, body
    doc = json.loads(body)
    assert doc["kind"] == "numeric" and doc["mechanism"] == "hybrid"  # the default at ε = 2
    assert doc["n_reports"] == N + 2 and (doc["lower"], doc["upper"]) == (LOWER, UPPER)
    truth = float(np.clip(values, LOWER, UPPER).mean())
    mean, total = doc["mean"], doc["sum"]
    # within 4 published std errors of the clipped population's mean
    assert abs(mean["estimate"] - truth) <= 4 * mean["std_error"], (mean, truth)
    assert mean["ci_low"] == pytest.approx(mean["estimate"] - Z95 * mean["std_error"])
    assert total["estimate"] == pytest.approx(mean["estimate"] * (N + 2))
    assert total["std_error"] == pytest.approx(mean["std_error"] * (N + 2))
    # the std error is the formula's (hybrid: Var[y | t] constant) within sampling error
    mech = stack[1].campaign("session_seconds").mechanism()
    formula = math.sqrt(mech.mean_variance(values)) * mech.half_width
    assert 0.9 < mean["std_error"] / formula < 1.5  # s²/N adds Var(t)/N to the fixed-set formula
    assert headers["etag"] and headers["x-ldptel-n-reports"] == str(N + 2)


def test_mean_endpoint_csv_and_304(stack) -> None:
    s, _, _, _, _ = stack
    status, headers, body = get(s, "/v1/campaigns/memory/mean?format=csv")
    assert status == 200 and headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert [r["statistic"] for r in rows] == ["mean", "sum"]
    _, _, jbody = get(s, "/v1/campaigns/memory/mean")
    doc = json.loads(jbody)
    assert float(rows[0]["estimate"]) == doc["mean"]["estimate"]
    assert int(rows[1]["n_reports"]) == N
    status, _, _ = s.get("/v1/campaigns/memory/mean", headers={"If-None-Match": headers["etag"]})
    assert status == 304


def test_memoized_onebitmean_mean(stack) -> None:
    s, _, _, values, _ = stack
    doc = json.loads(get(s, "/v1/campaigns/memory/mean")[2])
    truth = float(np.clip(values[:N] / 10, 0, 64).mean())
    assert abs(doc["mean"]["estimate"] - truth) <= 4 * doc["mean"]["std_error"]


def test_sdk_counts_clipped_values(stack) -> None:
    _, _, _, values, health = stack
    expected = int(np.count_nonzero(values > UPPER))
    assert expected > 100  # the population's tail, plus the 1e6
    assert health.clipped["session_seconds"] == expected
    assert health.clipped["memory"] == int(np.count_nonzero(values[:N] / 10 > 64))


def test_wrong_kind_is_400(stack) -> None:
    s = stack[0]
    status, _, body = get(s, "/v1/campaigns/freq/mean")
    assert status == 400 and "numeric" in json.loads(body)["detail"]
    status, _, _ = get(s, "/v1/campaigns/session_seconds/estimates")
    assert status == 400
    status, _, _ = get(s, "/v1/campaigns/crashes/mean?format=xml")
    assert status == 400


def numeric_batch(campaign: str, count: int, **payload) -> ReportBatch:
    batch = ReportBatch(campaign=campaign, batch_id=bytes(range(16)), count=count, schema_version=1)
    batch.numeric.CopyFrom(NumericPayload(**payload))
    return batch


def stream_len(r: redis.Redis, cfg, name: str) -> int:
    return tally.window_count(r, cfg.campaign(name), 0) + sum(
        r.xlen(k) for k in r.keys(f"{{ldptel:{name}:*}}:reports"))


BAD = [
    # (campaign, payload, count, index, reason fragment)
    ("session_seconds", {"values": [0.0, 1.0, 9.0, -9.0]}, 4, 2, "outside the output range"),
    ("session_seconds", {"values": [0.0, float("nan"), 99.0]}, 3, 1, "outside the output range"),
    ("session_seconds", {"values": [0.0, float("inf")]}, 2, 1, "outside the output range"),
    ("session_seconds", {"values": [0.5]}, 2, 1, "values has 1 entries"),
    ("session_seconds", {"values": [0.5], "bits": b"\x80"}, 1, 0, "bits must be empty"),
    ("crashes", {"bits": b"\xff"}, 3, 2, "padding"),
    ("crashes", {"bits": b"\x80", "values": [1.0]}, 1, 0, "values must be empty"),
    ("crashes", {"bits": b""}, 1, 0, "bits must hold 1 bytes"),
]


@pytest.mark.parametrize(("campaign", "payload", "count", "index", "reason"), BAD)
def test_out_of_range_report_rejected(stack, campaign, payload, count, index, reason) -> None:
    s, cfg, r, _, _ = stack
    before = stream_len(r, cfg, campaign)
    status, _, body = s.request("POST", "/v1/reports",
                                numeric_batch(campaign, count, **payload).SerializeToString(),
                                {"Content-Type": "application/x-protobuf",
                                 "Authorization": f"Bearer {INGEST_TOKEN}"})
    doc = json.loads(body)
    assert status == 400 and doc["error"] == "invalid_report", doc
    assert doc["detail"]["index"] == index and reason in doc["detail"]["reason"], doc
    assert stream_len(r, cfg, campaign) == before


def test_series_has_the_mean_and_sum_of_every_window(stack) -> None:
    s, cfg, _, _, _ = stack
    status, _, body = get(s, "/v1/campaigns/latency_ms/series")
    assert status == 200, body
    rows = json.loads(body)["rows"]
    by_window: dict[int, dict] = {}
    for row in rows:
        by_window.setdefault(row["window"], {})[row["item"]] = row
    assert len(by_window) == HOURS and all(set(r) == {"mean", "sum"} for r in by_window.values())
    for rows_of in by_window.values():  # sum = mean · N, its std error N times the mean's
        mean, total = rows_of["mean"], rows_of["sum"]
        assert total["estimate"] == pytest.approx(mean["estimate"] * mean["n_reports"])
        assert total["std_error"] == pytest.approx(mean["std_error"] * mean["n_reports"])
    means = [by_window[w]["mean"]["estimate"] for w in sorted(by_window)]
    assert means == sorted(means)  # each hour's true mean is 100 ms above the previous one


def test_accumulators_merge_by_addition(stack) -> None:
    cfg = stack[1]
    mech = cfg.campaign("session_seconds").mechanism()
    rng = np.random.default_rng(3)
    a, b, both = accumulator_for(mech), accumulator_for(mech), accumulator_for(mech)
    x, y = mech.encode_batch(population(rng, 500), rng=rng), mech.encode_batch(population(rng, 700), rng=rng)
    a.add(x)
    b.add(y)
    both.add(x)
    both.add(y)
    merged = type(a).from_bytes(mech, a.to_bytes()).merge(b)
    assert merged.n == 1200
    for key in both.state:
        np.testing.assert_allclose(merged.state[key], both.state[key], rtol=1e-12)


def test_simulate_cli(stack, tmp_path) -> None:
    s, cfg, r, _, _ = stack
    values = tmp_path / "values.txt"
    values.write_text("\n".join(["3", "0.5", "12", "-1e3"] * 250) + "\n")
    argv = [sys.executable, "-m", "ldptel.commands.cli", "simulate", "--config", str(cfg.path),
            "--campaign", "crashes", "--values-file", str(values), "--url", s.url,
            "--token", INGEST_TOKEN, "--seed", "7"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "1000 devices" in out.stdout and "1000 accepted" in out.stdout
    values.write_text("3\nnan\n")
    bad = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "line 2: 'nan' is not a finite number" in bad.stderr


def test_campaign_page_panel(stack) -> None:
    s = stack[0]
    cookie = signed_in(s)
    status, _, body = s.request("GET", "/campaigns/latency_ms", headers={"Cookie": cookie})
    page = body.decode()
    assert status == 200, page
    doc = json.loads(get(s, "/v1/campaigns/latency_ms/mean")[2])
    assert doc["n_reports"] == 1500
    assert "Piecewise (Wang et al.)" in page and "Mean per device" in page
    raw = re.search(r'data-statistic="mean">.*?data-raw="([^"]+)"', page, re.S).group(1)
    assert float(raw) == doc["mean"]["estimate"]  # the page shows the API's number
    # the trend draws the mean: one point per released window, joined by a line inside its CI
    # band (issue 25: the numeric trend was an empty 0–1 axis)
    assert page.count('<circle class="point') == HOURS
    assert page.count('<circle class="point in-progress"') == 1  # the hour in progress: hollow (issue 35)
    assert 'data-lines="1"' in page and '<path class="trend-band"' in page
    assert '<path class="trend-line" data-item="mean"' in page
    status, headers, body = s.request("GET", "/campaigns/latency_ms/download/mean.csv",
                                      headers={"Cookie": cookie})
    assert status == 200 and body.decode().startswith("statistic,estimate,")
    status, _, body = s.request("GET", "/campaigns/session_seconds", headers={"Cookie": cookie})
    assert status == 200 and 'data-statistic="sum"' in body.decode()
    assert "(one window so far)" in body.decode()
    status, _, body = s.request("GET", "/", headers={"Cookie": cookie})  # the campaigns list
    listing = body.decode()
    assert status == 200 and "Numeric (mean)" in listing and "1BitMean (memoized, 4 buckets)" in listing


@pytest.mark.slow
def test_campaign_page_in_chromium(stack, tmp_path) -> None:
    """The panel in a real browser: the chart's band and points are drawn, and it fits 390 px."""
    from browser_support import CHROMIUM, CHROMIUM_ARGS, REQUIRE_BROWSER, SKIP_MARK, artifacts, missing

    reason = missing()
    if reason:
        if REQUIRE_BROWSER:
            pytest.fail(f"the browser tests are required here (CI or LDPTEL_REQUIRE_BROWSER=1) but {reason}")
        pytest.skip(f"{SKIP_MARK} {reason}")
    from playwright.sync_api import sync_playwright

    s = stack[0]
    shots = artifacts("numeric-screenshots")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            for width in (1280, 390):
                ctx = browser.new_context(base_url=s.url, viewport={"width": width, "height": 900})
                page = ctx.new_page()
                page.goto("/signin?next=/campaigns/latency_ms")
                page.fill("#token", EXPORT_TOKEN)
                page.click("button[type=submit]")
                page.wait_for_load_state()
                assert page.locator("svg.chart.trend circle.point").count() == HOURS
                box = page.locator("svg.chart.trend path.trend-band").bounding_box()
                assert box is not None and box["width"] > 50 and box["height"] > 5
                page.screenshot(path=str(shots / f"numeric-{width}.png"), full_page=True)
                ctx.close()
        finally:
            browser.close()


def test_export_client_mean(stack) -> None:
    """``ldptel.export.Client.mean`` (issue 25: no such helper) is the endpoint's document."""
    from ldptel.export import Client

    s = stack[0]
    doc = Client(s.url, EXPORT_TOKEN).mean("session_seconds")
    assert doc == json.loads(get(s, "/v1/campaigns/session_seconds/mean")[2])
    mean = doc["mean"]
    assert doc["n_reports"] == N + 2 and mean["ci_low"] < mean["estimate"] < mean["ci_high"]


def test_memoized_bits_survive_a_restart(stack, tmp_path) -> None:
    """The SDK keeps memoized 1BitMean's secret in its queue file: after a restart the device
    sends the same bit for the same value (``encode`` through the campaign's mechanism).

    Four devices (four queue files), 200 values each. With 4 buckets a device has 5 memoized
    bits (one per boundary k·16, P(1) = 1/(e+1) + k/4 · (e−1)/(e+1)), so one device sends all
    zeros with probability ∏(1 − P) ≈ 0.023 — too often for a test. That all four do (or all
    send ones) has probability < 10⁻⁶; a mechanism whose bits do not depend on the device or
    value (a constant) fails it."""
    s = stack[0]
    sums = []
    for device in range(4):
        bits = []
        for _ in range(2):
            client = TelemetryClient(s.url, INGEST_TOKEN,
                                     queue_path=tmp_path / f"device{device}.sqlite")
            try:
                mech = client.mechanism("memory")
                bits.append([mech.randomize_one(v)["bits"][0] for v in np.linspace(0, 64, 200)])
            finally:
                client.close(flush_timeout=None)
        assert bits[0] == bits[1]
        sums.append(sum(bits[0]))
    assert 0 < sum(sums) < 800
