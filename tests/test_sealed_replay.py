"""Issue 36, replay (its item 2): a sealed envelope re-posted under new batch ids is counted once,
across releases and aggregator restarts, through the real collector over HTTP, the SDK, the
shuffler, the aggregator and Redis; the record that makes it so is bounded per analyzer key and
deleted with the key."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import redis
from agg_support import INGEST_TOKEN, HttpStack
from sealed_support import SHUFFLED, devices, publish_keys, sealed_config, shuffle_and_aggregate

from ldptel import keys
from ldptel.proto import SealedBatch

PLAIN, REPLAYED = {**SHUFFLED, "name": "rp-plain"}, {**SHUFFLED, "name": "rp-replayed"}


def post(stack: HttpStack, envelope: SealedBatch) -> dict:
    status, _, body = stack.request("POST", "/v1/reports", envelope.SerializeToString(), {
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
    assert status == 202, (status, body)
    return json.loads(body)


def replay(stack: HttpStack, envelope: SealedBatch, times: int) -> None:
    """Re-post ``envelope`` under ``times`` new batch ids: each is accepted (the collector cannot
    tell a replay from a new envelope: it cannot open a message)."""
    for _ in range(times):
        copy = SealedBatch.FromString(envelope.SerializeToString())
        copy.batch_id = os.urandom(16)
        assert post(stack, copy) == {"accepted": 1, "duplicate": False}


def estimate(stack: HttpStack, name: str) -> dict:
    status, _, body = stack.get(f"/v1/campaigns/{name}/estimates?window=current")
    assert status == 200, body
    return json.loads(body)


def test_a_replayed_envelope_counts_once(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    cfg = sealed_config(tmp_path, [PLAIN, REPLAYED])
    ring = publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        values = np.random.default_rng(7).integers(0, 8, size=300)
        for camp in (PLAIN, REPLAYED):  # the same devices (same seeds) in two twin campaigns
            assert devices(stack, tmp_path, f"{camp['name']}-victim", camp["name"], [5], seed=1) == 1
            assert devices(stack, tmp_path, f"{camp['name']}-rest", camp["name"], values, seed=2) == 300
        # one device's envelope, as a Redis dump (or a proxy) holds it
        held = [SealedBatch.FromString(f[keys.ENTRY_BATCH])
                for _, f in redis_client.xrange(keys.ingress_key(REPLAYED["name"], 0))]
        victim = next(e for e in held if e.reports == 1)
        assert post(stack, victim) == {"accepted": 0, "duplicate": True}  # its own batch id: refused
        replay(stack, victim, 40)
        shuffle_and_aggregate(cfg, redis_client)
        plain, replayed = estimate(stack, PLAIN["name"]), estimate(stack, REPLAYED["name"])
        # the old code: 341 reports, the victim's bucket 40 higher
        assert plain["n_reports"] == replayed["n_reports"] == 301
        assert replayed["items"] == plain["items"]
        assert replayed["privacy"]["batches"] == plain["privacy"]["batches"] == [301]
        assert plain["replayed_messages"] == 0 and replayed["replayed_messages"] == 40

        # later releases, a new aggregator (shuffle_and_aggregate makes a new Worker): a whole
        # "batch" of replays adds nothing
        replay(stack, victim, 300)
        shuffle_and_aggregate(cfg, redis_client)
        again = estimate(stack, REPLAYED["name"])
        assert again["n_reports"] == 301 and again["items"] == plain["items"]
        assert again["replayed_messages"] == 340
        assert again["privacy"] == plain["privacy"]  # batches [301]: a release of replays is no batch

        # the record: one field per message opened with the key (both campaigns: 602), about 100
        # bytes each, expiring when the key's private half is deleted, and deleted with it
        (kid,) = ring.public
        record = keys.opened_key(kid)
        assert redis_client.hlen(record) == 602
        per_message = redis_client.memory_usage(record) / 602
        assert per_message < 160, per_message
        print(f"opened record: {per_message:.1f} bytes per message")
        gone_at = ring.forget_at(kid)
        assert gone_at is not None and abs(time.time() + redis_client.ttl(record) - gone_at) <= 3
        ring.ensure(redis_client, now=gone_at)
        assert kid not in ring.public and not redis_client.exists(record)
    finally:
        stack.close()


def test_the_record_is_idempotent_per_release(redis_client: redis.Redis) -> None:
    """A release decoded again (its worker died between the record and the commit) keeps its own
    messages; another release holding them (a replay) gets none; the record expires at the key's
    deletion."""
    from ldptel.store import opened

    encs = [os.urandom(32) for _ in range(5)]
    first = opened.release_tag("{ldptel:c:0}:reports", b"1700000000000-1", b"r" * 16)
    again = opened.release_tag("{ldptel:c:0}:reports", b"1700000000000-1", b"r" * 16)
    replay = opened.release_tag("{ldptel:c:1}:reports", b"1700000000000-1", b"r" * 16)  # another shard
    gone = time.time() + 3600
    assert opened.claim(redis_client, 7, first, encs[:3], gone) == [True] * 3
    assert opened.claim(redis_client, 7, again, encs, gone) == [True] * 5
    assert opened.claim(redis_client, 7, replay, encs[::-1], gone) == [False] * 5
    assert opened.claim(redis_client, 8, replay, encs[:1], None) == [True]  # another key: its own record
    assert 3595 <= redis_client.ttl(keys.opened_key(7)) <= 3601 and redis_client.ttl(keys.opened_key(8)) == -1
