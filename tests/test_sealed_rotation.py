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
from ldptel.store import acl, scripts

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


@pytest.mark.parametrize("clients,per_client,batch_min", [(8, 7, 40)], ids=["small"])
def test_one_release_per_group_across_shards_and_keys(redis_client: redis.Redis, redis_url: str,
                                                      tmp_path: Path, clients: int, per_client: int,
                                                      batch_min: int) -> None:
    """Issue 38 (its item 1, the suite's shape): 4 shards, a rotation inside the window: every
    shard's envelopes are handed to shard 0, which releases the union once, no device lost or
    doubled. Small: batch_min 40 and no shard alone reaches it (before: nothing published); the
    large shape (10⁵ devices, the window's close, std error): ``test_one_release``."""
    n = clients * per_client
    camp = {**ROT, "name": "rot-sharded", "shards": 4, "batch_min": batch_min}
    cfg = sealed_config(tmp_path, [camp])
    ring = publish_keys(cfg, redis_client)
    (old,) = ring.public
    stack = HttpStack(cfg, redis_url)
    try:
        values = np.random.default_rng(5).integers(0, 8, size=n)
        for i in range(clients):  # each client's envelopes go to a random shard
            if i == clients // 2:  # the aggregator rotates inside the window
                ring.ensure(redis_client, now=ring.public[old].current_until + 1)
                time.sleep(KEY_CACHE_SECONDS + 0.1)
            chunk = values[per_client * i:per_client * (i + 1)]
            assert devices(stack, tmp_path, f"d{i}", camp["name"], chunk, seed=i) == per_client
        sealed = [sealed_to(redis_client, keys.ingress_key(camp["name"], s)) for s in range(4)]
        per_shard = [len(devs) for devs in sealed]
        assert sum(per_shard) == n, per_shard
        if n < 100:
            assert max(per_shard) < batch_min, per_shard  # no shard alone reaches batch_min
        assert sum(1 for n in per_shard if n) >= 2, per_shard
        by_key = sorted(k for devs in sealed for k in devs)
        assert len(set(by_key)) == 2  # sealed to both keys

        Shuffler(cfg, redis_client).run(once=True)
        assert all(redis_client.xlen(keys.ingress_key(camp["name"], s)) == 0 for s in range(4))
        assert all(redis_client.xlen(keys.stream_key(camp["name"], s)) == 0 for s in range(1, 4))
        released = sealed_to(redis_client, keys.stream_key(camp["name"], 0))  # one message per device
        assert sorted(released) == by_key  # every device once, with its key
        parts = [SealedBatch.FromString(f[keys.ENTRY_BATCH])
                 for _, f in redis_client.xrange(keys.stream_key(camp["name"], 0))]
        assert len({p.release for p in parts}) == 1
        Worker(cfg, redis_client, log=lambda _m: None).run(once=True)
        status, _, body = stack.get(f"/v1/campaigns/{camp['name']}/estimates?window=current")
        assert status == 200, body
        doc = json.loads(body)
        assert doc["n_reports"] == n and doc["privacy"]["batches"] == [n]  # one release, all devices
        # the shards' ingress groups and key counts are back to nothing
        for s in range(4):
            assert not redis_client.hkeys(keys.ingress_groups_key(camp["name"], s))
            assert not redis_client.hkeys(keys.sealed_keys_key(camp["name"], s))
    finally:
        stack.close()


def test_a_closed_window_waits_for_every_shard() -> None:
    """Shard 0 neither releases nor discards a closed window before every other shard's handoff
    mark is past the window's close (``shuffler.handoff``): a late shard's envelopes join the one
    release instead of making a second one, or being discarded as a remainder below batch_min."""
    from ldptel.campaigns.config import parse_config
    from ldptel.shuffler import handoff, sealed

    cfg = parse_config({"campaigns": [{**ROT, "name": "daily", "window": "1d", "shards": 4}]})
    c = cfg.campaigns[0]
    w, day = 86400 * 100, 86400
    after = w + 2 * day + 10  # the collector takes nothing more for window w
    late = {1: w + 2 * day, 2: w + 2 * day, 3: w + day}  # shard 3's last full read began before the close
    assert not handoff.settled(late, 4, w, day)
    assert handoff.settled({**late, 3: w + 2 * day}, 4, w, day)
    assert handoff.settled({}, 1, w, day) and handoff.settled({}, 4, 0, 0)  # one shard; "all"
    assert sealed.due(c, w, 45, 10**6, False, now=after, settled=False) is None
    assert sealed.due(c, w, 30, 10**6, False, now=after, settled=False) is None  # not discarded yet
    assert sealed.due(c, w, 45, 10**6, False, now=after) == "close"
    assert sealed.due(c, w, 30, 10**6, False, now=after) == "discard"


def test_a_retried_handoff_adds_nothing(redis_client: redis.Redis) -> None:
    """The handoff's two steps run in two hash slots: a shuffler that dies between them hands the
    same envelopes again; shard 0's markers make the retry add nothing, and the deletion lowers the
    shard's counts once (exactly once: docs/architecture.md)."""
    from ldptel.campaigns.config import parse_config
    from ldptel.shuffler import handoff

    camp = parse_config({"campaigns": [{**ROT, "name": "ho", "shards": 2}]}).campaigns[0]
    src, dst = keys.ingress_key("ho", 1), keys.ingress_key("ho", 0)
    envs = [SealedBatch(campaign="ho", batch_id=bytes([i]) * 16, reports=1, schema_version=2,
                        campaign_version=1, key_id=7, messages=[b"m" * 8]) for i in range(3)]
    group = keys.ingress_group(1, 0)
    entries = []
    for env in envs:  # as INGEST leaves them in shard 1
        eid = redis_client.xadd(src, {"batch": env.SerializeToString(), "window": 0, "count": 1})
        redis_client.hincrby(keys.ingress_groups_key("ho", 1), group, 1)
        redis_client.hincrby(keys.sealed_keys_key("ho", 1), "k:00000007", 1)
        entries.append((eid, 0, env, group))
    owner = [dst, keys.ingress_top_key("ho", 0), keys.ingress_groups_key("ho", 0),
             keys.sealed_keys_key("ho", 0)]
    args: list = [2**40]
    for env in envs:
        args += [env.SerializeToString(), 0, 1, group, "00000007"]
    markers = [keys.handed_key("ho", bytes(e.batch_id)) for e in envs]
    run = scripts.of(redis_client)
    assert run.call("HANDOFF", keys=[*owner, *markers], args=args) == 3  # then the shuffler dies
    assert handoff.hand_off(redis_client, camp, 1, entries)  # its successor hands them again
    assert redis_client.xlen(dst) == 3 and redis_client.xlen(src) == 0
    assert redis_client.hget(keys.ingress_groups_key("ho", 0), group) == b"3"
    assert redis_client.hget(keys.sealed_keys_key("ho", 0), "k:00000007") == b"3"
    assert not redis_client.hkeys(keys.ingress_groups_key("ho", 1))
    assert not redis_client.hkeys(keys.sealed_keys_key("ho", 1))
    assert handoff.hand_off(redis_client, camp, 1, entries) and redis_client.xlen(dst) == 3  # again: nothing
