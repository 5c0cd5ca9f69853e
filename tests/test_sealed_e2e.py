"""Campaigns in a shuffled privacy mode end to end, against a real Redis and the real collector over
HTTP: the SDK seals every message (and its fakes) to the analyzer, the collector stores ciphertext,
the shuffler releases whole batches of at least batch_min devices, the aggregator decrypts and
decodes whole releases, and each document states the batches and "central ε between L and U"."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack
from sealed_support import FAKES, LOCAL, SHUFFLED, devices, publish_keys, sealed_config, shuffle_and_aggregate

from ldptel import keys
from ldptel.privacy.release_claims import fake_split


@pytest.fixture
def sealed_stack(redis_client: redis.Redis, redis_url: str, tmp_path: Path):
    cfg = sealed_config(tmp_path, [FAKES, SHUFFLED, LOCAL])
    publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    yield cfg, stack
    stack.close()


def estimate(stack: HttpStack, name: str) -> dict:
    status, _, body = stack.get(f"/v1/campaigns/{name}/estimates?window=current")
    assert status == 200, body
    return json.loads(body)


def test_shuffled_fakes_end_to_end(sealed_stack, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, stack = sealed_stack
    rng = np.random.default_rng(5)
    values = rng.choice(16, size=700, p=np.arange(16, 0, -1) / np.arange(16, 0, -1).sum())
    assert devices(stack, tmp_path, "a", "sf-hist", values[:400]) == 400
    assert devices(stack, tmp_path, "b", "sf-hist", values[400:]) == 300
    shuffle_and_aggregate(cfg, redis_client)
    doc = estimate(stack, "sf-hist")
    privacy = doc["privacy"]
    assert privacy["privacy_mode"] == "shuffled-fakes" and privacy["epsilon_report"] is None
    assert privacy["batches"] == [700] and privacy["central_epsilon"] <= 1.0
    assert 0 < privacy["central_epsilon_lower"] <= privacy["central_epsilon"]
    assert doc["n_reports"] == 700
    truth = np.bincount(values, minlength=16)
    est = np.array([row["estimate"] for row in doc["items"]])
    se = np.array([row["std_error"] for row in doc["items"]])
    mu = fake_split(cfg.campaign("sf-hist").mode).honest_mu(700, 16)  # the shuffler's and the devices'
    assert privacy["fake_source"] == "both" and privacy["shuffler_fakes_per_bucket"] > 0
    assert np.allclose(se, np.sqrt(mu * (1 - 1 / 16)), rtol=0.25)
    assert np.all(np.abs(est - truth) < 6 * se + 1)


def test_shuffled_grr_end_to_end(sealed_stack, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, stack = sealed_stack
    values = np.random.default_rng(6).integers(0, 8, size=500)
    assert devices(stack, tmp_path, "g", "sh-grr", values, seed=3) == 500
    shuffle_and_aggregate(cfg, redis_client)
    doc = estimate(stack, "sh-grr")
    assert doc["n_reports"] == 500 and doc["privacy"]["batches"] == [500]
    assert doc["privacy"]["local_epsilon"] == cfg.campaign("sh-grr").epsilon > 1.0
    truth = np.bincount(values, minlength=8)
    est = np.array([row["estimate"] for row in doc["items"]])
    se = np.array([row["std_error"] for row in doc["items"]])
    assert np.all(np.abs(est - truth) < 6 * se)


def test_below_batch_min_is_never_released(sealed_stack, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, stack = sealed_stack
    assert devices(stack, tmp_path, "c", "sf-hist", list(range(16)) * 10) == 160
    shuffle_and_aggregate(cfg, redis_client)
    assert redis_client.xlen(keys.stream_key("sf-hist", 0)) == 0  # held: below batch_min
    assert redis_client.xlen(keys.ingress_key("sf-hist", 0)) > 0
    status, _, _ = stack.get("/v1/campaigns/sf-hist/estimates?window=current")
    assert status in (404, 409, 503)


def test_window_closing_below_batch_min_is_discarded(redis_client: redis.Redis, redis_url: str,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sealed_support import devices as send

    from ldptel.shuffler import sealed as shuffler_sealed
    from ldptel.shuffler.worker import Shuffler
    from ldptel.store import tally

    cfg = sealed_config(tmp_path, [{**FAKES, "name": "sf-short", "window": "10s"}])
    publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        assert send(stack, tmp_path, "s", "sf-short", list(range(16)) * 5) == 80
    finally:
        stack.close()
    Shuffler(cfg, redis_client).run(once=True)  # the window is open: held, not released
    assert redis_client.xlen(keys.ingress_key("sf-short", 0)) > 0
    later = shuffler_sealed.time.time() + 30
    monkeypatch.setattr(shuffler_sealed.time, "time", lambda: later)
    Shuffler(cfg, redis_client).run(once=True)  # closed below batch_min: discarded
    assert redis_client.xlen(keys.ingress_key("sf-short", 0)) == 0
    assert redis_client.xlen(keys.stream_key("sf-short", 0)) == 0
    assert redis_client.hget(keys.shuffle_metrics_key("sf-short", 0), keys.SHUFFLE_DISCARDED) == b"80"
    summ = tally.summary(redis_client, cfg.campaign("sf-short"))
    assert summ.lag_reports == 0 and summ.lag_entries == 0


def test_pages_show_the_mode_and_the_claim(sealed_stack, redis_client: redis.Redis,
                                          tmp_path: Path) -> None:
    import re
    import urllib.parse

    from agg_support import EXPORT_TOKEN

    cfg, stack = sealed_stack
    devices(stack, tmp_path, "p", "sf-hist", np.random.default_rng(1).integers(0, 16, 350))
    shuffle_and_aggregate(cfg, redis_client)
    status, headers, body = stack.request("GET", "/signin")
    csrf = re.search(rb'name="csrf_token" value="([^"]+)"', body).group(1).decode()
    cookie = next(c.split(";", 1)[0] for c in headers["set-cookie"].split(", ")
                  if c.startswith("ldptel_session="))
    status, headers, _ = stack.request("POST", "/signin", urllib.parse.urlencode(
        {"token": EXPORT_TOKEN, "csrf_token": csrf}).encode(),
        {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie})
    assert status == 302
    session = {"Cookie": next(c.split(";", 1)[0] for c in headers["set-cookie"].split(", ")
                              if c.startswith("ldptel_session="))}
    status, _, listing = stack.request("GET", "/", headers=session)
    assert status == 200 and "HISTOGRAM · shuffled-fakes" in listing.decode()
    assert "whole batches" in listing.decode()
    status, _, page = stack.request("GET", "/campaigns/sf-hist?window=0", headers=session)
    text = page.decode()
    assert status == 200, text[:300]
    # "central ε = 1" when the attack's lower bound and the certified one agree (issue 35: "between 1 and 1")
    claim = r"shuffled-fakes: central ε (between [\d.]+ and [\d.]+|= [\d.]+) \(δ"
    assert re.search(claim, text), text[-3000:]
    assert "1 shuffled batch of 350 devices" in text
    assert "must not collude" in text and "fake values" in text
    assert "fake_source = both" in text  # the shuffler's fakes (issue 36)


def test_two_workers_split_a_release(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    """With small reads the parts of one release reach two workers: the holder of part 0 claims
    the rest and commits the release whole, once."""
    import dataclasses

    from ldptel.aggregator import store
    from ldptel.aggregator.worker import Worker
    from ldptel.shuffler.worker import Shuffler
    from ldptel.store import tally

    cfg = sealed_config(tmp_path, [FAKES], batch_reports=100)
    cfg = dataclasses.replace(cfg, aggregator=dataclasses.replace(cfg.aggregator, read_count=3))
    publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        assert devices(stack, tmp_path, "w", "sf-hist", list(range(16)) * 40) == 640
    finally:
        stack.close()
    Shuffler(cfg, redis_client).run(once=True)
    parts = redis_client.xlen(keys.stream_key("sf-hist", 0))
    assert parts > 10
    a, b = (Worker(cfg, redis_client, log=lambda _m: None) for _ in range(2))
    a.setup()
    b.setup()
    for _ in range(4 * parts):
        a.step()
        b.step()
        if not redis_client.xpending(keys.stream_key("sf-hist", 0), keys.GROUP)["pending"] and \
                sum(tally.window_counts(redis_client, cfg.campaign("sf-hist")).values()) == 640:
            break
    camp = cfg.campaign("sf-hist")
    assert store.release_sizes(redis_client, camp, 0) == [640]
    assert sum(tally.window_counts(redis_client, camp).values()) == 640
    assert a.stats.entries + b.stats.entries == parts and min(a.stats.entries, b.stats.entries) == 0
