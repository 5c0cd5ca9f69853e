"""The ingress bound is per (version, window, cell) group, and the file's cross-key rules hold on
every write path (issue 34, items 5 and 6), against a real Redis and the real app over HTTP.

Item 5: one client spread one-report sealed envelopes over a campaign's breakdown cells, each
below ``batch_min`` (nothing can be released until the window closes): the ingress stream's one
bound filled, every device of the campaign got 503 ``ingress_full`` and ``/healthz`` answered 503
for the whole collector. Now each group has its own bound: the spread fills none, a group pushed
to its bound refuses only its own batches (503 with Retry-After), and ``/healthz`` stays 200,
naming the campaign ``degraded``.

Item 6: ``PATCH batch_min=200`` was accepted where the file refuses anything over
``max_ingress_batches`` / 2; now the registry's ``check_record`` runs the file's rule on every
write, and a record breaking it is quarantined when the app loads the registry (so at start)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack, write_config
from sealed_support import SHUFFLED, pinned, publish_keys

from ldptel import keys, sealing
from ldptel.client import TelemetryClient
from ldptel.mechanisms.rows import row_dtype
from ldptel.proto import Dimension, SealedBatch
from ldptel.shuffler.worker import Shuffler
from ldptel.store import analyzer_keys, registry

ADMIN = "admin-token-for-tests"
BOUND = 20  # [shuffler] max_ingress_batches: entries per (version, window, cell) group
CELLS = {**SHUFFLED, "name": "sh-cells", "batch_min": 10, "window": "1h",
         "dimensions": {"platform": ["a", "b", "c", "d", "e"]}}
OTHER = {**SHUFFLED, "name": "sh-other", "batch_min": 10, "window": "1h"}


def config(tmp: Path):
    cfg = write_config(tmp / "c.toml", [CELLS, OTHER], server={"admin_tokens": [ADMIN]},
                       shuffler={"batch_reports": 200, "max_ingress_batches": BOUND})
    return dataclasses.replace(cfg, analyzer=dataclasses.replace(cfg.analyzer, keys_dir=str(tmp / "keys")))


@pytest.fixture
def stack(redis_client: redis.Redis, redis_url: str, tmp_path: Path):
    cfg = config(tmp_path)
    publish_keys(cfg, redis_client)
    s = HttpStack(cfg, redis_url)
    yield cfg, s
    s.close()


def envelope(cfg, r: redis.Redis, campaign: str, cell: str | None) -> bytes:
    """A hostile client's one-report sealed envelope (right sizes, random bytes: the collector
    cannot tell), bound to the current window, in ``cell``."""
    camp = cfg.campaign(campaign)
    key = analyzer_keys.current(analyzer_keys.read(r))
    size = sealing.ciphertext_length(row_dtype(camp.mechanism()).itemsize)
    env = SealedBatch(campaign=campaign, campaign_version=1, schema_version=2, batch_id=os.urandom(16),
                      key_id=key.key_id, window=keys.window_start(time.time(), camp.window_seconds),
                      reports=1, messages=[os.urandom(size)])
    if cell is not None:
        env.dimensions.append(Dimension(name="platform", value=cell))
    return env.SerializeToString()


def post(s: HttpStack, body: bytes) -> tuple[int, dict, dict]:
    status, headers, raw = s.request("POST", "/v1/reports", body, {
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
    return status, headers, json.loads(raw)


def healthz(s: HttpStack) -> tuple[int, dict]:
    status, _, raw = s.request("GET", "/healthz")
    return status, json.loads(raw)


def honest(s: HttpStack, tmp: Path, name: str, campaign: str, n: int, dims: dict | None = None) -> int:
    """``n`` honest devices through the SDK (sealed, one flush); returns the reports accepted."""
    with TelemetryClient(s.url, INGEST_TOKEN, queue_path=tmp / f"{name}.sqlite", accept_unrandomized=True,
                         rng=np.random.default_rng(3), analyzer_signing_key=pinned(tmp)) as client:
        client.report_many(campaign, [1] * n, **({"dimensions": dims} if dims else {}))
        result = client.flush(timeout=30)
        return result.accepted


def held_groups(r: redis.Redis) -> dict[str, int]:
    """The collector's count of entries in ingress per group of ``sh-cells``."""
    return {k.decode(): int(v) for k, v in r.hgetall(keys.ingress_groups_key("sh-cells")).items()}


