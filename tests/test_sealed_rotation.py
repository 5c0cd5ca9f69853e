"""Issue 36, rotation without loss (its item 7, reproduction 6): devices before and after an
analyzer-key rotation form ONE group of their (version, window, cell), released as one batch whose
messages carry their key ids; the old key's private half is kept while messages sealed to it wait
(the shuffler answers the keyring's question once none is left in ingress), and deleted once they
are opened — through the real collector over HTTP, the SDK, the shuffler, the
aggregator and Redis. Before: two groups of 25 that never reach batch_min 40, and the old key
deleted at accepted_until + key_overlap under its waiting messages."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack
from sealed_support import SHUFFLED, devices, publish_keys, sealed_config

from ldptel import keys
from ldptel.aggregator.worker import Worker
from ldptel.proto import SealedBatch
from ldptel.server.sealed_ingest import KEY_CACHE_SECONDS
from ldptel.shuffler import release
from ldptel.shuffler.worker import Shuffler
from ldptel.store import acl

ROT = {**SHUFFLED, "name": "rot-grr", "batch_min": 40, "window": "all"}


def estimate(stack: HttpStack) -> dict:
    status, _, body = stack.get(f"/v1/campaigns/{ROT['name']}/estimates?window=current")
    assert status == 200, body
    return json.loads(body)


def sealed_to(r: redis.Redis, stream: str) -> list[int]:
    """The analyzer key id of each device (ingress envelopes: one per reported device) or message
    (a release's parts) of ``stream``."""
    out: list[int] = []
    for _, fields in r.xrange(stream):
        part = SealedBatch.FromString(fields[keys.ENTRY_BATCH])
        out += list(part.key_ids) if part.key_ids else [part.key_id] * (len(part.messages) if part.release
                                                                         else part.reports)
    return out


def test_a_rotation_inside_a_group_loses_nothing(redis_client: redis.Redis, redis_url: str,
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the release goes through the journaled steps (RELEASE_BEGIN … RELEASE_STEP), as a large one
    # does: they too must lower what the old key is still needed for
    monkeypatch.setattr(release, "CALL_IDS", 1)
    cfg = sealed_config(tmp_path, [ROT])
    ring = publish_keys(cfg, redis_client)
    (old,) = ring.public
    streams = [(ROT["name"], 0)]
    ingress, analysis = keys.ingress_key(ROT["name"]), keys.stream_key(ROT["name"])
    stack = HttpStack(cfg, redis_url)
    try:
        values = np.random.default_rng(3).integers(0, 8, size=50)
        assert devices(stack, tmp_path, "before", ROT["name"], values[:25], seed=1) == 25
        Shuffler(cfg, redis_client).run(once=True)  # 25 < batch_min: nothing released
        assert sealed_to(redis_client, ingress) == [old] * 25 and redis_client.xlen(analysis) == 0

        # the aggregator rotates (a new current key); later the old one is past accepted_until +
        # key_overlap (its public half withdrawn) while its 25 messages still wait: it is kept
        pub = ring.public[old]
        ring.ensure(redis_client, now=pub.current_until + 1, streams=streams)
        (new,) = set(ring.public) - {old}
        ring.ensure(redis_client, now=pub.accepted_until + ring.overlap + 1, streams=streams)
        assert old in ring.private and (ring.dir / f"{old:08x}.key").exists()
        assert ring.forget_at(old) is None  # its opened-message record lives as long as the key
        held = redis_client.hget(keys.sealed_keys_key(ROT["name"]), f"k:{old:08x}")
        assert held is not None and int(held) == redis_client.xlen(ingress)  # its ingress entries

        time.sleep(KEY_CACHE_SECONDS + 0.1)  # the collector's key cache has seen the new key
        assert devices(stack, tmp_path, "after", ROT["name"], values[25:], seed=2) == 25
        assert sorted(set(sealed_to(redis_client, ingress))) == sorted({old, new})

        Shuffler(cfg, redis_client).run(once=True)  # one group of 50 ≥ 40: one release
        assert redis_client.xlen(ingress) == 0
        per_message = sealed_to(redis_client, analysis)
        assert sorted(per_message) == sorted([old] * 25 + [new] * 25)
        assert ring.forget_at(old) is None
        Worker(cfg, redis_client, log=lambda _m: None).run(once=True)

        doc = estimate(stack)
        assert doc["n_reports"] == 50 and doc["privacy"]["batches"] == [50]
        assert doc.get("rejected", 0) == 0

        # every message of the old key opened: the next upkeep deletes it, its record with it
        ring.ensure(redis_client, now=pub.accepted_until + ring.overlap + 1, streams=streams)
        assert old not in ring.private and not (ring.dir / f"{old:08x}.key").exists()
        assert not redis_client.exists(keys.opened_key(old))
        assert not redis_client.hkeys(keys.sealed_keys_key(ROT["name"]))  # no ingress entry left
        holds = {f.decode() for f in redis_client.hkeys(keys.key_holds_key(ROT["name"]))}
        assert not {f for f in holds if f.endswith(f"{old:08x}")}, holds  # its fields gone with it
        assert new in ring.private
        # the per-key ingress counts move with every arrival: the aggregator may not read them
        (agg,) = [role for role in acl.roles(cfg) if role.name == "aggregator"]
        assert acl.SEALED_KEYS not in agg.keys and acl.KEY_HOLDS in agg.keys
    finally:
        stack.close()
