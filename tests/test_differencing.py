"""The differencing attack (issue 26): a reader who keeps two successive publications of one window
and subtracts them. With the shuffler releasing whatever it holds (privacy_mode local), one device
reporting alone changes the publication by exactly its report, which the difference reveals (the
negative control: 12 of 12 recovered). In a shuffled privacy mode a publication changes only by a
whole batch of at least batch_min devices: a device reporting alone changes nothing (0 of 12), and
every change covers ≥ batch_min devices. Nothing published or exposed without a token carries a
per-batch time: /metrics needs a token, /healthz has no commit age, ``decoded_at`` is an hour plus
the number of releases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack
from sealed_support import devices, publish_keys, sealed_config, shuffle_and_aggregate

TARGETS = 12
D = 16
SEALED = {"name": "diff-fakes", "privacy_mode": "shuffled-fakes", "domain_size": D, "central_epsilon": 1.0,
          "central_delta": 1e-6, "batch_min": 200, "min_reports": 1}
LOCAL = {"name": "diff-local", "oracle": "grr", "epsilon": 8.0, "domain_size": D, "min_reports": 1}


def counts(stack: HttpStack, name: str) -> tuple[np.ndarray, dict, str]:
    status, headers, body = stack.get(f"/v1/campaigns/{name}/estimates?window=current")
    assert status == 200, body
    doc = json.loads(body)
    return np.array([row["estimate"] for row in doc["items"]]), doc, headers.get("etag", "")


def attack(before: np.ndarray, after: np.ndarray) -> int | None:
    """The attacker's guess of the newcomer's value: the bucket that grew the most, if any did."""
    diff = after - before
    return None if np.allclose(diff, 0) else int(np.argmax(diff))


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
        for t in range(TARGETS):
            value = int(rng.integers(0, D))
            for name in recovered:
                before, doc0, tag0 = counts(stack, name)
                devices(stack, tmp_path, f"t{t}-{name}", name, [value], seed=100 + t)
                shuffle_and_aggregate(cfg, redis_client)
                after, doc1, tag1 = counts(stack, name)
                recovered[name] += attack(before, after) == value
                if name == "diff-fakes":
                    assert tag1 == tag0 and doc1["n_reports"] == doc0["n_reports"]
        assert recovered["diff-local"] == TARGETS  # the negative control: every single report
        assert recovered["diff-fakes"] == 0
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
