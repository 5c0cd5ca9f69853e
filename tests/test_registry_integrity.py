"""The campaign registry cannot be poisoned, and its history survives (issue 24, items 1, 3, 13).

- Every write path builds the whole new record and checks every rule before one write: a
  refused change answers 400 / exit 2 naming the key and the record reads back byte-identical
  (each rule on each path). Once, a PUT of ``{"window": "10s", "retention": "1m"}`` over a v1 of
  window "1d" answered 500 *and was saved*: every process then dropped the campaign and
  ``serve`` no longer started.
- A record that cannot be read quarantines its campaign alone: the others serve, its batches get
  503 (devices keep them), the admin list and the page say why, and a PUT repairs it.
- Every change is kept as history (who, when, what); rollback makes a new version equal to an
  old one; the registry is the source of truth after the first start (tests with a real
  ``serve``: ``test_serve_*``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack, signed_in, write_config
from http_support import http_request, start_collector

from ldptel import keys
from ldptel.campaigns.config import ConfigError, parse_campaign
from ldptel.store import registry

ADMIN = "admin-token-for-tests"
A = {"name": "alpha", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "window": "1d", "min_reports": 10}
B = {"name": "beta", "oracle": "grr", "epsilon": 2.0, "domain_size": 4}
POISON = {"window": "10s", "retention": "1m"}  # retention shorter than version 1's window
RULES = [  # (the change over A, the key the refusal names)
    (POISON, "retention"),
    ({"shards": 2}, "shards"),
    ({"epsilon": 1e-17}, "epsilon"),
    ({"kind": "numeric", "lower": 0, "upper": 1e308, "oracle": None, "domain_size": None}, "upper"),
    ({"domain": [f"label-{i:06d}" for i in range(60_000)], "domain_size": None}, "domain"),
    ({"bogus": 1}, "bogus"),
]


def changed(**change) -> dict:
    return {k: v for k, v in {**A, **change}.items() if v is not None}


def snapshot(r: redis.Redis) -> tuple:
    """Everything a write could touch: the record's bytes, the revision, the history."""
    return (r.hget(keys.REGISTRY_KEY, "alpha"), r.get(keys.REGISTRY_REVISION_KEY),
            r.lrange(keys.registry_history_key("alpha"), 0, -1))


@pytest.fixture
def http(tmp_path: Path, redis_url: str, redis_client: redis.Redis):
    cfg = write_config(tmp_path / "c.toml", [A, B],
                       server={"admin_tokens": [{"name": "alice", "token": ADMIN}]})
    stack = HttpStack(cfg, redis_url)
    yield stack
    stack.close()


