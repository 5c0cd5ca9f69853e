"""Must be true (issue 13): a campaign with ``window = "2s"`` and devices reporting for 20 s gives
at least 8 windows in ``/series``, each within its std errors. End to end: ``ldptel serve`` with
its aggregator on the session Redis, SDK devices (``TelemetryClient``) sending over HTTP."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from http_support import http_request, start_collector
from ingest_support import EXPORT_TOKEN, INGEST_TOKEN

from ldptel.client.transport import TelemetryClient

pytestmark = pytest.mark.slow

LABELS = ["a", "b", "c", "d"]
SHARES = (40, 30, 20, 10)  # every flush sends exactly these counts, so a window's truth is n × share
PER_FLUSH = sum(SHARES)
CONFIG = f"""
[server]
rate_limit_per_address_per_minute = 0   # the test's fleet sends from one loopback address
max_unfinished_bodies_per_address = 64  # … concurrently
ingest_tokens = ["{INGEST_TOKEN}"]
export_tokens = ["{EXPORT_TOKEN}"]

[aggregator]
publish_interval = 0.5
block_ms = 200

[[campaigns]]
name = "ticks"
oracle = "grr"
epsilon = 2.0
domain = {json.dumps(LABELS)}
window = "2s"
min_reports = 200
shuffle_max_delay = "1s"  # each window's last reports are shuffled within a second
"""


def test_two_second_windows_give_a_series(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    collector = start_collector(tmp_path / "serve", CONFIG, redis_url, workers=1, args=["--aggregator"])
    sent = 0
    try:
        device = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite",
                                 rng=np.random.default_rng(13))
        values = [label for label, k in zip(LABELS, SHARES, strict=True) for _ in range(k)]
        end = time.monotonic() + 20.0
        while time.monotonic() < end:
            sent += device.report_many("ticks", values)
            assert device.flush(timeout=10).accepted == PER_FLUSH
            time.sleep(0.2)
        device.close()
        rows = _settled_series(collector.url, sent)
    finally:
        collector.stop()
    windows = sorted({r["window"] for r in rows})
    released = sorted({r["window"] for r in rows if r["status"] == "released"})
    print(f"{len(released)} released windows of {len(windows)}, {sent} reports")
    assert len(released) >= 8, windows
    assert all(w % 2 == 0 for w in windows) and windows == list(range(windows[0], windows[-1] + 2, 2))
    checked = 0
    for r in rows:
        if r["status"] != "released":
            assert r["item"] is None and r["n_reports"] < 200
            continue
        assert r["n_reports"] % PER_FLUSH == 0
        truth = r["n_reports"] * SHARES[LABELS.index(r["item"])] / PER_FLUSH
        # GRR's estimate is unbiased with the published std error (its exact variance formula);
        # 4 std errors: a false failure in 40 comparisons has probability about 0.3 %
        assert abs(r["estimate"] - truth) <= 4 * r["std_error"], r
        assert r["ci_low"] < r["estimate"] < r["ci_high"]
        checked += 1
    assert checked == 4 * len(released)


def _settled_series(url: str, sent: int, timeout: float = 30.0) -> list[dict]:
    """``/series`` once every sent report is counted and every window with enough reports is
    published."""
    auth = {"Authorization": f"Bearer {EXPORT_TOKEN}"}
    deadline = time.monotonic() + timeout
    while True:
        reply = http_request(url, "GET", "/v1/campaigns/ticks/series", headers=auth)
        assert reply.status == 200, reply.body[:300]
        rows = json.loads(reply.body)["rows"]
        counted = {r["window"]: r["n_reports"] for r in rows}
        if sum(counted.values()) == sent and all(r["status"] != "pending" for r in rows):
            return rows
        assert time.monotonic() < deadline, (sent, counted)
        time.sleep(0.3)
