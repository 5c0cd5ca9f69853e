"""Campaign versions: each batch names the version it was randomized under, the collector checks it
against that version's parameters, the aggregator keeps and decodes each version's state apart,
and the export API answers per version (``version=``) and lists them.

Accuracy bounds: each estimate is checked against its own version's true counts within 4 of its
own published std errors (the GRR count variance n·q(1−q)/(p−q)² + n_v·(1−p−q)/(p−q) is what
``std_error`` reports; 4σ makes a false failure ~6e-5 per item)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack, shuffle_once, write_config, xadd_batches

from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import Config, parse_campaign
from ldptel.keys import counts_key
from ldptel.proto import ReportBatch
from ldptel.store import tally

V1 = {"name": "shape", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "min_reports": 100}
V2 = {**V1, "epsilon": 3.0, "domain_size": 6}
TRUTH_V1 = np.array([6000, 2000, 1000, 500, 500, 0, 0, 400])
TRUTH_V2 = np.array([500, 500, 1000, 2000, 6000, 0])


def versioned(tmp_path: Path) -> Config:
    """A config whose campaign ``shape`` has version 1 (ε = 1, d = 8), superseded now by version 2
    (ε = 3, d = 6), and an untouched campaign ``plain``."""
    cfg = write_config(tmp_path / "c.toml", [V1, {**V1, "name": "plain"}])
    v1 = dataclasses.replace(cfg.campaigns[0], superseded_at=time.time())
    v2 = dataclasses.replace(parse_campaign(V2, "t"), version=2)
    return dataclasses.replace(cfg, campaigns=[v2, *cfg.campaigns[1:]], history={"shape": [v1]})


def batches(mech, truth: np.ndarray, name: str, version: int, seed: int, per: int = 500) -> list[ReportBatch]:
    rng = np.random.default_rng(seed)
    values = rng.permutation(np.repeat(np.arange(len(truth)), truth))
    out = []
    for start in range(0, len(values), per):
        b = mech.encode_batch(values[start:start + per], rng=rng, campaign=name)
        b.campaign_version = version
        out.append(b)
    return out


def within(doc: dict, truth: np.ndarray) -> None:
    est = np.array([it["estimate"] for it in doc["items"]])
    se = np.array([it["std_error"] for it in doc["items"]])
    assert len(est) == len(truth) and doc["n_reports"] == truth.sum()
    assert np.all(np.abs(est - truth) <= 4 * se), (est, truth, se)


@pytest.fixture
def stack(tmp_path: Path, redis_url: str, redis_client: redis.Redis):
    cfg = versioned(tmp_path)
    s = HttpStack(cfg, redis_url)
    yield cfg, s
    s.close()


def test_each_version_is_decoded_with_its_own_parameters(stack, redis_client: redis.Redis) -> None:
    cfg, http = stack
    v1, v2 = cfg.versions("shape")
    # devices with a cached version-1 config (campaign_version 0 = absent, and 1) keep sending
    old = batches(v1.mechanism(), TRUTH_V1, "shape", 0, seed=1)
    for i, b in enumerate(old):
        b.campaign_version = i % 2  # 0 and 1 both mean version 1
        assert http.post_batch(b)["accepted"] == b.count
    shuffle_once(cfg, redis_client)
    Worker(cfg, redis_client).run(once=True)
    status, _, body = http.get("/v1/campaigns/shape/estimates")  # latest with reports: version 1
    doc = json.loads(body)
    assert status == 200 and doc["version"] == 1 and doc["epsilon"] == 1.0
    within(doc, TRUTH_V1)

    for b in batches(v2.mechanism(), TRUTH_V2, "shape", 2, seed=2):
        assert http.post_batch(b)["accepted"] == b.count
    shuffle_once(cfg, redis_client)
    Worker(cfg, redis_client).run(once=True)
    docs = {v: json.loads(http.get(f"/v1/campaigns/shape/estimates?version={v}")[2]) for v in (1, 2)}
    within(docs[1], TRUTH_V1)
    within(docs[2], TRUTH_V2)
    assert docs[2]["epsilon"] == 3.0 and docs[2]["version"] == 2
    assert json.loads(http.get("/v1/campaigns/shape/estimates")[2])["version"] == 2  # now the latest
    # each version's state in its own hash; version 1 keeps the key it had before versions
    assert redis_client.hget(counts_key("shape", 0), "n:0") == str(TRUTH_V1.sum()).encode()
    assert redis_client.hget(counts_key("shape", 0, 2), "n:0") == str(TRUTH_V2.sum()).encode()
    assert tally.summary(redis_client, v2, [v1]).lag_entries == 0

    status, _, body = http.get("/v1/campaigns/shape/versions")
    listing = json.loads(body)
    assert status == 200 and listing["latest"] == 2
    assert [(v["version"], v["status"], v["n_reports"]) for v in listing["versions"]] == [
        (1, "accepted", TRUTH_V1.sum()), (2, "current", TRUTH_V2.sum())]
    assert listing["versions"][0]["config"]["domain_size"] == 8
    assert http.get("/v1/campaigns/shape/estimates?version=3")[0] == 404
    status, _, body = http.get("/v1/campaigns/shape/estimates?version=x")
    assert status == 400 and json.loads(body)["error"] == "bad_parameter"


def test_collector_checks_the_version_a_batch_names(stack, redis_client: redis.Redis) -> None:
    cfg, http = stack
    v1, v2 = cfg.versions("shape")
    value7 = v1.mechanism().encode_batch([7] * 4, rng=np.random.default_rng(3), campaign="shape")
    # GRR with d = 8 may report 6 or 7, which version 2 (d = 6) must refuse
    value7.grr.values[:] = [7, 7, 7, 7]
    assert http.post_batch(value7)["accepted"] == 4  # version 1 (absent)
    value7.campaign_version = 2
    value7.batch_id = b"x" * 16
    status, _, body = http.request("POST", "/v1/reports", value7.SerializeToString(), {
        "Content-Type": "application/x-protobuf", "Authorization": "Bearer ingest-token-for-tests"})
    assert status == 400 and json.loads(body)["error"] == "invalid_report"
    value7.campaign_version = 3
    status, _, body = http.request("POST", "/v1/reports", value7.SerializeToString(), {
        "Content-Type": "application/x-protobuf", "Authorization": "Bearer ingest-token-for-tests"})
    assert status == 400 and json.loads(body)["error"] == "unknown_version"
    # past accept_old_versions, version 1's reports are refused as retired
    live = http.app.extensions["ldptel"].live
    old = dataclasses.replace(v1, superseded_at=time.time() - v1.accept_old_versions - 1)
    live.config = dataclasses.replace(live.config, history={"shape": [old]})
    value7.campaign_version = 1
    status, _, body = http.request("POST", "/v1/reports", value7.SerializeToString(), {
        "Content-Type": "application/x-protobuf", "Authorization": "Bearer ingest-token-for-tests"})
    doc = json.loads(body)
    assert status == 409 and doc["error"] == "version_retired" and doc["detail"]["latest"] == 2


def test_worker_rejects_entries_of_an_unknown_version_and_counts_the_others(
        tmp_path: Path, redis_client: redis.Redis) -> None:
    cfg = versioned(tmp_path)
    v1, v2 = cfg.versions("shape")

    good = batches(v2.mechanism(), TRUTH_V2 // 10, "shape", 2, seed=4)
    bad = batches(v2.mechanism(), TRUTH_V2 // 100, "shape", 9, seed=5)
    xadd_batches(redis_client, v2, good + bad)
    worker = Worker(cfg, redis_client)
    worker.run(once=True)
    assert tally.window_counts(redis_client, v2) == {0: (TRUTH_V2 // 10).sum()}
    assert tally.summary(redis_client, v2, [v1]).rejected == len(bad)
    assert tally.window_counts(redis_client, v1) == {}


def test_version_all_combines_versions_sharing_the_domain(tmp_path: Path, redis_url: str,
                                                          redis_client: redis.Redis) -> None:
    """ε 1 → 3 over the same domain: ``version=all`` weights both (aggregator/combine.py) and is
    within 4 of its std errors of the combined truth; a version with another domain is left out."""
    base = {"name": "same", "oracle": "grr", "epsilon": 1.0, "domain_size": 5, "min_reports": 100}
    cfg = write_config(tmp_path / "c.toml", [base])
    v1 = dataclasses.replace(cfg.campaigns[0], superseded_at=time.time())
    v2 = dataclasses.replace(parse_campaign({**base, "epsilon": 3.0}, "t"), version=2,
                             superseded_at=time.time())
    v3 = dataclasses.replace(parse_campaign({**base, "domain_size": 4}, "t"), version=3)
    cfg = dataclasses.replace(cfg, campaigns=[v3], history={"same": [v1, v2]})
    truth = np.array([3000, 1000, 500, 250, 250])
    http = HttpStack(cfg, redis_url)
    try:
        for v, seed in ((v1, 7), (v2, 8)):
            for b in batches(v.mechanism(), truth, "same", v.version, seed=seed):
                http.post_batch(b)
        shuffle_once(cfg, redis_client)
        Worker(cfg, redis_client).run(once=True)
        status, headers, body = http.get("/v1/campaigns/same/estimates?version=all")
        doc = json.loads(body)
        assert status == 200 and doc["version"] == "all" and doc["versions"] == [1, 2], doc
        assert doc["other_domain_versions"] == [3] and doc["combination"] == "inverse_variance"
        within(doc, 2 * truth)
        single = json.loads(http.get("/v1/campaigns/same/estimates?version=1")[2])
        pairs = zip(doc["items"], single["items"], strict=True)
        assert all(c["std_error"] < s["std_error"] for c, s in pairs)
        assert http.get("/v1/campaigns/same/estimates?version=all", headers={
            "If-None-Match": headers["etag"]})[0] == 304
        status, _, csv_body = http.get("/v1/campaigns/same/estimates?version=all&format=csv")
        assert status == 200 and csv_body.decode().splitlines()[0].startswith("value,estimate,std_error")
        status, _, body = http.get("/v1/campaigns/same/heavy-hitters?version=all")
        assert status == 400
    finally:
        http.close()


def test_version_all_refuses_versions_with_other_window_lengths(tmp_path: Path, redis_url: str,
                                                                redis_client: redis.Redis) -> None:
    """Issue 24, item 4: v1 window "10s", v2 "20s" over one domain. Window W names 10 s of v1 and
    20 s of v2; combining them answered 200 with v2's 20 s plus v1's first 10 s. Now 400 naming
    the versions and their windows; each version alone still answers."""
    base = {"name": "lens", "oracle": "grr", "epsilon": 2.0, "domain_size": 5, "min_reports": 10,
            "window": "10s"}
    cfg = write_config(tmp_path / "c.toml", [base])
    v1 = dataclasses.replace(cfg.campaigns[0], superseded_at=time.time())
    v2 = dataclasses.replace(parse_campaign({**base, "window": "20s"}, "t"), version=2)
    cfg = dataclasses.replace(cfg, campaigns=[v2], history={"lens": [v1]})
    w = 1_700_000_000  # a multiple of 20 s: both versions have a window starting there
    truth = np.array([30, 10, 5, 3, 2])
    xadd_batches(redis_client, v1, batches(v1.mechanism(), truth, "lens", 1, seed=1), window=w)
    xadd_batches(redis_client, v2, batches(v2.mechanism(), truth, "lens", 2, seed=2), window=w)
    Worker(cfg, redis_client).run(once=True)
    http = HttpStack(cfg, redis_url)
    try:
        for v in (1, 2):
            assert http.get(f"/v1/campaigns/lens/estimates?version={v}&window={w}")[0] == 200
        status, _, body = http.get(f"/v1/campaigns/lens/estimates?version=all&window={w}")
        doc = json.loads(body)
        assert status == 400 and doc["error"] == "bad_parameter", doc
        assert "version 1: window '10s'" in doc["detail"] and "version 2: window '20s'" in doc["detail"]
    finally:
        http.close()
