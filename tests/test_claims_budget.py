"""A shuffled version's claims are evaluated once, when the version is made, within bounds (issue 34
items 2, 3 and 4): over the real admin API and ``GET /v1/campaigns`` (the real Flask app over HTTP,
the session Redis). A documented ``central_delta`` never breaks config fetch; a δ below what the
bounds certify, or a retention that would compose millions of releases, is refused with a 400 naming
the key and a value that works, in well under a second and without the process growing; a campaign
whose claim cannot be served is left out and named, and the others are still served."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack, write_config
from proc_support import budget

from ldptel import keys

ADMIN = "admin-token-for-tests"
LOCAL = {"name": "alpha", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "min_reports": 10}
SEALED = {"name": "sealed", "domain_size": 16, "privacy_mode": "shuffled-fakes", "central_epsilon": 1.0,
          "batch_min": 1000, "window": "1d", "retention": "30d"}


@pytest.fixture
def http(tmp_path: Path, redis_url: str, redis_client: redis.Redis,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpStack]:
    monkeypatch.setenv("LDPTEL_PLAN_CACHE", str(tmp_path / "plans.json"))  # this test's figures only
    cfg = write_config(tmp_path / "c.toml", [LOCAL], server={"admin_tokens": [ADMIN]})
    stack = HttpStack(cfg, redis_url)
    yield stack
    stack.close()


def admin(http: HttpStack, method: str, name: str, body: object) -> tuple[int, dict]:
    status, _, raw = http.request(method, f"/v1/admin/campaigns/{name}", json.dumps(body).encode(),
                                  {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
    return status, json.loads(raw)


def device_configs(http: HttpStack) -> tuple[int, dict]:
    status, _, raw = http.get("/v1/campaigns", token=INGEST_TOKEN)
    return status, json.loads(raw)


def test_a_documented_central_delta_keeps_every_config_fetch(http: HttpStack) -> None:
    """PATCH central_delta = 0.001 (the top of the documented range) on a shuffled-fakes campaign
    once made every device's GET /v1/campaigns answer 500 ("δ(ε) stays above 1e-16 up to ε = 60":
    at μ ≈ 16 fakes per bucket the pair's mass at infinite loss, e^−μ, is 1e-7)."""
    assert admin(http, "PUT", "sealed", SEALED)[0] == 201
    status, doc = admin(http, "PATCH", "sealed", {"central_delta": 0.001})
    assert status == 200 and doc["version"] == 2, doc
    status, doc = device_configs(http)
    assert status == 200, doc
    served = {c["name"]: c for c in doc["campaigns"]}
    assert set(served) == {"alpha", "sealed"} and "unavailable" not in doc
    privacy = served["sealed"]["privacy"]
    assert privacy["central_delta"] == 0.001 and privacy["releases_composed"] == 30
    assert privacy["cumulative_status"] == "ready" and 1 < privacy["cumulative_epsilon"] < 30, privacy


def test_uncomputable_claims_are_refused_fast_naming_the_key(http: HttpStack) -> None:
    """δ = 1e-30 once grew the process by ~1 GB with no answer (μ doubled until numpy could not
    allocate); window 1m with retention 3660d (T = 5.27 M releases) by > 1 GB on the first fetch."""
    cases = [
        ("PUT", {**SEALED, "central_delta": 1e-30}, "central_delta", "central_delta >= 1e-18 works"),
        ("PUT", {**SEALED, "central_delta": 1e-300}, "central_delta", "central_delta >= 1e-18 works"),
        ("PUT", {**SEALED, "window": "1m", "retention": "3660d"}, "retention", 'retention <= "6d" works'),
    ]
    for method, body, key, works in cases:
        with budget() as cost:
            status, doc = admin(http, method, "sealed", body)
        assert status == 400 and doc["detail"].startswith(f"campaigns[sealed].{key}: "), doc
        assert works in doc["detail"], doc
        assert cost["seconds"] < 1 and cost["rss_growth_mb"] < 50, (body, cost)
    assert admin(http, "PUT", "sealed", {**SEALED, "window": "1m", "retention": "6d"})[0] == 201
    with budget() as cost:  # an in-place change of retention is checked the same way
        status, doc = admin(http, "PATCH", "sealed", {"retention": "3660d"})
    assert status == 400 and "campaigns[sealed].retention: " in doc["detail"], doc
    assert cost["seconds"] < 1 and cost["rss_growth_mb"] < 50, cost
    assert device_configs(http)[0] == 200


def test_a_claim_that_cannot_be_served_leaves_the_others_served(http: HttpStack) -> None:
    """The claims are computed when the version is made; should one still fail on a request (here
    the plan cache holds a figure another release wrote in another shape), that campaign alone is
    left out and named in ``unavailable``: every other campaign is served."""
    from ldptel.privacy import plan_cache, release_claims

    assert admin(http, "PUT", "sealed", SEALED)[0] == 201
    camp = http.app.extensions["ldptel"].config.campaign("sealed")
    key = release_claims._key(camp.mode, str(camp.oracle), int(camp.domain_size), 1000, 30)
    good = plan_cache.lookup(key)
    assert good is not None  # computed when the version was made, not by a request
    plan_cache.store(key, {"epsilon": "not a number"})
    try:
        status, doc = device_configs(http)
        assert status == 200, doc
        assert [c["name"] for c in doc["campaigns"]] == ["alpha"]
        assert [u["name"] for u in doc["unavailable"]] == ["sealed"], doc
    finally:
        plan_cache.store(key, good)
    status, doc = device_configs(http)
    assert status == 200 and {c["name"] for c in doc["campaigns"]} == {"alpha", "sealed"}


def test_a_record_composing_millions_of_windows_is_quarantined_not_composed(
        http: HttpStack, redis_client: redis.Redis) -> None:
    """A shuffled record an older ldptel accepted with window 1m and retention 3660d (T = 5.27 M):
    its first config fetch once grew the collector by > 1 GB (10⁷: MemoryError on every fetch).
    Now the record is quarantined when it is read, and every fetch answers at once for the others."""
    now = time.time()
    table = {**SEALED, "window": "1m", "retention": "3660d"}
    rec = {"name": "sealed", "status": "active", "reason": "", "updated_at": now,
           "versions": [{"version": 1, "table": table, "created_at": now, "superseded_at": None}]}
    redis_client.hset(keys.REGISTRY_KEY, "sealed", json.dumps(rec))
    redis_client.incr(keys.REGISTRY_REVISION_KEY)
    with budget() as cost:
        http.app.extensions["ldptel"].refresh()
        status, doc = device_configs(http)
    assert status == 200 and [c["name"] for c in doc["campaigns"]] == ["alpha"], doc
    assert cost["seconds"] < 1 and cost["rss_growth_mb"] < 50, cost
    assert "retention" in http.app.extensions["ldptel"].config.broken["sealed"]