def admin(http: HttpStack, method: str, path: str, body: object = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    status, _, raw = http.request(method, f"/v1/admin/campaigns{path}", data, {
        "Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
    return status, json.loads(raw)


def test_the_poisoning_put_answers_400_and_saves_nothing(http: HttpStack, redis_client: redis.Redis) -> None:
    """The headline of item 1, over HTTP only: 500 *and saved* on 1125292."""
    assert admin(http, "PUT", "/alpha", A)[0] == 200  # the file's alpha, registered as is
    before = redis_client.hget(keys.REGISTRY_KEY, "alpha")
    status, doc = admin(http, "PUT", "/alpha", changed(**POISON))
    assert status == 400 and doc["detail"].startswith("campaigns[alpha].retention: "), doc
    assert redis_client.hget(keys.REGISTRY_KEY, "alpha") == before
    status, _, raw = http.get("/v1/campaigns", token=INGEST_TOKEN)
    assert status == 200 and {c["name"] for c in json.loads(raw)["campaigns"]} == {"alpha", "beta"}
    assert admin(http, "GET", "")[0] == 200


@pytest.mark.parametrize("change,key", RULES, ids=[k for _, k in RULES])
def test_each_rule_on_each_path_writes_nothing(http: HttpStack, redis_client: redis.Redis,
                                               change: dict, key: str) -> None:
    assert admin(http, "PUT", "/alpha", A)[0] == 200  # the file's alpha, registered as is
    before = snapshot(redis_client)
    status, doc = admin(http, "PUT", "/alpha", changed(**change))  # the admin API
    assert status == 400 and doc["detail"].startswith(f"campaigns[alpha].{key}: "), doc
    assert snapshot(redis_client) == before
    with pytest.raises(ConfigError, match=rf"^campaigns\[alpha\]\.{key}: "):  # registry.put
        registry.put(redis_client, changed(**change), by="test", via="cli")
    assert snapshot(redis_client) == before
    with pytest.raises(ConfigError, match=rf"^campaigns\[alpha\]\.{key}: "):  # campaigns apply / serve
        registry.apply(redis_client, [B, changed(**change)], by="test")
    assert snapshot(redis_client) == before and redis_client.hget(keys.REGISTRY_KEY, "beta") is None
    for action in ("pause", "retire"):  # a status change of the intact record still works
        assert admin(http, "POST", f"/alpha/{action}")[0] == 200
        before = snapshot(redis_client)
        assert admin(http, "PUT", "/alpha", changed(**change))[0] == 400
        assert snapshot(redis_client) == before
    status, doc = admin(http, "POST", "/alpha/rollback", {"to": 7})  # rollback to no version
    assert status == 400 and doc["detail"].startswith("campaigns[alpha].version: "), doc
    assert snapshot(redis_client) == before


def test_the_ordinary_toml_edit_is_a_new_version(redis_client: redis.Redis) -> None:
    """window "all" → "1d" with retention "90d" once poisoned the record (retention applied to
    version 1, whose window is "all"); retention applies to the versions of fixed windows."""
    base = {"name": "alpha", "oracle": "grr", "epsilon": 1.0, "domain_size": 8}
    registry.apply(redis_client, [base], by="test")
    applied = registry.apply(redis_client, [{**base, "window": "1d", "retention": "90d"}], by="test")
    assert [(c.action, c.version) for c in applied.changes] == [("new_version", 2)]
    v1, v2 = registry.readable_versions(registry.record(redis_client, "alpha") or {})
    assert (v1.window, v1.retention, v2.window, v2.retention) == ("all", None, "1d", "90d")


def poison_by_hand(r: redis.Redis) -> None:
    """The record 1125292 saved after the poisoning PUT (answered 500)."""
    now = time.time()
    rec = {"name": "alpha", "status": "active", "reason": "", "updated_at": now, "versions": [
        {"version": 1, "table": A, "created_at": now, "superseded_at": now},
        {"version": 2, "table": changed(**POISON), "created_at": now, "superseded_at": None}]}
    r.hset(keys.REGISTRY_KEY, "alpha", json.dumps(rec))
    r.incr(keys.REGISTRY_REVISION_KEY)


def batch_for(http: HttpStack, name: str, version: int = 1) -> tuple[int, dict, dict]:
    mech = parse_campaign(A if name == "alpha" else B, "t").mechanism()  # both have d ≥ 4
    b = mech.encode_batch(np.array([1, 2]), rng=np.random.default_rng(0), campaign=name)
    b.campaign_version = version
    status, headers, raw = http.request("POST", "/v1/reports", b.SerializeToString(), {
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
    return status, headers, json.loads(raw)


def test_a_poisoned_record_quarantines_its_campaign_alone_and_a_put_repairs_it(
        http: HttpStack, redis_client: redis.Redis) -> None:
    registry.apply(redis_client, [B], by="test")
    poison_by_hand(redis_client)
    http.app.extensions["ldptel"].refresh()
    status, _, raw = http.get("/v1/campaigns", token=INGEST_TOKEN)
    assert status == 200 and [c["name"] for c in json.loads(raw)["campaigns"]] == ["beta"]
    status, headers, doc = batch_for(http, "alpha")
    assert status == 503 and doc["error"] == "campaign_unavailable" and headers["retry-after"] == "60", doc
    assert batch_for(http, "beta")[0] == 202
    status, listing = admin(http, "GET", "")
    row = next(c for c in listing["campaigns"] if c["name"] == "alpha")
    assert status == 200 and row["status"] == "broken" and "retention" in row["reason"], listing
    status, _, page = http.request("GET", "/", headers={"Cookie": signed_in(http)})
    assert status == 200 and 'data-state="broken"' in page.decode() and "retention" in page.decode()
    status, doc = admin(http, "PUT", "/alpha", changed(window="10s"))  # the repair: no retention
    assert status == 200 and doc["action"] == "updated", doc
    status, _, raw = http.get("/v1/campaigns?versions=alpha:1", token=INGEST_TOKEN)
    served = {c["name"]: c for c in json.loads(raw)["campaigns"]}
    assert served["alpha"]["version"] == 2 and served["alpha"]["older_versions"][0]["window"] == "1d"
    assert batch_for(http, "alpha", 2)[0] == 202


def test_a_version_an_older_ldptel_wrote_is_stamped_unreadable_by_the_repair(
        http: HttpStack, redis_client: redis.Redis) -> None:
    """ε = 1e-17 passed the old validation; today no process can read that version. The campaign
    is quarantined until a PUT makes a new version; the old one is kept, stamped, skipped."""
    now = time.time()
    rec = {"name": "alpha", "status": "active", "reason": "", "updated_at": now, "versions": [
        {"version": 1, "table": changed(epsilon=1e-17), "created_at": now, "superseded_at": None}]}
    redis_client.hset(keys.REGISTRY_KEY, "alpha", json.dumps(rec))
    redis_client.incr(keys.REGISTRY_REVISION_KEY)
    http.app.extensions["ldptel"].refresh()
    assert "alpha" in http.app.extensions["ldptel"].config.broken
    status, doc = admin(http, "PUT", "/alpha", A)
    assert status == 200 and (doc["action"], doc["version"]) == ("new_version", 2), doc
    assert "epsilon" in doc["campaign"]["versions"][0]["unreadable"]
    assert http.app.extensions["ldptel"].config.campaign("alpha").version == 2
    history = admin(http, "GET", "/alpha/history")[1]["history"]
    assert history[-1]["repaired"] == [1] and history[-1]["by"] == "alice"


def test_history_names_who_and_rollback_makes_an_old_version_new(http: HttpStack,
                                                                 redis_client: redis.Redis) -> None:
    assert admin(http, "PUT", "/alpha", A)[0] == 200  # the file's alpha, registered as is
    assert admin(http, "PUT", "/alpha", changed(min_reports=5000))[1]["action"] == "updated"
    assert admin(http, "PUT", "/alpha", changed(min_reports=5000, epsilon=4.0))[1]["version"] == 2
    assert admin(http, "POST", "/alpha/pause", {"reason": "review"})[0] == 200
    status, doc = admin(http, "POST", "/alpha/rollback", {"to": 1})
    assert status == 200 and (doc["action"], doc["version"]) == ("new_version", 3), doc
    v3 = doc["campaign"]["versions"][-1]
    assert v3["config"]["epsilon"] == 1.0 and v3["table"]["min_reports"] == 5000  # campaign-wide kept
    history = admin(http, "GET", "/alpha/history")[1]["history"]
    assert [(e["action"], e["version"], e["by"], e["via"]) for e in history] == [
        ("created", 1, "alice (the file's version, before a change)", "apply"),
        ("updated", 1, "alice", "admin"),
        ("new_version", 2, "alice", "admin"), ("paused", 2, "alice", "admin"),
        ("rollback", 3, "alice", "admin")]
    assert history[1]["changed"] == {"values": {"min_reports": [10, 5000]}}
    # issue 35: a new version's entry said {"keys": ["epsilon"]} without "1 → 4"
    assert history[2]["changed"] == {"keys": ["epsilon"], "values": {"epsilon": [1.0, 4.0]}}
    assert history[4]["to"] == 1
    assert all(abs(e["at"] - time.time()) < 60 for e in history)


def test_admin_bodies_are_bounded(http: HttpStack, redis_client: redis.Redis) -> None:
    """JSON nested 5,000 deep answered 500; versions of large domains made every device download
    megabytes per refresh (issue 24, item 13)."""
    deep = b'{"a":' * 5000 + b"1" + b"}" * 5000
    status, _, raw = http.request("PUT", "/v1/admin/campaigns/alpha", deep, {
        "Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
    assert status == 400 and json.loads(raw)["error"] == "bad_request", raw
    labels = [f"label-{i:06d}" for i in range(12_000)]  # ~170 kB of config per version
    statuses = [admin(http, "PUT", "/big", {"oracle": "grr", "epsilon": e, "domain": labels})
                for e in (1.0, 1.5, 2.0, 2.5)]
    # a device gets the latest version, and an old one only when it asks for it by number (issue
    # 34 item 9): the entry is the latest and the largest old version, whatever the changes
    assert [s for s, _ in statuses] == [201, 200, 200, 200], [d for _, d in statuses]
    status, _, raw = http.get("/v1/campaigns", token=INGEST_TOKEN)
    assert status == 200 and len(raw) < 256 * 1024, len(raw)
    status, _, raw = http.get("/v1/campaigns?versions=big:1,big:2,big:3", token=INGEST_TOKEN)
    older = json.loads(raw)["campaigns"][-1]["older_versions"]
    assert status == 200 and len(raw) <= 1 << 20 and [v["version"] for v in older] == [1, 2, 3], len(raw)
    wide = [f"label-{i:06d}-{'x' * 8}" for i in range(15_000)]  # ~350 kB: one version is bounded
    status, doc = admin(http, "PUT", "/big", {"oracle": "grr", "epsilon": 1.0, "domain": wide})
    assert status == 400 and "what every device downloads" in doc["detail"], doc


def run_cli(redis_url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ldptel.commands.cli", "campaigns", "--redis-url", redis_url,
                           *args], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_serve_keeps_admin_changes_and_starts_with_a_quarantined_campaign(
        tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    """A restart once re-applied the TOML: ε 4 → 1 and min_reports 1000 → 5000 made by the admin
    API were undone. Now the registry is kept (the drift is printed), ``campaigns apply`` refuses
    without --force, --dry-run writes nothing, and a quarantined campaign does not stop serve."""
    table = {**A, "epsilon": 4.0, "min_reports": 1000}
    cfg = tmp_path / "c.toml"
    text = write_config(cfg, [table, B], server={"admin_tokens": [ADMIN]}) and cfg.read_text()
    c = start_collector(tmp_path / "one", text, redis_url, args=["--no-aggregator"])
    try:
        for body in ({**table, "epsilon": 1.0}, {**table, "epsilon": 1.0, "min_reports": 5000}):
            reply = http_request(c.url, "PUT", "/v1/admin/campaigns/alpha", json.dumps(body).encode(),
                                 {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
            assert reply.status == 200, reply.body
    finally:
        c.stop()
    c = start_collector(tmp_path / "two", text, redis_url, args=["--no-aggregator"])
    try:
        alpha = registry.readable_versions(registry.record(redis_client, "alpha") or {})[-1]
        assert (alpha.version, alpha.epsilon, alpha.min_reports) == (2, 1.0, 5000)
        assert "alpha.epsilon: registry 1.0 → file 4.0" in c.log(), c.log()
    finally:
        c.stop()
    before = snapshot(redis_client)
    dry = run_cli(redis_url, "apply", "--config", str(cfg), "--dry-run", "--force")
    assert dry.returncode == 0 and "drift: alpha.min_reports: registry 5000 → file 1000" in dry.stdout
    refused = run_cli(redis_url, "apply", "--config", str(cfg))
    assert refused.returncode == 1 and "changed through the admin API" in refused.stderr, refused
    assert snapshot(redis_client) == before
    history = run_cli(redis_url, "history", "alpha").stdout.splitlines()
    assert len(history) == 3 and "admin token" in history[1] and "(admin)" in history[1], history
    back = run_cli(redis_url, "rollback", "alpha", "--to", "1")
    assert back.returncode == 0 and "alpha: new version, version 3" in back.stdout, back
    poison_by_hand(redis_client)  # serve starts, alpha quarantined, beta served
    c = start_collector(tmp_path / "three", text, redis_url, args=["--no-aggregator"])
    try:
        reply = http_request(c.url, "GET", "/v1/campaigns",
                             headers={"Authorization": f"Bearer {INGEST_TOKEN}"})
        assert [x["name"] for x in json.loads(reply.body)["campaigns"]] == ["beta"]
        assert "campaign 'alpha' is quarantined" in c.log()
    finally:
        c.stop()
