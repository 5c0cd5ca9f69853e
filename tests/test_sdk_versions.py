"""The SDK across campaign changes: reports queued under a cached config are sent under the version
they were randomized with and accepted while that version is; a closed version's and a retired
campaign's reports are dropped and counted; a paused campaign's stay queued. Never "domain shrank,
all queued reports dropped"."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack, shuffle_once, write_config

from ldptel.aggregator.worker import Worker
from ldptel.client import TelemetryClient
from ldptel.client.queue import ReportQueue
from ldptel.store import registry, tally

# one test client plays many devices: its 50 single report() calls need reports_per_window >= 50
A = {"name": "shape", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "min_reports": 10,
     "reports_per_window": 100}
B = {"name": "steady", "oracle": "oue", "epsilon": 1.0, "domain_size": 4, "min_reports": 10}


@pytest.fixture
def http(tmp_path: Path, redis_url: str, redis_client: redis.Redis):
    cfg = write_config(tmp_path / "c.toml", [A, B])
    registry.apply(redis_client, cfg.tables)
    stack = HttpStack(cfg, redis_url)
    yield stack
    stack.close()


def change(http: HttpStack, redis_client: redis.Redis, table: dict) -> None:
    registry.put(redis_client, table)
    http.app.extensions["ldptel"].live.refresh(force=True)


def device(http: HttpStack, tmp_path: Path, seed: int) -> TelemetryClient:
    return TelemetryClient(http.url, INGEST_TOKEN, queue_path=tmp_path / f"q{seed}.sqlite",
                           rng=np.random.default_rng(seed), batch_size=300)


def counted(r: redis.Redis, http: HttpStack, name: str) -> dict[int, int]:
    shuffle_once(http.app.extensions["ldptel"].config, r)
    Worker(http.app.extensions["ldptel"].config, r).run(once=True)
    return {v.version: sum(tally.window_counts(r, v).values())
            for v in http.app.extensions["ldptel"].config.versions(name)}


def test_queued_reports_of_an_old_version_are_sent_under_it(http, tmp_path, redis_client) -> None:
    dev = device(http, tmp_path, 1)
    values = np.random.default_rng(2).integers(0, 8, 2000)
    assert dev.report_many("shape", values.tolist()) == 2000  # cached: version 1, d = 8
    for v in values[:50]:
        dev.report("shape", int(v))  # single rows too (values 6 and 7 do not exist in version 2)
    change(http, redis_client, {**A, "domain_size": 6})  # version 2: the domain shrinks 8 → 6
    dev.campaigns(refresh=True)  # the device learns version 2; its queue holds version 1 rows
    assert dev.campaigns()["shape"]["version"] == 2
    # an old version's config only when asked for by number (issue 34 item 9)
    assert dev.campaigns()["shape"]["oldest_accepted_version"] == 1
    assert "older_versions" not in dev.campaigns()["shape"]
    dev.report_many("shape", [0, 1, 5] * 100)
    dev.report_many("steady", [0, 1] * 100)
    result = dev.flush(timeout=30)
    assert result.ok and result.dropped == 0 and result.accepted == 2050 + 300 + 200
    assert dev.health().dropped == {}
    assert [c["version"] for c in dev.campaigns()["shape"]["older_versions"]] == [1]  # it asked
    assert counted(redis_client, http, "shape") == {1: 2050, 2: 300}
    assert counted(redis_client, http, "steady") == {1: 200}


def test_queue_file_from_before_versions_is_version_1(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE reports (id INTEGER PRIMARY KEY AUTOINCREMENT, campaign TEXT NOT NULL,
                              count INTEGER NOT NULL, batch BLOB NOT NULL, chunk INTEGER);
        CREATE TABLE chunks (id INTEGER PRIMARY KEY AUTOINCREMENT, campaign TEXT NOT NULL,
                             batch_id BLOB NOT NULL);
        INSERT INTO reports (campaign, count, batch) VALUES ('shape', 1, x'00');
    """)
    db.commit()
    db.close()
    queue = ReportQueue(path)
    queue.append_many([("shape", 2, b"\x01", 2)])
    first = queue.next_chunk(10)
    assert first is not None and (first.version, first.count) == (1, 1)
    queue.complete(first)
    second = queue.next_chunk(10)
    assert second is not None and (second.version, second.count) == (2, 2)
    queue.close()