def test_a_group_below_batch_min_refuses_only_itself(stack, redis_client: redis.Redis,
                                                      tmp_path: Path) -> None:
    cfg, s = stack
    # the attack: one-report envelopes spread over four cells, each below batch_min (10)
    spread = [post(s, envelope(cfg, redis_client, "sh-cells", cell))[0] for cell in "abcd" for _ in range(5)]
    assert spread == [202] * 20
    assert redis_client.xlen(keys.ingress_key("sh-cells")) == 20  # = BOUND: the old single bound
    # another cell of the same campaign, another campaign, and the collector: unaffected
    assert honest(s, tmp_path, "e", "sh-cells", 3, {"platform": "e"}) == 3
    assert honest(s, tmp_path, "o", "sh-other", 3) == 3
    status, doc = healthz(s)
    assert status == 200 and doc["components"]["collector"]["status"] == "ok", doc

    # one cell pushed to its own bound: its batches, and only its, are refused (503, Retry-After)
    for _ in range(BOUND - 5):
        assert post(s, envelope(cfg, redis_client, "sh-cells", "a"))[0] == 202
    status, headers, doc = post(s, envelope(cfg, redis_client, "sh-cells", "a"))
    assert status == 503 and doc["error"] == "ingress_full", doc
    assert int(headers["retry-after"]) > 0
    assert doc["detail"]["cell"] == {"platform": "a"} and doc["detail"]["campaign"] == "sh-cells"
    assert post(s, envelope(cfg, redis_client, "sh-cells", "b"))[0] == 202
    assert honest(s, tmp_path, "e2", "sh-cells", 2, {"platform": "e"}) == 2
    assert honest(s, tmp_path, "o2", "sh-other", 2) == 2
    status, doc = healthz(s)
    print(f"/healthz with one full group: {status} {doc['status']} {doc['components']['collector']}")
    assert status == 200 and doc["status"] == "degraded", doc
    assert doc["components"]["collector"]["degraded"] == {"sh-cells": {"full_groups": 1}}
    # a shuffled campaign: named in degraded, its entries not counted on /healthz (issue 36 item 5)
    assert doc["components"]["collector"]["ingress_group_fullest"] == 0

    # the counts are exact: a release lowers its group, so the group takes batches again
    groups = held_groups(redis_client)
    stored = redis_client.xlen(keys.ingress_key("sh-cells"))
    # spread, e (3 devices: one envelope each, issue 36), a, b, e2 (2 devices)
    assert sum(groups.values()) == stored == 20 + 3 + 15 + 1 + 2
    Shuffler(cfg, redis_client).run(once=True)  # cell a (20 ≥ batch_min) released; the rest held
    left = held_groups(redis_client)
    assert not any(k.endswith("platform=a") for k in left), left
    assert sum(left.values()) == redis_client.xlen(keys.ingress_key("sh-cells"))
    assert post(s, envelope(cfg, redis_client, "sh-cells", "a"))[0] == 202
    assert healthz(s)[1]["status"] == "ok"


def test_admin_cannot_set_what_the_file_refuses(stack, redis_client: redis.Redis, redis_url: str) -> None:
    cfg, s = stack
    hdr = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    status, _, raw = s.request("PATCH", "/v1/admin/campaigns/sh-other",
                               json.dumps({"batch_min": 200}).encode(), hdr)
    doc = json.loads(raw)
    assert status == 400 and "batch_min" in json.dumps(doc) and "max_ingress_batches" in json.dumps(doc), doc
    assert f"{BOUND // 2}" in json.dumps(doc)  # the largest value that works
    status, _, raw = s.request("PUT", "/v1/admin/campaigns/sh-new",
                               json.dumps({**OTHER, "name": "sh-new", "batch_min": 11}).encode(), hdr)
    assert status == 400 and "batch_min" in raw.decode(), raw
    status, _, raw = s.request("PATCH", "/v1/admin/campaigns/sh-other",
                               json.dumps({"batch_min": 10}).encode(), hdr)
    assert status == 200, raw
    # the registry call the CLI makes with --config (its file's [shuffler])
    with pytest.raises(registry.ConfigError, match="batch_min"):
        registry.patch(redis_client, "sh-other", {"batch_min": 11}, shuffler=cfg.shuffler)
    cli = subprocess.run([sys.executable, "-m", "ldptel.commands.cli", "campaigns", "set", "sh-other",
                          "batch_min=11", "--config", str(cfg.path), "--redis-url", redis_url],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2 and "batch_min" in cli.stderr, cli


def test_a_record_breaking_the_file_is_quarantined_at_start(redis_client: redis.Redis, redis_url: str,
                                                            tmp_path: Path) -> None:
    cfg = config(tmp_path)
    publish_keys(cfg, redis_client)
    # written by a process whose file allowed it (the defaults: 100,000 per group)
    registry.put(redis_client, {**OTHER, "batch_min": 500}, by="test")
    applied = registry.apply(redis_client, cfg.tables, only_new=True, shuffler=cfg.shuffler)
    assert "batch_min" in applied.broken["sh-other"]  # what serve prints at start
    s = HttpStack(cfg, redis_url)
    try:
        live = s.app.extensions["ldptel"].live
        live.refresh(force=True)
        assert "batch_min" in live.config.broken["sh-other"], live.config.broken
        status, _, raw = s.request("GET", "/v1/campaigns",
                                   headers={"Authorization": f"Bearer {INGEST_TOKEN}"})
        names = [c["name"] for c in json.loads(raw)["campaigns"]]
        assert status == 200 and "sh-cells" in names and "sh-other" not in names
    finally:
        s.close()
