"""Redis goes down under a running collector: ingest answers 503 and stores nothing, the SDK keeps
its queue, and once Redis is back (same data directory and port, AOF reloaded) every report
arrives exactly once. Uses its own embedded Redis, not the session one."""

from __future__ import annotations

import time

import pytest
import redis
from http_support import Poster, request, start_collector
from ingest_support import INGEST_TOKEN, config_text, stored_reports

from ldptel.client import TelemetryClient
from ldptel.server.probe import REFRESH_S
from ldptel.store.redis_server import EmbeddedRedis

pytestmark = pytest.mark.slow


def test_redis_down_then_back(tmp_path):
    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    collector = None
    try:
        collector = start_collector(tmp_path / "collector", config_text(), server.url, workers=2)
        client = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite",
                                 batch_size=40, backoff_base=0.05, max_backoff=0.5)
        for v in range(30):  # before the outage: stored, and must survive the restart (AOF)
            client.report("olh", v)
        assert client.flush().accepted == 30

        server.stop()
        for v in range(100):
            client.report("olh", v)
        for v in range(20):
            client.report("grr", v % 5)
        poster = Poster(collector.url)
        body = client.mechanism("olh").encode_batch([1, 2], campaign="olh").SerializeToString()
        status, data = poster.post(body)
        assert status == 503 and data["error"] == "unavailable"
        # /healthz answers from a reading at most REFRESH_S old (server/probe.py): 503 within a
        # refresh and its 0.5 s timeout
        deadline = time.monotonic() + 2 * REFRESH_S + 1.0
        while request(collector.url, "GET", "/healthz")[0] != 503:
            assert time.monotonic() < deadline, "/healthz did not notice Redis was down"
            time.sleep(0.05)
        result = client.flush(timeout=1.0)
        assert (result.accepted, result.pending) == (0, 120) and "503" in result.error
        assert client.pending() == 120

        server = EmbeddedRedis(data_dir=tmp_path / "redis", port=server.port).start()
        result = client.flush(timeout=30)
        assert (result.accepted, result.duplicates, result.pending) == (120, 0, 0)
        client.close()
        rc = redis.Redis.from_url(server.url)
        assert stored_reports(rc, "olh") == 130 and stored_reports(rc, "grr") == 20
        assert poster.post(body)[0] == 202  # the collector reconnected by itself
        poster.close()
        rc.close()
    finally:
        if collector is not None:
            collector.stop()
        server.cleanup()
