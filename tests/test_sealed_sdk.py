"""The device and the collector around sealed batches (privacy_mode shuffled*): an analyzer key
rotated away is refused (400 unknown_key) and the SDK seals again to the new one, nothing lost; an
unrandomized campaign is refused unless the app allows it; reports of a window the collector no
longer takes are dropped and counted on the device; a local batch for a shuffled campaign, a wrong
window and a message of the wrong length are refused; the admin API refuses an uncertifiable
target naming central_epsilon, and creates a shuffled campaign whose device config carries the
analyzer key, the server time and the planned claim."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack
from sealed_support import FAKES, LOCAL, devices, publish_keys, sealed_config, shuffle_and_aggregate

from ldptel import keys
from ldptel.aggregator.keyring import Keyring
from ldptel.client import CampaignRefused, TelemetryClient
from ldptel.proto import SealedBatch
from ldptel.server.sealed_ingest import KEY_CACHE_SECONDS

ADMIN = "admin-token-for-tests"


@pytest.fixture
def sealed(redis_client: redis.Redis, redis_url: str, tmp_path: Path):
    cfg = sealed_config(tmp_path, [FAKES, LOCAL])
    cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, admin_tokens=[ADMIN]))
    ring = publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    yield cfg, stack, ring
    stack.close()


def post(stack: HttpStack, body: bytes) -> tuple[int, dict]:
    status, _, raw = stack.request("POST", "/v1/reports", body, {
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
    return status, json.loads(raw)


@pytest.mark.slow
def test_rotated_key_is_refused_then_sealed_again(sealed, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, stack, ring = sealed
    client = TelemetryClient(stack.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite",
                             accept_unrandomized=True, analyzer_signing_key=ring.pinned)
    try:
        assert client.report_many("sf-hist", list(range(16)) * 20) == 320
        old = client.campaigns()["sf-hist"]["analyzer_key"]["id"]
        # 38 days on, the aggregator has rotated and the old key is past its overlap: withdrawn
        Keyring(cfg.analyzer).ensure(redis_client, now=time.time() + 38 * 86400)
        assert old not in ring.public or redis_client.hget(keys.ANALYZER_KEYS_KEY, str(old)) is None
        time.sleep(KEY_CACHE_SECONDS + 0.1)  # the collector's key cache has seen it
        client._configs.fetched_at = time.monotonic()  # the device still believes its config fresh
        result = client.flush(timeout=30)
        assert result.pending == 0 and result.accepted == 320 and result.dropped == 0, result
        new = client.campaigns(refresh=True)["sf-hist"]["analyzer_key"]["id"]
        assert new != old
        entries = redis_client.xrange(keys.ingress_key("sf-hist", 0))
        assert {SealedBatch.FromString(f[b"batch"]).key_id for _, f in entries} == {new}
    finally:
        client.close(flush_timeout=None)


@pytest.mark.slow
def test_configs_fetched_before_the_first_key_are_fetched_again(sealed, redis_client: redis.Redis,
                                                               tmp_path: Path) -> None:
    """The device fetched its configs before the aggregator published a key (``analyzer_key``
    None, the configs still fresh for ``config_ttl``): the flush asks for them again and delivers
    once the key is there (``ldptel demo`` waited out its flush so when its aggregator started late)."""
    cfg, stack, ring = sealed
    redis_client.delete(keys.ANALYZER_KEYS_KEY)
    time.sleep(KEY_CACHE_SECONDS + 0.1)  # the collector's key cache has seen none
    client = TelemetryClient(stack.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite",
                             accept_unrandomized=True, analyzer_signing_key=ring.pinned)
    try:
        assert client.campaigns()["sf-hist"]["analyzer_key"] is None
        assert client.report_many("sf-hist", list(range(16)) * 20) == 320
        first = client.flush(timeout=1)
        assert first.pending == 320 and "no analyzer key" in (first.error or ""), first
        publish_keys(cfg, redis_client)
        time.sleep(KEY_CACHE_SECONDS + 0.1)
        result = client.flush(timeout=30)
        assert result.pending == 0 and result.accepted == 320 and result.dropped == 0, result
    finally:
        client.close(flush_timeout=None)


def test_unrandomized_needs_consent(sealed, tmp_path: Path) -> None:
    _, stack, _ = sealed
    with TelemetryClient(stack.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite") as client:
        with pytest.raises(CampaignRefused, match="accept_unrandomized"):
            client.report("sf-hist", 3)


def test_stale_window_dropped_and_counted(sealed, redis_client: redis.Redis, tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    cfg = sealed_config(tmp_path / "w", [{**FAKES, "name": "sf-day", "window": "1d"}])
    ring = publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, sealed[1].app.extensions["ldptel"].redis_url)
    try:
        client = TelemetryClient(stack.url, INGEST_TOKEN, queue_path=tmp_path / "w.sqlite",
                                 accept_unrandomized=True, analyzer_signing_key=ring.pinned)
        client.campaigns()
        client.clock.offset = -3 * 86400  # the device reported three days ago (its clock says)
        assert client.report_many("sf-day", [1, 2, 3]) == 3
        client.clock.offset = 0.0
        result = client.flush(timeout=10)
        assert result.pending == 0 and result.accepted == 0
        assert client.health().dropped.get("stale_window") == 3
        client.close(flush_timeout=None)
    finally:
        stack.close()


def test_collector_refusals(sealed, tmp_path: Path) -> None:
    cfg, stack, ring = sealed
    camp = cfg.campaign("sf-hist")
    batch = camp.mechanism().encode_batch([1, 2], rng=np.random.default_rng(0), campaign="sf-hist")
    status, err = post(stack, batch.SerializeToString())
    assert (status, err["error"]) == (400, "sealed_required")
    key = next(iter(ring.public))
    env = SealedBatch(campaign="sf-hist", schema_version=2, batch_id=bytes(16), reports=1, key_id=key,
                      window=12345, messages=[bytes(52)])
    assert post(stack, env.SerializeToString())[1]["error"] == "wrong_window"
    env.window = 0
    env.messages[0] = bytes(51)
    status, err = post(stack, env.SerializeToString())
    assert (status, err["error"], err["detail"]["index"]) == (400, "invalid_report", 0)
    env.messages[0] = bytes(52)
    env.key_id = key ^ 1
    status, err = post(stack, env.SerializeToString())
    assert (status, err["error"], err["detail"]["current_key_id"]) == (400, "unknown_key", key)
    env.key_id, env.messages[:] = key, [bytes(52)] * 40  # far more messages than Poisson fakes allow
    assert post(stack, env.SerializeToString())[1]["error"] == "invalid_batch"


@pytest.mark.slow
def test_admin_plans_and_refuses(sealed, redis_client: redis.Redis) -> None:
    _, stack, ring = sealed
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    bad = {"privacy_mode": "shuffled-fakes", "domain_size": 1024, "central_epsilon": 0.01,
           "central_delta": 1e-8, "batch_min": 100}
    status, _, raw = stack.request("PUT", "/v1/admin/campaigns/tight", json.dumps(bad).encode(), headers)
    err = json.loads(raw)
    assert status == 400 and "campaigns[tight].central_epsilon" in err["detail"]
    assert "batch_min ≥" in err["detail"]
    good = {"privacy_mode": "shuffled", "oracle": "grr", "domain_size": 64, "central_epsilon": 1.0,
            "central_delta": 1e-6, "batch_min": 5000}
    status, _, raw = stack.request("PUT", "/v1/admin/campaigns/planned", json.dumps(good).encode(), headers)
    assert status == 201, raw
    status, _, raw = stack.get("/v1/campaigns", token=INGEST_TOKEN)
    doc = json.loads(raw)
    cfg = next(c for c in doc["campaigns"] if c["name"] == "planned")
    assert cfg["privacy_mode"] == "shuffled" and cfg["epsilon"] > 1.0
    assert cfg["analyzer_key"]["id"] in ring.public and abs(doc["server_time"] - time.time()) < 5
    assert cfg["privacy"]["central_epsilon"] <= 1.0 and cfg["privacy"]["batches"] == [5000]


def test_local_campaign_unchanged(sealed, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, stack, _ = sealed
    assert devices(stack, tmp_path, "l", "loc-grr", [1, 2, 3] * 10, seed=1) == 30
    shuffle_and_aggregate(cfg, redis_client)
    status, _, raw = stack.get("/v1/campaigns", token=INGEST_TOKEN)
    local = next(c for c in json.loads(raw)["campaigns"] if c["name"] == "loc-grr")
    assert "privacy_mode" not in local and "analyzer_key" not in local
