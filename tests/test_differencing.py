"""The differencing attack (issue 26): a reader who keeps two successive publications of one window
and subtracts them. With the shuffler releasing whatever it holds (privacy_mode local), one device
reporting alone changes the publication by exactly its report, which the difference reveals (12 of
12 single reports recovered). Issue 36 (reproduction 7): those publications claimed a central ε
(≈ 0.42 here, from the window's n) that the difference voids; now a local campaign's documents
claim no central ε (``central_reason`` "republished per report: …") and its ``decoded_at`` is the
hour plus the number of its publications (it was the decode time in ms). In a shuffled privacy mode
a publication changes only by a whole batch of at least batch_min devices: a device reporting alone
changes nothing (0 of 12), and every change covers ≥ batch_min devices. Nothing published or
exposed without a token carries a per-batch time: /metrics needs a token, /healthz has no commit
age, ``decoded_at`` is an hour plus the number of releases."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import redis
from agg_support import HttpStack
from sealed_support import devices, publish_keys, sealed_config, shuffle_and_aggregate

TARGETS = 12
D = 16
P, Q = np.e / (np.e + D - 1), 1 / (np.e + D - 1)  # GRR at ε = 1 (the local campaign)
SEALED = {"name": "diff-fakes", "privacy_mode": "shuffled-fakes", "domain_size": D, "central_epsilon": 1.0,
          "central_delta": 1e-6, "batch_min": 200, "min_reports": 1}
# ε = 1: at n = 200 the shuffle bound gives a central ε (0.44), which the old documents claimed
LOCAL = {"name": "diff-local", "oracle": "grr", "epsilon": 1.0, "domain_size": D, "min_reports": 1}


def counts(stack: HttpStack, name: str) -> tuple[np.ndarray, dict, str]:
    status, headers, body = stack.get(f"/v1/campaigns/{name}/estimates?window=current")
    assert status == 200, body
    doc = json.loads(body)
    return np.array([row["estimate"] for row in doc["items"]]), doc, headers.get("etag", "")


def attack(before: np.ndarray, after: np.ndarray) -> int | None:
    """The attacker's guess of the newcomer's value: the bucket that grew the most, if any did."""
    diff = after - before
    return None if np.allclose(diff, 0) else int(np.argmax(diff))


def single_report(before: np.ndarray, after: np.ndarray) -> bool:
    """Whether two GRR publications differ by exactly one report: its bucket grew by (1 − q)/(p − q),
    every other fell by q/(p − q) (the report itself, whatever the device's value)."""
    diff = after - before
    top = int(np.argmax(diff))
    rest = np.delete(diff, top)
    return bool(np.allclose(rest, rest[0]) and np.isclose(diff[top] - rest[0], 1 / (P - Q)))


def coarse(decoded_at: float, publications: int) -> bool:
    """``decoded_at`` is a whole hour plus at most ``publications`` seconds (no finer time)."""
    return decoded_at == int(decoded_at) and decoded_at % 3600 <= publications


@pytest.mark.slow
def test_two_publications_reveal_no_single_report(redis_client: redis.Redis, redis_url: str,
                                                  tmp_path: Path) -> None:
    cfg = sealed_config(tmp_path, [SEALED, LOCAL])
    publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    rng = np.random.default_rng(26)
    try:
        for name in ("diff-fakes", "diff-local"):  # a first publication of both windows
            devices(stack, tmp_path, f"base-{name}", name, rng.integers(0, D, 200), seed=1)
        shuffle_and_aggregate(cfg, redis_client)
        recovered = {"diff-fakes": 0, "diff-local": 0}
        changes = []
        local_docs = [counts(stack, "diff-local")[1]]
        for t in range(TARGETS):
            value = int(rng.integers(0, D))
            for name in recovered:
                before, doc0, tag0 = counts(stack, name)
                devices(stack, tmp_path, f"t{t}-{name}", name, [value], seed=100 + t)
                shuffle_and_aggregate(cfg, redis_client)
                after, doc1, tag1 = counts(stack, name)
                if name == "diff-fakes":
                    recovered[name] += attack(before, after) == value
                    assert tag1 == tag0 and doc1["n_reports"] == doc0["n_reports"]
                else:
                    assert doc1["n_reports"] == doc0["n_reports"] + 1
                    recovered[name] += single_report(before, after)
                    local_docs.append(doc1)
        assert recovered["diff-local"] == TARGETS  # every single report, from two publications
        assert recovered["diff-fakes"] == 0
        # so no local publication claims a central ε (the old ones claimed 0.44 … 0.42), and none
        # carries a time finer than the hour: the hour plus the count of the window's publications
        for doc in local_docs:
            privacy = doc["privacy"]
            assert privacy["shuffled"] is True and privacy["central_epsilon"] is None, privacy
            assert privacy["central_delta"] is None
            assert privacy["central_reason"].startswith("republished per report: differencing two "
                                                        "publications isolates single reports"), privacy
            assert coarse(doc["decoded_at"], len(local_docs)), doc["decoded_at"]
        assert [d["decoded_at"] for d in local_docs] == sorted({d["decoded_at"] for d in local_docs})
        status, headers, body = stack.get("/v1/campaigns/diff-local/estimates?window=current&format=parquet")
        assert status == 200 and pq.read_table(io.BytesIO(body)).column("epsilon_central").null_count == D
        hms = re.search(r" (\d\d):(\d\d):(\d\d) GMT$", headers["last-modified"])  # the hour + the count
        assert hms is not None and hms[2] == "00" and int(hms[3]) <= len(local_docs), headers
        # the held devices go out with the next whole batch, never alone
        before, doc0, _ = counts(stack, "diff-fakes")
        devices(stack, tmp_path, "fill", "diff-fakes", rng.integers(0, D, 200 - TARGETS), seed=7)
        shuffle_and_aggregate(cfg, redis_client)
        after, doc1, _ = counts(stack, "diff-fakes")
        changes.append(doc1["n_reports"] - doc0["n_reports"])
        assert changes == [200] and doc1["privacy"]["batches"] == [200, 200]
        assert all(b >= SEALED["batch_min"] for b in doc1["privacy"]["batches"])
        assert doc1["decoded_at"] % 3600 == len(doc1["privacy"]["batches"])
        # exposed without a token: no per-batch time
        status, _, _ = stack.get("/metrics", token=None)
        assert status == 401
        status, _, body = stack.get("/healthz", token=None)
        assert "last_commit_age_seconds" not in json.loads(body)["components"]["aggregator"]
    finally:
        stack.close()