def test_closed_version_and_retired_campaign_are_dropped_and_counted(http, tmp_path, redis_client) -> None:
    dev = device(http, tmp_path, 3)
    dev.report_many("shape", [1, 2, 3] * 100)
    dev.report_many("steady", [1] * 50)
    # version 2 with accept_old_versions = 0: version 1 closes at once
    change(http, redis_client, {**A, "epsilon": 2.0, "accept_old_versions": 0})
    result = dev.flush(timeout=30)
    assert result.dropped == 300 and result.accepted == 50
    assert dev.health().dropped == {"version_retired": 300}
    dev.campaigns(refresh=True)
    assert dev.campaigns()["shape"]["version"] == 2 and "older_versions" not in dev.campaigns()["shape"]

    dev.report_many("shape", [1] * 40)  # version 2
    registry.set_status(redis_client, "shape", "paused", "maintenance")
    http.app.extensions["ldptel"].live.refresh(force=True)
    result = dev.flush(timeout=1)  # 409 campaign_paused: kept for later, nothing dropped
    assert result.pending == 40 and result.dropped == 0
    registry.set_status(redis_client, "shape", "active")
    http.app.extensions["ldptel"].live.refresh(force=True)
    assert dev.flush(timeout=30).accepted == 40

    dev.report_many("shape", [2] * 30)
    registry.set_status(redis_client, "shape", "retired", "study over")
    http.app.extensions["ldptel"].live.refresh(force=True)
    result = dev.flush(timeout=30)
    assert result.dropped == 30 and dev.health().dropped == {"version_retired": 300, "campaign_retired": 30}
    dev.campaigns(refresh=True)
    dev.report("shape", 1)  # a retired campaign: dropped and counted, not raised into the app
    assert dev.health().dropped["campaign_retired"] == 31 and dev.pending() == 0
    public = json.loads(http.get("/v1/campaigns", token=INGEST_TOKEN)[2])["campaigns"]
    assert next(c for c in public if c["name"] == "shape")["status"] == "retired"
    dev.close()


def test_many_changes_neither_freeze_a_campaign_nor_grow_every_fetch(http, redis_client) -> None:
    """Issue 34 item 9: ~229 changes within accept_old_versions froze a campaign (each further
    edit 400: its entry "would be 526,477 bytes") and every device's config fetch carried every
    accepted old version (249 KiB). Now a device gets the latest version, and an old one only
    when it asks for it by number; the registry keeps every version."""
    labels = [f"label-{i:03d}-" + "x" * 40 for i in range(100)]  # ~5 KB of public config a version
    base = {**A, "name": "busy", "oracle": "oue", "domain": labels, "domain_size": None}
    base = {k: v for k, v in base.items() if v is not None}
    changes = 240
    for i in range(changes):
        registry.put(redis_client, {**base, "epsilon": round(1.0 + (i % 2) * 0.5 + i * 1e-3, 4)})
    http.app.extensions["ldptel"].live.refresh(force=True)
    assert len(registry.record(redis_client, "busy")["versions"]) == changes  # history kept
    token = {"Authorization": f"Bearer {INGEST_TOKEN}"}
    status, _, body = http.request("GET", "/v1/campaigns", headers=token)
    entry = next(c for c in json.loads(body)["campaigns"] if c["name"] == "busy")
    print(f"GET /v1/campaigns after {changes} changes: {len(body):,} bytes")
    assert status == 200 and entry["version"] == changes and entry["oldest_accepted_version"] == 1
    assert "older_versions" not in entry and len(body) < 16_000
    status, _, asked = http.request("GET", "/v1/campaigns?versions=busy:3,busy:999", headers=token)
    entry = next(c for c in json.loads(asked)["campaigns"] if c["name"] == "busy")
    assert status == 200 and [v["version"] for v in entry["older_versions"]] == [3]
    print(f"... asking for one old version: {len(asked):,} bytes")
    assert http.request("GET", "/v1/campaigns?versions=busy", headers=token)[0] == 400
    # and one more change is accepted
    registry.patch(redis_client, "busy", {"epsilon": 3.0})
