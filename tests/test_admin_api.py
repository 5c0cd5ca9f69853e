"""The admin API: campaigns created, changed (new version / in place), paused, resumed and retired
over HTTP; bad input answers 400 naming the key and changes nothing; the collector answers
paused / retired campaigns with 409 / 410 and the reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack, write_config

from ldptel.store import registry

ADMIN = "admin-token-for-tests"
A = {"name": "alpha", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "min_reports": 10}


@pytest.fixture
def http(tmp_path: Path, redis_url: str, redis_client: redis.Redis):
    cfg = write_config(tmp_path / "c.toml", [A], server={"admin_tokens": [ADMIN]})
    stack = HttpStack(cfg, redis_url)
    yield stack
    stack.close()


def call(http: HttpStack, method: str, path: str, body: object = None, token: str = ADMIN):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    status, _, raw = http.request(method, path, data, headers)
    return status, json.loads(raw)


def post_report(http: HttpStack, name: str = "alpha", version: int = 0) -> tuple[int, dict]:
    mech = http.app.extensions["ldptel"].config.campaign(name).mechanism()
    batch = mech.encode_batch(np.array([1, 2]), rng=np.random.default_rng(0), campaign=name)
    batch.campaign_version = version
    status, _, raw = http.request("POST", "/v1/reports", batch.SerializeToString(), {
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
    return status, json.loads(raw)


def test_admin_token_is_required(http: HttpStack) -> None:
    assert call(http, "GET", "/v1/admin/campaigns", token="export-token-for-tests")[0] == 401
    assert call(http, "GET", "/v1/admin/campaigns", token=INGEST_TOKEN)[0] == 401
    bad = call(http, "PUT", "/v1/admin/campaigns/alpha", {**A, "epsilon": 2}, token="nope-nope-nope")
    assert bad[0] == 401


def test_create_change_pause_resume_retire(http: HttpStack, redis_client: redis.Redis) -> None:
    # a campaign only the file declares is registered as its version 1 before the change
    status, doc = call(http, "PUT", "/v1/admin/campaigns/alpha", {**A, "epsilon": 2.0})
    assert status == 200
    assert (doc["action"], doc["version"], doc["changed"]) == ("new_version", 2, ["epsilon"])
    assert [v["config"]["epsilon"] for v in doc["campaign"]["versions"]] == [1.0, 2.0]
    status, doc = call(http, "PUT", "/v1/admin/campaigns/alpha", {**A, "epsilon": 2.0, "min_reports": 99})
    assert status == 200 and (doc["action"], doc["version"]) == ("updated", 2)
    status, doc = call(http, "PUT", "/v1/admin/campaigns/beta", {"oracle": "oue", "epsilon": 1.5,
                                                                  "domain": ["a", "b", "c"]})
    assert status == 201 and doc["action"] == "created"
    status, listing = call(http, "GET", "/v1/admin/campaigns")
    assert status == 200
    assert [(c["name"], c["version"]) for c in listing["campaigns"]] == [("alpha", 2), ("beta", 1)]
    public = json.loads(http.get("/v1/campaigns", token=INGEST_TOKEN)[2])["campaigns"]
    assert {c["name"]: c["version"] for c in public} == {"alpha": 2, "beta": 1}
    assert post_report(http, "alpha", 2)[0] == 202 and post_report(http, "beta")[0] == 202

    status, doc = call(http, "POST", "/v1/admin/campaigns/alpha/pause", {"reason": "maintenance"})
    assert status == 200 and doc["status"] == "paused"
    status, err = post_report(http, "alpha", 2)
    assert status == 409 and err == {"error": "campaign_paused",
                                     "detail": {"campaign": "alpha", "reason": "maintenance"}}
    assert post_report(http, "beta")[0] == 202  # untouched campaign keeps counting
    assert call(http, "POST", "/v1/admin/campaigns/alpha/resume")[0] == 200
    assert post_report(http, "alpha", 2)[0] == 202
    assert call(http, "POST", "/v1/admin/campaigns/alpha/retire", {"reason": "done"})[0] == 200
    status, err = post_report(http, "alpha", 2)
    assert status == 410 and err["error"] == "campaign_retired" and err["detail"]["reason"] == "done"
    status, err = call(http, "POST", "/v1/admin/campaigns/alpha/resume")
    assert status == 409 and err["error"] == "campaign_retired"
    assert call(http, "POST", "/v1/admin/campaigns/nope/pause")[0] == 404
    assert call(http, "POST", "/v1/admin/campaigns/alpha/explode")[0] == 404


@pytest.mark.parametrize(("body", "key"), [
    ({**A, "epsilon": 0}, "campaigns[alpha].epsilon"),
    ({**A, "domain_size": 1}, "campaigns[alpha].domain_size"),
    ({**A, "colour": "red"}, "campaigns[alpha].colour"),
    ({**A, "shards": 4}, "campaigns[alpha].shards"),
    ({**A, "name": "other"}, "campaigns[alpha].name"),
])
def test_bad_input_names_the_key_and_changes_nothing(http: HttpStack, redis_client: redis.Redis,
                                                     body: dict, key: str) -> None:
    call(http, "PUT", "/v1/admin/campaigns/alpha", A)
    rev = registry.revision(redis_client)
    status, err = call(http, "PUT", "/v1/admin/campaigns/alpha", body)
    assert status == 400 and err["error"] == "bad_config" and err["detail"].startswith(f"{key}: ")
    assert registry.revision(redis_client) == rev
    status, err = call(http, "PUT", "/v1/admin/campaigns/alpha", [1, 2])
    assert status == 400 and err["error"] == "bad_request"


def test_partial_change_patch_and_kept_pause_reason(http: HttpStack) -> None:
    """Issue 25: a PUT of some keys only said "give exactly one of domain or domain_size" (the
    body must be the whole table); it now says so and names PATCH, which changes some keys.
    Pausing again without a reason kept nothing of the first reason; it is kept now."""
    status, err = call(http, "PUT", "/v1/admin/campaigns/alpha", {"epsilon": 2.0})
    assert status == 400 and err["error"] == "bad_config"
    assert "PUT replaces the whole [[campaigns]] table" in err["detail"] and "PATCH" in err["detail"]
    status, doc = call(http, "PATCH", "/v1/admin/campaigns/alpha", {"epsilon": 2.0})
    assert status == 200 and (doc["action"], doc["version"]) == ("new_version", 2)
    assert doc["changed"] == ["epsilon"]
    assert doc["campaign"]["versions"][-1]["table"]["domain_size"] == 8
    assert call(http, "PATCH", "/v1/admin/campaigns/alpha", {"epsilon": -1})[0] == 400
    assert call(http, "PATCH", "/v1/admin/campaigns/nope", {"epsilon": 1})[0] == 404
    assert call(http, "POST", "/v1/admin/campaigns/alpha/pause", {"reason": "data review"})[0] == 200
    status, doc = call(http, "POST", "/v1/admin/campaigns/alpha/pause")
    assert status == 200 and doc["reason"] == "data review"
