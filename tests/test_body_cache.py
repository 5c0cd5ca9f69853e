"""The rendered-body cache counts what it keeps (issue 24, item 9): key + body + the slot holding
them, against one byte bound per process shared by the documents and ``/windows``/``/series``.
Unique ~4 KB junk query parameters once cost 4,940 B of memory per request against 141 B
counted (the 32 MiB bound admitted ~1.1 GB per worker), and ``/series``' bodies had no byte
bound at all."""

from __future__ import annotations

import gc
import logging
import tracemalloc
import urllib.parse
from pathlib import Path

import pytest
import redis
from agg_support import HttpStack, random_batches, write_config, xadd_batches

from ldptel.aggregator.worker import Worker
from ldptel.server import body_cache
from ldptel.server.body_cache import BodyCache, cache_key, cost

JUNK = "x" * 4000


def test_cache_charges_key_body_and_slot() -> None:
    cache = BodyCache(limit=10_000)
    keys = [cache_key("p", i, b"q" * 4000) for i in range(100)]
    assert {len(k) for k in keys} == {32}  # a 4 KB query string costs 32 bytes of key
    for k in keys:
        cache.put(k, b"b" * 500)
        assert cache.nbytes == sum(cost(key, cache.get(key) or b"") for key in keys if cache.get(key))
        assert cache.nbytes <= cache.limit
    assert len(cache) == 10_000 // cost(keys[0], b"b" * 500)
    assert cache.get(keys[0]) is None and cache.get(keys[-1]) == b"b" * 500  # oldest dropped first
    cache.put(cache_key("huge"), b"h" * 20_000)  # over the limit: not kept, nothing dropped
    assert cache.get(cache_key("huge")) is None and cache.get(keys[-1]) is not None


@pytest.fixture
def http(tmp_path: Path, redis_url: str, redis_client: redis.Redis):
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "small", "oracle": "grr", "epsilon": 1.0, "domain_size": 2, "min_reports": 1},
        {"name": "many", "oracle": "grr", "epsilon": 1.0, "domain_size": 2, "min_reports": 1000,
         "window": "1s"}])
    small, many = cfg.campaigns
    xadd_batches(redis_client, small, random_batches(small, 20, 20, seed=1))
    for i, batch in enumerate(random_batches(many, 400, 1, seed=2)):  # 400 withheld 1 s windows
        xadd_batches(redis_client, many, [batch], window=1_700_000_000 + i)
    Worker(cfg, redis_client).run(once=True)
    stack = HttpStack(cfg, redis_url)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no log record keeps a URL
    yield stack
    stack.close()


REQUESTS = [tracemalloc.Filter(True, "*/werkzeug/serving.py", all_frames=True)]


def _traced() -> int:
    """Bytes held now that were allocated while a request was handled: the server threads' own
    (the registry pollers and probes of other tests' apps, still running, are left out), less
    the standard library's cache of the last 128 URLs split (``urlsplit``'s, emptied first)."""
    urllib.parse.urlsplit.cache_clear()
    gc.collect()
    snap = tracemalloc.take_snapshot().filter_traces(REQUESTS)
    return sum(stat.size for stat in snap.statistics("filename"))


@pytest.mark.slow  # tracemalloc with deep tracebacks over 200 requests
def test_junk_parameters_cost_what_is_counted(http: HttpStack) -> None:
    for i in range(5):  # warm up: the parsed publication, compiled routes
        assert http.get(f"/v1/campaigns/small/estimates?warm={i}")[0] == 200
    tracemalloc.start(40)
    try:
        before, counted = _traced(), body_cache.CACHE.nbytes
        n = 200
        for i in range(n):
            assert http.get(f"/v1/campaigns/small/estimates?junk{i}={JUNK}")[0] == 200
        grown, counted = _traced() - before, body_cache.CACHE.nbytes - counted
    finally:
        tracemalloc.stop()
    print(f"per request: {grown / n:.0f} B of memory, {counted / n:.0f} B counted")
    assert counted > 0 and grown <= 1.25 * counted + 64 * 1024, (grown / n, counted / n)


@pytest.mark.slow
def test_series_bodies_are_bounded_in_bytes(http: HttpStack, monkeypatch: pytest.MonkeyPatch) -> None:
    limit = 256 * 1024
    monkeypatch.setattr(body_cache.CACHE, "limit", limit)
    body_cache.CACHE.clear()
    tracemalloc.start(40)
    try:
        before = _traced()
        sizes = []
        for i in range(12):  # 12 answers of ~60 KB each: ~720 KB rendered, at most 256 KiB kept
            status, _, body = http.get(f"/v1/campaigns/many/windows?from={1_700_000_000 + i}")
            assert status == 200
            sizes.append(len(body))
        grown = _traced() - before
    finally:
        tracemalloc.stop()
    assert sum(sizes) > 2 * limit
    print(f"{sum(sizes)} B rendered, {grown} B kept")
    assert grown <= limit + max(sizes) + 64 * 1024, (grown, sum(sizes))  # + the last answer in flight
