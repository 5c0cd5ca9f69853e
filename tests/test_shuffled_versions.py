"""A shuffled campaign's planning keys never change in place (issue 26): ``central_delta`` is an
in-place key of the registry for a ``local`` campaign, but in a shuffled privacy mode its ε₀ or
fake rate is planned from it, so an in-place change would re-randomize devices under the same
version. A change of its effective value makes a new version naming ``central_delta``
(``registry_records.PLAN_KEYS``) — through the registry, the admin API (PUT and PATCH) and
``ldptel campaigns set``; the older version keeps its plan (and its devices keep sending under it
while it is accepted)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack
from sealed_support import FAKES, LOCAL, publish_keys, sealed_config

from ldptel.campaigns import records as registry_records

ADMIN = "admin-token-for-tests"
SHUFFLED = {"name": "sh", "privacy_mode": "shuffled-fakes", "domain_size": 64, "central_epsilon": 1.0,
            "batch_min": 1000, "central_delta": 1e-7}


def test_central_delta_of_a_shuffled_campaign_makes_a_new_version() -> None:
    record, _, _ = registry_records.put_table(None, SHUFFLED, 0.0)
    after, change, history = registry_records.put_table(record, {**SHUFFLED, "central_delta": 1e-9}, 1.0)
    assert (change.action, change.version) == ("new_version", 2)
    assert "central_delta" in change.changed and history["keys"] == change.changed
    older, newer = registry_records.versions_of(after)
    assert (older.central_delta, newer.central_delta) == (1e-7, 1e-9)
    assert newer.mode.fake_rate > older.mode.fake_rate


def test_the_default_delta_written_out_changes_nothing_planned() -> None:
    """central_delta absent is min(1/(10·batch_min), 10⁻⁶) = 10⁻⁶ here: writing it out keeps the plan,
    so the table is updated in place; another value makes a new version."""
    table = {k: v for k, v in SHUFFLED.items() if k != "central_delta"}
    record, _, _ = registry_records.put_table(None, table, 0.0)
    _, same, _ = registry_records.put_table(record, {**table, "central_delta": 1e-6}, 1.0)
    assert (same.action, same.version) == ("updated", 1)
    _, other, _ = registry_records.put_table(record, {**table, "central_delta": 1e-8}, 1.0)
    assert other.action == "new_version" and "central_delta" in other.changed


def test_central_delta_of_a_local_campaign_stays_in_place() -> None:
    local = {"name": "l", "oracle": "grr", "epsilon": 1.0, "domain_size": 4}
    record, _, _ = registry_records.put_table(None, local, 0.0)
    _, change, history = registry_records.put_table(record, {**local, "central_delta": 1e-9}, 1.0)
    assert (change.action, change.version, change.changed) == ("updated", 1, ["central_delta"])
    assert history == {"values": {"central_delta": [None, 1e-9]}}


@pytest.fixture
def stack(redis_client: redis.Redis, redis_url: str, tmp_path: Path):
    cfg = sealed_config(tmp_path, [FAKES, LOCAL])
    cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, admin_tokens=[ADMIN]))
    publish_keys(cfg, redis_client)
    http = HttpStack(cfg, redis_url)
    yield http
    http.close()


def _call(http: HttpStack, method: str, path: str, body: object) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    status, _, raw = http.request(method, path, json.dumps(body).encode(), headers)
    return status, json.loads(raw)


@pytest.mark.integration
def test_admin_api_put_and_patch_make_new_versions(stack: HttpStack) -> None:
    status, doc = _call(stack, "PUT", "/v1/admin/campaigns/sh", SHUFFLED)
    assert status == 201, doc
    status, doc = _call(stack, "PUT", "/v1/admin/campaigns/sh", {**SHUFFLED, "central_delta": 1e-8})
    assert status == 200 and (doc["action"], doc["version"]) == ("new_version", 2), doc
    assert "central_delta" in doc["changed"]
    status, doc = _call(stack, "PATCH", "/v1/admin/campaigns/sh", {"central_delta": 1e-9})
    assert status == 200 and (doc["action"], doc["version"]) == ("new_version", 3), doc
    assert "central_delta" in doc["changed"]
    # a key that really is in place still is
    status, doc = _call(stack, "PATCH", "/v1/admin/campaigns/sh", {"description": "per batch"})
    assert status == 200 and (doc["action"], doc["version"]) == ("updated", 3), doc
    # devices see the latest plan, and the older versions still accepted with their own
    status, _, raw = stack.get("/v1/campaigns?versions=sh:1,sh:2", token=INGEST_TOKEN)  # asked by number
    cfg = next(c for c in json.loads(raw)["campaigns"] if c["name"] == "sh")
    rates = [v["fake_rate"] for v in cfg["older_versions"]] + [cfg["fake_rate"]]
    deltas = [v["central_target"]["delta"] for v in cfg["older_versions"]] + [cfg["central_target"]["delta"]]
    assert deltas == [1e-7, 1e-8, 1e-9] and rates == sorted(rates) and len(set(rates)) == 3
