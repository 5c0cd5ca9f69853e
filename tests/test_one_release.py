"""Issue 38 item 1: a shuffled campaign's (version, window, cell) group is released ONCE, when its
window closes (after every shard handed it off), whatever its size, shard count or key rotations;
early releases only when the campaign opts in (``shuffle_early_release``), forced by the memory
bounds (counted, a warning naming the cost), or on a drain. Before: released at ≥ 2·``batch_min``
while the window was open, k releases giving a std error per count of ≈ √k·√μ."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack
from sealed_support import devices, publish_keys, sealed_config

from ldptel import keys
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import ConfigError, ShufflerConfig, parse_config
from ldptel.proto import SealedBatch
from ldptel.server.sealed_ingest import KEY_CACHE_SECONDS
from ldptel.shuffler import metrics, sealed
from ldptel.shuffler.worker import Shuffler

DAY = 86400
D = 1024


def camp(**over) -> dict:
    return {"name": "win", "privacy_mode": "shuffled-fakes", "domain_size": D, "central_epsilon": 1.0,
            "central_delta": 1e-8, "batch_min": 1000, "window": "1d", "fake_source": "shuffler",
            "min_reports": 1, **over}


def test_release_rules() -> None:
    c = parse_config({"campaigns": [camp()]}).campaigns[0]
    w = DAY * 100
    inside, closed = w + 10, w + 2 * DAY
    big = 10**6
    assert sealed.due(c, w, big, 2 * big, False, now=inside) is None  # open: one release at the close
    assert sealed.due(c, w, big, 2 * big, False, now=closed) == "close"
    assert sealed.due(c, w, 999, 2 * big, False, now=closed) == "discard"
    assert sealed.due(c, w, 1100, 1100, False, now=inside) == "max_held"  # forced by memory
    assert sealed.due(c, w, 1100, 2 * big, False, now=inside, filling=True) == "ingress_full"
    assert sealed.due(c, w, 999, 500, False, now=inside, filling=True) is None  # never below batch_min
    assert sealed.due(c, w, 1100, 2 * big, True, now=inside) == "drain"
    early = parse_config({"campaigns": [camp(shuffle_early_release=3000)]}).campaigns[0]
    assert sealed.due(early, w, 2999, 2 * big, False, now=inside) is None
    assert sealed.due(early, w, 3000, 2 * big, False, now=inside) == "early"
    every = parse_config({"campaigns": [camp(window="all")]}).campaigns[0]  # never closes
    assert sealed.due(every, 0, 999, 2 * big, False, now=closed) is None  # waits, never discarded
    assert sealed.due(every, 0, 1000, 2 * big, False, now=closed) == "all"  # at batch_min by default
    assert sealed.early_size(every) == 1000 and sealed.early_size(c) == 0 and sealed.early_size(early) == 3000
    # refused at write time: below batch_min, or on a local campaign (the error names the key)
    with pytest.raises(ConfigError, match=r"campaigns\[win\]\.shuffle_early_release.*batch_min"):
        parse_config({"campaigns": [camp(shuffle_early_release=999)]})
    with pytest.raises(ConfigError, match=r"campaigns\[loc\]\.shuffle_early_release"):
        parse_config({"campaigns": [{"name": "loc", "oracle": "grr", "epsilon": 1.0, "domain_size": 8,
                                     "shuffle_early_release": 1000}]})
    # the default bounds let a window of 10⁶ devices be one release
    bounds = ShufflerConfig()
    assert bounds.max_held_reports >= big and bounds.max_ingress_batches // 2 >= big


def test_a_forced_early_release_is_counted_and_named(redis_client: redis.Redis, redis_url: str,
                                                     tmp_path: Path) -> None:
    """``max_held_reports`` reached in an open window: released at once (the memory bound holds),
    counted in ``ldptel_shuffler_early_releases_total`` and logged naming the √k cost."""
    c = camp(name="forced", batch_min=40, domain_size=8)
    cfg = sealed_config(tmp_path, [c], max_held_reports=50)
    publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        assert devices(stack, tmp_path, "f", "forced", np.arange(60) % 8, seed=1) == 60
        said: list[str] = []
        before = metrics.EARLY.labels("forced", "max_held")._value.get()
        Shuffler(cfg, redis_client, log=said.append).step()
        assert redis_client.xlen(keys.ingress_key("forced")) == 0  # all 60 released
        assert metrics.EARLY.labels("forced", "max_held")._value.get() == before + 1
        assert any("max_held_reports" in m and "√k·√μ" in m for m in said), said
    finally:
        stack.close()


def test_one_window_of_1e5_devices_is_one_release(redis_client: redis.Redis, redis_url: str,
                                                   tmp_path: Path) -> None:
    """The suite's shape of issue 38's "must be true": central (1, 10⁻⁸), d = 1,024, shuffler
    fakes, one weekly window of 10⁵ devices over 4 shards with an analyzer-key rotation inside it,
    through the collector over HTTP, the SDK, the shuffler (rounds while the window is open, then a
    clock past its close), the aggregator and Redis: ONE release of every device once, std error
    per count ≤ 8.5 (empirical over the 1,024 buckets, and planned)."""
    n, clients = 100_000, 10
    c = camp(name="window", batch_min=10_000, shards=4, window="7d")
    cfg = sealed_config(tmp_path, [c])
    ring = publish_keys(cfg, redis_client)
    (old,) = ring.public
    stack = HttpStack(cfg, redis_url)
    shuffler: Shuffler | None = None
    try:
        values = np.random.default_rng(38).integers(0, D, size=n)
        per = n // clients
        shift = [0.0]  # the shuffler's clock: the window is open, then (+2 days) closed
        shuffler = Shuffler(cfg, redis_client, rng=np.random.default_rng(1),
                            clock=lambda: time.time() + shift[0])
        for i in range(clients):
            if i == clients // 2:  # the aggregator rotates inside the window
                ring.ensure(redis_client, now=ring.public[old].current_until + 1)
                time.sleep(KEY_CACHE_SECONDS + 0.1)
            assert devices(stack, tmp_path, f"d{i}", c["name"], values[per * i:per * (i + 1)],
                           seed=i) == per
            shuffler.step()
        shuffler.step()
        # nothing released while the window is open (before: at ≥ 2·batch_min, k ≈ 5 releases)
        assert all(redis_client.xlen(keys.stream_key(c["name"], s)) == 0 for s in range(4))
        assert redis_client.xlen(keys.ingress_key(c["name"], 0)) == n  # all handed to shard 0

        shift[0] = 14 * DAY  # past the window's close
        deadline = time.monotonic() + 300  # the shuffler's fakes are sealed on its pool meanwhile
        while redis_client.xlen(keys.stream_key(c["name"], 0)) == 0 and time.monotonic() < deadline:
            shuffler.step()
            time.sleep(0.05)
        parts = [SealedBatch.FromString(f[keys.ENTRY_BATCH])
                 for _, f in redis_client.xrange(keys.stream_key(c["name"], 0))]
        # one release (a weekly window: the devices sealed to one unless the test straddles its end)
        assert len({p.release for p in parts}) == 1 and parts[0].release_reports == n
        assert len({k for p in parts for k in p.key_ids}) == 2  # both keys in the one release
        said: list[str] = []
        Worker(cfg, redis_client, log=said.append).run(once=True)
        status, _, body = stack.get(f"/v1/campaigns/{c['name']}/estimates?window={parts[0].window}")
        assert status == 200, (body, said)
        assert status == 200, body
        doc = json.loads(body)
        assert doc["n_reports"] == n and doc["privacy"]["batches"] == [n]  # one release, exactly once
        est = np.array([row["estimate"] for row in doc["items"]])
        truth = np.bincount(values, minlength=D)
        empirical = float(np.sqrt(np.mean((est - truth) ** 2)))
        planned = float(np.mean([row["std_error"] for row in doc["items"]]))
        mu = cfg.campaigns[0].mode.shuffler_fakes  # type: ignore[union-attr]
        print(f"1e5 devices, 4 shards, a rotation: one release; std error per count empirical "
              f"{empirical:.3f}, planned {planned:.3f} (√μ = {math.sqrt(mu):.3f})")
        assert planned <= 8.5 and empirical <= 8.5
        assert abs(empirical - math.sqrt(mu)) <= 4 * math.sqrt(mu) / math.sqrt(2 * D)  # std of a std
    finally:
        if shuffler is not None:
            shuffler.sealer.close()
        stack.close()


def test_early_release_changes_in_place_and_keeps_the_pinned_plan() -> None:
    """A version planned before issue 38 keeps its pinned plan: the release rule is no plan input,
    and ``shuffle_early_release`` changes the latest version in place (no new version, the same
    pinned fake rate); a value below ``batch_min`` is refused at write time, nothing written."""
    from ldptel.campaigns import records

    table = camp(name="pin", batch_min=20_000)
    record, _, _ = records.put_table(None, table, 0.0)
    (v1,) = records.versions_of(record)
    stored = json.loads(json.dumps(record, sort_keys=True))
    after, change, _ = records.put_table(stored, {**table, "shuffle_early_release": 40_000}, 1.0)
    assert change.action != "new_version" and len(after["versions"]) == 1
    assert after["versions"][0]["plan"] == record["versions"][0]["plan"]
    (same,) = records.versions_of(json.loads(json.dumps(after)))
    assert same.mode == v1.mode and same.shuffle_early_release == 40_000
    with pytest.raises(ConfigError, match=r"shuffle_early_release"):
        records.put_table(stored, {**table, "shuffle_early_release": 19_999}, 2.0)


def test_a_drain_is_one_release(redis_client: redis.Redis, redis_url: str, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``ldptel shuffle --once`` releases a sealed group only in a round that read every shard to
    its end: one release of all it holds, not one per read (here 10 entries a read; before: a
    release each time shard 0 held ``batch_min``)."""
    from ldptel.shuffler import worker

    monkeypatch.setattr(worker, "READ_COUNT", 10)
    monkeypatch.setattr(worker, "READ_PAGES", 1)
    c = camp(name="drain", batch_min=40, domain_size=8, shards=2)
    cfg = sealed_config(tmp_path, [c])
    publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        assert devices(stack, tmp_path, "d", "drain", np.arange(130) % 8, seed=3) == 130
    finally:
        stack.close()
    Shuffler(cfg, redis_client).run(once=True)
    parts = [SealedBatch.FromString(f[keys.ENTRY_BATCH])
             for _, f in redis_client.xrange(keys.stream_key("drain", 0))]
    assert {p.release_reports for p in parts} == {130} and len({p.release for p in parts}) == 1
    assert all(redis_client.xlen(keys.ingress_key("drain", s)) == 0 for s in range(2))
