"""The SDK bounds the fake messages it seals (issue 36 item 6).

A collector (or anything in front of it) once made one report cost minutes of sealing and
gigabytes (``fake_rate`` 2×10⁷: MemoryError from ``flush()``, again at every flush, the chunk kept).
Now a shuffled-fakes config whose ``fake_rate`` exceeds the planner's limits (λ ≤ 100, μ =
λ·batch_min/d ≤ 10⁶) or disagrees with the rate its privacy claim was planned with is refused:
``report()`` drops as ``bad_config``, a chunk queued before waits (never sealed with that rate),
``flush()`` never raises. The real collector app serves the campaign over HTTP; a proxy in front of
it rewrites ``fake_rate`` in ``GET /v1/campaigns``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack
from sealed_support import FAKES, pinned, publish_keys, sealed_config

from ldptel.client import TelemetryClient
from ldptel.privacy.planner import MAX_FAKE_RATE as PLANNER_RATE
from ldptel.privacy.planner import MAX_MU


class Proxy:
    """Rewrites ``fake_rate`` (top level) of shuffled-fakes campaigns in ``/v1/campaigns`` answers
    of the real app, when ``rate`` is set."""

    def __init__(self, stack: HttpStack) -> None:
        self.rate: float | None = None
        self.inner = stack.app.wsgi_app
        stack.app.wsgi_app = self  # type: ignore[method-assign]

    def __call__(self, environ, start_response):
        if self.rate is None or not environ.get("PATH_INFO", "").startswith("/v1/campaigns"):
            return self.inner(environ, start_response)
        held: dict = {}

        def start(status, headers, exc_info=None):
            held["status"] = status
            held["headers"] = [(k, v) for k, v in headers if k.lower() != "content-length"]

        doc = json.loads(b"".join(self.inner(environ, start)))
        for c in doc.get("campaigns", []):
            if c.get("privacy_mode") == "shuffled-fakes":
                c["fake_rate"] = self.rate
        out = json.dumps(doc).encode()
        start_response(held["status"], [*held["headers"], ("Content-Length", str(len(out)))])
        return [out]


@pytest.fixture
def proxied(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> Iterator[tuple[HttpStack, Proxy]]:
    cfg = sealed_config(tmp_path, [FAKES])
    publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    yield stack, Proxy(stack)
    stack.close()


def test_bounds_are_the_planners() -> None:
    from ldptel.client.configs import MAX_FAKE_RATE, MAX_FAKES_PER_BUCKET

    assert (MAX_FAKE_RATE, MAX_FAKES_PER_BUCKET) == (PLANNER_RATE, MAX_MU)


def test_a_huge_fake_rate_is_refused(proxied, tmp_path: Path) -> None:
    """fake_rate 2×10⁷: report() drops as bad_config (it once queued, then flush() sealed 2×10⁷
    fakes: > 5 min of CPU, MemoryError under a smaller memory limit); a chunk queued under the
    honest config waits, unsealed, while the config says 1,000 (λ over 100; a rate under it but not
    the one its claim was planned with is refused too), and flush() returns; back to the honest
    config, it is sent."""
    stack, proxy = proxied
    client = TelemetryClient(stack.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite",
                             accept_unrandomized=True, analyzer_signing_key=pinned(tmp_path))
    try:  # closed without a last flush: on the old SDK it would seal 2×10⁷ fakes
        honest = client.campaigns()["sf-hist"]["fake_rate"]
        assert 0 < honest < 10
        proxy.rate = 2e7
        client.campaigns(refresh=True)
        assert client.report("sf-hist", 3) is False
        health = client.health()
        assert health.dropped == {"bad_config": 1}, health
        assert "fake_rate" in (health.last_error or "")
        result = client.flush(timeout=5)
        assert result.pending == 0 and result.accepted == 0

        proxy.rate = None  # honest: queued, then the config turns bad before the flush
        client.campaigns(refresh=True)
        assert client.report("sf-hist", 4) is True
        for rate in (1000.0, honest * 1.5):  # over the cap; under it but not the planned λ
            proxy.rate = rate
            client.campaigns(refresh=True)
            assert client.report("sf-hist", 5) is False
        proxy.rate = 1000.0
        client.campaigns(refresh=True)
        result = client.flush(timeout=1)  # returns: the chunk waits, unsealed
        assert (result.pending, result.accepted) == (1, 0), result
        assert "fake_rate = 1000" in (result.error or ""), result
        assert client.health().dropped == {"bad_config": 3}

        proxy.rate = None  # the collector's config is honest again: the queued report is sent
        client.campaigns(refresh=True)
        result = client.flush(timeout=10)
        assert (result.pending, result.accepted) == (0, 1), result
    finally:
        client.close(flush_timeout=None)

