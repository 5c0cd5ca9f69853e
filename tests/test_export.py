"""Export API and end-to-end accuracy through the real HTTP collector, the real worker and the
embedded Redis."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import (
    EXPORT_TOKEN,
    INGEST_TOKEN,
    HttpStack,
    random_batches,
    shuffle_once,
    write_config,
    xadd_batches,
)

from ldptel.aggregator.worker import Worker
from ldptel.server.export import ITEM_COLUMNS
from ldptel.store import tally

D = 16
N_PER_ORACLE = 20_000
RAPPOR = {"bloom_bits": 64, "hashes": 2, "cohorts": 8, "f": 0.25, "p": 0.35, "q": 0.65,
          "candidates": [f"item-{i}" for i in range(D)]}


def test_every_mechanism_end_to_end_within_4_std_errors(redis_client: redis.Redis, redis_url: str,
                                                         tmp_path: Path) -> None:
    """20 000 devices per oracle (Zipf over 16 items, ε = 1) POSTed as ReportBatches to the
    collector, drained by the worker, read back from the export API.

    Threshold: each of the d = 16 items must lie within 4 std errors of its true count. For an
    unbiased, normal estimate P(|Z| > 4) = 6.3e-5, so a correct pipeline fails one oracle's check
    with probability ≤ 16 · 6.3e-5 ≈ 1e-3 (union bound) and the whole test with ≤ 0.6 % over six
    oracles (the seed is fixed, so it is deterministic). It still has teeth: the std errors are
    below 2.5 % of N, so a lost or doubled batch (±1000 reports on one item's count), a wrong
    scale or a biased decoder is far outside the band, and n_reports must equal what was sent.
    """
    oracles = ["grr", "sue", "oue", "olh", "hadamard", "rappor"]
    camps = [({"name": f"acc-{o}", "oracle": o, "epsilon": 1.0, "domain_size": D} if o != "rappor"
              else {"name": "acc-rappor", "oracle": "rappor", **RAPPOR}) for o in oracles]
    cfg = write_config(tmp_path / "c.toml", camps)
    rng = np.random.default_rng(2026)
    w = 1.0 / np.arange(1, D + 1)
    stack = HttpStack(cfg, redis_url)
    truth = {}
    try:
        for camp in cfg.campaigns:
            mech = camp.mechanism()
            values = rng.choice(D, size=N_PER_ORACLE, p=w / w.sum())
            truth[camp.name] = np.bincount(values, minlength=D)
            for start in range(0, N_PER_ORACLE, 1000):
                chunk = values[start:start + 1000]
                if camp.oracle == "rappor":
                    chunk = [RAPPOR["candidates"][v] for v in chunk]
                batch = mech.encode_batch(chunk, rng=rng, campaign=camp.name)
                assert stack.post_batch(batch)["accepted"] == 1000
        shuffle_once(cfg, redis_client)
        Worker(cfg, redis_client).run(once=True)
        for camp in cfg.campaigns:
            status, _, body = stack.get(f"/v1/campaigns/{camp.name}/estimates")
            assert status == 200, body
            doc = json.loads(body)
            assert doc["n_reports"] == N_PER_ORACLE and doc["oracle"] == camp.oracle
            est = np.array([it["estimate"] for it in doc["items"]])
            se = np.array([it["std_error"] for it in doc["items"]])
            assert [it["value"] for it in doc["items"]] == camp.labels()
            assert se.max() < 0.025 * N_PER_ORACLE
            z = (est - truth[camp.name]) / se
            assert np.abs(z).max() < 4, f"{camp.oracle}: z = {np.round(z, 2)}"
            normalized = np.array([it["estimate_normalized"] for it in doc["items"]])
            assert normalized.min() >= 0
            if camp.oracle != "rappor":  # Norm-Sub sums to N (RAPPOR's NNLS need not)
                assert normalized.sum() == pytest.approx(N_PER_ORACLE)
    finally:
        stack.close()


def test_export_contract(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "colors", "oracle": "oue", "epsilon": 2.0, "domain": ["red", "green", "blue, ish", "x\"y"],
         "min_reports": 1000},
        {"name": "hourly", "oracle": "grr", "epsilon": 1.0, "domain_size": 5, "window": "1h",
         "min_reports": 100},
        {"name": "scarce", "oracle": "olh", "epsilon": 1.0, "domain_size": 8, "min_reports": 5000},
    ])
    colors, hourly, scarce = cfg.campaigns
    stack = HttpStack(cfg, redis_url)
    try:
        for b in random_batches(colors, 3000, 500, seed=1):
            stack.post_batch(b)
        xadd_batches(redis_client, hourly, random_batches(hourly, 400, 100, seed=2), window=3600)
        xadd_batches(redis_client, hourly, random_batches(hourly, 300, 100, seed=3), window=7200)
        for b in random_batches(scarce, 1200, 600, seed=4):
            stack.post_batch(b)
        assert tally.backlog(redis_client, colors) == 6 and tally.backlog(redis_client, scarce) == 2
        shuffle_once(cfg, redis_client)
        worker = Worker(cfg, redis_client)
        worker.run(once=True)
        assert tally.backlog(redis_client, colors) == 0 and tally.backlog(redis_client, scarce) == 0
        summ = tally.summary(redis_client, colors)
        assert summ.windows == {0: 3000} and summ.backlog == 0 and summ.rejected == 0 and summ.updated

        path = "/v1/campaigns/colors/estimates"
        status, headers, body = stack.get(path)
        assert status == 200 and headers["content-type"].startswith("application/json")
        doc = json.loads(body)
        assert list(doc) == ["campaign", "version", "kind", "oracle", "epsilon", "n_reports", "window",
                             "decoded_at", "privacy", "items", "complete"]
        assert doc["version"] == 1 and doc["complete"] is False  # "all": the one window never ends
        assert doc["campaign"] == "colors" and doc["kind"] == "frequency" and doc["oracle"] == "oue"
        assert doc["epsilon"] == 2.0 and doc["n_reports"] == 3000 and doc["window"] == 0
        assert [list(it) for it in doc["items"]] == [list(ITEM_COLUMNS)] * 4
        assert [it["value"] for it in doc["items"]] == ["red", "green", "blue, ish", "x\"y"]
        for it in doc["items"]:
            assert it["ci_low"] < it["estimate"] < it["ci_high"]

        # CSV: header in the same order, same rows, same numbers (exactly), then window and n_reports
        status, csv_headers, csv_body = stack.get(path + "?format=csv")
        assert status == 200 and csv_headers["content-type"].startswith("text/csv")
        rows = list(csv.reader(io.StringIO(csv_body.decode())))
        assert tuple(rows[0]) == (*ITEM_COLUMNS, "window", "n_reports", "complete") and len(rows) == 5
        for row, it in zip(rows[1:], doc["items"], strict=True):
            assert row[0] == it["value"]
            assert [float(x) for x in row[1:len(ITEM_COLUMNS)]] == [it[k] for k in ITEM_COLUMNS[1:]]
            assert row[len(ITEM_COLUMNS):] == ["0", "3000", "false"]
        assert csv_headers["x-ldptel-n-reports"] == "3000" and csv_headers["etag"] == headers["etag"]
        assert stack.get(path + "?format=json&window=current")[2] == body
        assert stack.get(path + "?window=0")[2] == body
        # issue 35: `latest` is the newest window that has ended; the one window of a window = "all"
        # campaign never ends, so `latest` answers none (it answered it, complete: false) and
        # points at window=current; so does version=all
        for query in ("?window=latest", "?format=csv&window=latest", "?window=latest&version=all"):
            status, _, err = stack.get(path + query)
            assert status == 409, (query, status, err)
            detail = json.loads(err)
            assert detail["error"] == "no_complete_window" and detail["detail"]["window"] == 0, detail
            assert "window=current" in detail["detail"]["message"]

        # conditional requests
        assert stack.get(path, headers={"If-None-Match": headers["etag"]})[0] == 304
        assert stack.get(path + "?format=csv", headers={"If-None-Match": f'"x", {headers["etag"]}'})[0] == 304
        assert stack.get(path, headers={"If-None-Match": '"other"'})[0] == 200
        assert stack.get(path, headers={"If-Modified-Since": headers["last-modified"]})[0] == 304
        assert stack.get(path, headers={"If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"})[0] == 200
        time.sleep(0.01)
        stack.post_batch(random_batches(colors, 100, 100, seed=5)[0])
        assert stack.get(path, headers={"If-None-Match": headers["etag"]})[0] == 304  # not yet counted
        shuffle_once(cfg, redis_client)
        worker.run(once=True)
        status, new_headers, new_body = stack.get(path, headers={"If-None-Match": headers["etag"]})
        assert status == 200 and new_headers["etag"] != headers["etag"]
        assert json.loads(new_body)["n_reports"] == 3100

        # windows
        hp = "/v1/campaigns/hourly/estimates"
        assert json.loads(stack.get(hp)[2])["window"] == 7200
        assert json.loads(stack.get(hp)[2])["complete"] is True  # ended (in 1970)
        assert json.loads(stack.get(hp + "?window=3600")[2])["n_reports"] == 400
        assert json.loads(stack.get(hp + "?window=7200")[2])["n_reports"] == 300
        for bad in ("abc", "1800", "-1", "3600.0", "latest2"):
            status, _, body = stack.get(f"{hp}?window={bad}")
            assert status == 400 and json.loads(body)["error"] == "bad_window", bad
        assert stack.get(path + "?window=3600")[0] == 400  # "all" campaign: only window 0
        assert stack.get(path + "?format=xml")[0] == 400

        # release threshold: 409 with the count, nothing else
        status, _, body = stack.get("/v1/campaigns/scarce/estimates")
        err = json.loads(body)
        assert status == 409 and err["error"] == "below_threshold"
        assert err["detail"]["n_reports"] == 1200 and err["detail"]["min_reports"] == 5000
        assert "items" not in err and "std_error" not in body.decode()
        assert stack.get("/v1/campaigns/scarce/estimates?format=csv")[0] == 409
        status, _, body = stack.get(hp + "?window=10800")  # a window with nothing
        assert status == 409 and json.loads(body)["detail"]["n_reports"] == 0

        # auth and unknown campaign
        for token in (None, "wrong-token-123", INGEST_TOKEN):
            status, h, body = stack.get(path, token=token)
            assert status == 401 and json.loads(body)["error"] == "unauthorized"
            assert "items" not in json.loads(body)
        assert stack.get(path, token=None, headers={"Authorization": "Basic " + EXPORT_TOKEN})[0] == 401
        status, _, body = stack.get("/v1/campaigns/nope/estimates")
        assert status == 404 and json.loads(body)["error"] == "not_found"
        assert stack.get("/v1/campaigns/nope/estimates", token=None)[0] == 401  # no probing
    finally:
        stack.close()
