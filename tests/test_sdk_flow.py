"""The SDK never stalls and never drops silently (issue 25):

- ``flush()`` with one paused campaign returns as soon as everything else is delivered (it spent
  its whole 30 s timeout backing off before), and the paused campaign's reports wait in the queue
  (``FlushResult.held``) until it resumes;
- a device follows a campaign change at its next send: every ingest answer carries the
  collector's campaigns digest (``Ldptel-Campaigns``), and a digest that moved refreshes the
  device's configs at once, not after ``config_ttl`` (300 s);
- every ``False`` from ``report()`` says why in one log line (rate-limited) and in ``health()``;
- error strings hold the decoded JSON of the answer, not a bytes repr (``b'{"detail": …}'``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack, write_config

from ldptel.client import TelemetryClient
from ldptel.client.delivery import HttpStatus
from ldptel.store import registry

A = {"name": "shape", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "min_reports": 10}
B = {"name": "steady", "oracle": "oue", "epsilon": 1.0, "domain_size": 4, "min_reports": 10}


@pytest.fixture
def http(tmp_path: Path, redis_url: str, redis_client: redis.Redis):
    cfg = write_config(tmp_path / "c.toml", [A, B])
    registry.apply(redis_client, cfg.tables)
    stack = HttpStack(cfg, redis_url)
    yield stack
    stack.close()


def live(http: HttpStack) -> None:
    http.app.extensions["ldptel"].live.refresh(force=True)


def device(http: HttpStack, tmp_path: Path, name: str = "q") -> TelemetryClient:
    return TelemetryClient(http.url, INGEST_TOKEN, queue_path=tmp_path / f"{name}.sqlite",
                           rng=np.random.default_rng(7), batch_size=100)


def test_flush_with_a_paused_campaign_returns_at_once(http, tmp_path, redis_client) -> None:
    dev = device(http, tmp_path)
    dev.report_many("shape", [1, 2] * 150)  # 3 chunks of a campaign about to be paused
    dev.report_many("steady", [0, 1] * 100)  # 2 chunks of an active one, queued after them
    registry.set_status(redis_client, "shape", "paused", "maintenance")
    live(http)
    t0 = time.monotonic()
    result = dev.flush()  # the default timeout: 30 s
    took = time.monotonic() - t0
    assert took < 2.0, f"flush() took {took:.1f} s with one paused campaign"
    assert result.accepted == 200 and result.dropped == 0
    assert result.pending == 300 and result.held == {"shape": 300}
    assert "campaign_paused" in (result.error or "") and "b'" not in (result.error or "")
    registry.set_status(redis_client, "shape", "active")
    live(http)
    result = dev.flush()
    assert result.ok and result.accepted == 300 and result.held == {}
    dev.close()


def test_device_follows_a_change_at_its_next_send(http, tmp_path, redis_client) -> None:
    dev = device(http, tmp_path)
    assert dev.campaigns()["shape"]["version"] == 1  # cached for config_ttl = 300 s
    registry.put(redis_client, {**A, "epsilon": 2.0})  # version 2
    live(http)
    dev.report_many("steady", [1] * 10)
    assert dev.flush().ok  # the answer's Ldptel-Campaigns digest moved: configs refreshed
    deadline = time.monotonic() + 5
    while dev._configs.configs["shape"]["version"] != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dev._configs.configs["shape"]["version"] == 2
    assert dev.mechanism("shape").epsilon == 2.0
    dev.close()


def test_campaigns_answer_carries_the_digest(http, redis_client) -> None:
    status, headers, _ = http.get("/v1/campaigns", token=INGEST_TOKEN)
    before = headers["ldptel-campaigns"]
    assert status == 200 and headers["etag"] == f'"{before}"'
    registry.set_status(redis_client, "steady", "paused", "")
    live(http)
    assert http.get("/v1/campaigns", token=INGEST_TOKEN)[1]["ldptel-campaigns"] != before


def test_every_false_from_report_is_logged_once_and_in_health(http, tmp_path, caplog) -> None:
    dev = device(http, tmp_path)
    dev.campaigns()
    with caplog.at_level(logging.WARNING, logger="ldptel.client"):
        assert dev.report("shape", 1) is True
        assert [dev.report("shape", 1) for _ in range(5)] == [False] * 5  # reports_per_window = 1
    lines = [r.getMessage() for r in caplog.records if "dropped on the device" in r.getMessage()]
    assert len(lines) == 1 and "reports_per_window" in lines[0] and "'shape'" in lines[0]
    health = dev.health()
    assert health.dropped == {"reports_per_window": 5}
    assert "reports_per_window" in (health.last_error or "")
    dev.close()


def test_http_errors_are_decoded() -> None:
    exc = HttpStatus(409, b'{"error": "campaign_paused", "detail": {"campaign": "x", "reason": "r"}}', None)
    assert str(exc) == 'HTTP 409 campaign_paused: {"campaign": "x", "reason": "r"}'
    assert (exc.code, exc.detail) == ("campaign_paused", {"campaign": "x", "reason": "r"})
    assert str(HttpStatus(502, b"<html>bad gateway</html>", None)) == "HTTP 502: <html>bad gateway</html>"
    assert "b'" not in str(HttpStatus(400, b'{"error": "bad_report", "detail": "index 3"}', None))
