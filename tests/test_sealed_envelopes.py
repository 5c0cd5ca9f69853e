"""Issue 36, one device per sealed envelope (reproduction 1) and replay padding (reproduction 2),
through the real collector over HTTP, the SDK, the shuffler, the aggregator and Redis:

- one POST claiming 1,999 devices around one honest device (``batch_min`` 2,000) is refused (400
  naming ``reports``), as is one "device" carrying 1,999 messages (400 naming ``messages``);
  nothing is stored and the honest device is never published (the old code published a "batch
  of 2,000 devices" whose top bucket outside the attacker's was the victim's value);
- the SDK's ``report_many`` posts one envelope per simulated device, several per POST
  (``SealedEnvelopes``): each is stored as one device; an invalid envelope in such a body refuses
  the whole body (400 naming its index and field) and stores nothing;
- the shuffler counts envelopes, and the aggregator re-checks a release after opening it: one
  honest envelope padded to ``batch_min`` with 299 replays of itself (each under a new batch id:
  the collector cannot tell) is released by the shuffler but never published (the old code
  published the honest device alone as a batch of 1).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import redis
from agg_support import INGEST_TOKEN, HttpStack
from sealed_support import SHUFFLED, devices, publish_keys, sealed_config, shuffle_and_aggregate

from ldptel import keys, sealing
from ldptel.mechanisms.rows import row_bytes, to_rows
from ldptel.proto import SealedBatch, SealedEnvelopes

BIG = {**SHUFFLED, "name": "env-big", "batch_min": 2000}
PADDED = {**SHUFFLED, "name": "env-padded"}


def post(stack: HttpStack, body: bytes) -> tuple[int, dict]:
    status, _, raw = stack.request("POST", "/v1/reports", body, {
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
    return status, json.loads(raw)


def estimate(stack: HttpStack, name: str) -> dict:
    status, _, body = stack.get(f"/v1/campaigns/{name}/estimates?window=current")
    assert status == 200, body
    return json.loads(body)


def withheld(stack: HttpStack, name: str) -> bool:
    """Nothing of ``name`` is published: the export API answers 409 ``below_threshold``, 0 reports."""
    status, _, body = stack.get(f"/v1/campaigns/{name}/estimates?window=current")
    doc = json.loads(body)
    return status == 409 and doc["error"] == "below_threshold" and doc["detail"]["n_reports"] == 0


def ingress(r: redis.Redis, name: str) -> list[SealedBatch]:
    return [SealedBatch.FromString(f[keys.ENTRY_BATCH]) for _, f in r.xrange(keys.ingress_key(name, 0))]


def forged(cfg, ring, name: str, reports: int, messages: int) -> SealedBatch:
    """An attacker's envelope holding the public ingest token and analyzer key: ``messages``
    sealed reports of value 0 (sealed exactly as a device seals them), claiming ``reports``."""
    camp = cfg.campaign(name)
    mech = camp.mechanism()
    (kid,) = ring.public
    public = sealing.load_public(ring.public[kid].public)
    rows = row_bytes(to_rows(mech, {"values": np.zeros(messages, dtype=np.int64)}, messages))
    return SealedBatch(campaign=name, campaign_version=camp.version, schema_version=2,
                       batch_id=os.urandom(16), reports=reports, key_id=kid, window=0,
                       messages=sealing.seal(rows, public, sealing.info(name, camp.version, 0, kid)))


def test_one_device_per_envelope(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    cfg = sealed_config(tmp_path, [BIG, PADDED])
    ring = publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        assert devices(stack, tmp_path, "victim", BIG["name"], [5], seed=1) == 1
        # reproduction 1: one POST claiming 1,999 devices (every message on value 0, no fakes)
        status, err = post(stack, forged(cfg, ring, BIG["name"], 1999, 1999).SerializeToString())
        assert (status, err["error"], err["detail"]["field"]) == (400, "invalid_batch", "reports"), err
        # … or one "device" carrying 1,999 messages (shuffled: exactly one message per report)
        status, err = post(stack, forged(cfg, ring, BIG["name"], 1, 1999).SerializeToString())
        assert (status, err["error"], err["detail"]["field"]) == (400, "invalid_batch", "messages"), err
        assert len(ingress(redis_client, BIG["name"])) == 1  # nothing of the attacker's stored
        shuffle_and_aggregate(cfg, redis_client)
        assert withheld(stack, BIG["name"])  # the honest device is never published (old code: n = 2,000)

        # report_many: 299 simulated devices, one envelope each, several per POST (SealedEnvelopes)
        values = np.random.default_rng(7).integers(0, 8, size=299)
        assert devices(stack, tmp_path, "fleet", PADDED["name"], values, seed=2) == 299
        held = ingress(redis_client, PADDED["name"])
        assert len(held) == 299 and all(e.reports == 1 and len(e.messages) == 1 for e in held)
        assert len({bytes(e.batch_id) for e in held}) == 299
        # a body of envelopes with one bad one (index 1 claims 2 reports): refused whole, naming it
        good, bad = forged(cfg, ring, PADDED["name"], 1, 1), forged(cfg, ring, PADDED["name"], 2, 2)
        many = SealedEnvelopes(schema_version=3, envelopes=[good, bad])
        status, err = post(stack, many.SerializeToString())
        assert (status, err["detail"]["envelope"], err["detail"]["field"]) == (400, 1, "reports"), err
        assert len(ingress(redis_client, PADDED["name"])) == 299
        # the same body's envelopes are one device each; a re-post is all duplicates
        body = SealedEnvelopes(schema_version=3, envelopes=[good]).SerializeToString()
        first, again = post(stack, body), post(stack, body)
        assert first == (202, {"accepted": 1, "duplicate": False, "envelopes": 1, "duplicates": 0})
        assert again == (202, {"accepted": 0, "duplicate": True, "envelopes": 1, "duplicates": 1})
        shuffle_and_aggregate(cfg, redis_client)
        doc = estimate(stack, PADDED["name"])
        assert doc["n_reports"] == 300 and doc["privacy"]["batches"] == [300]
    finally:
        stack.close()


def test_replay_padding_is_never_published(redis_client: redis.Redis, redis_url: str,
                                           tmp_path: Path) -> None:
    """One honest envelope and 299 replays of it under new batch ids: the shuffler sees 300
    envelopes (batch_min) and releases them; the aggregator drops the 299 replays, finds one
    device, and refuses the release: nothing is published, the refusal and the replays counted."""
    cfg = sealed_config(tmp_path, [PADDED])
    publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        assert devices(stack, tmp_path, "victim", PADDED["name"], [5], seed=1) == 1
        (victim,) = ingress(redis_client, PADDED["name"])
        for _ in range(299):
            copy = SealedBatch.FromString(victim.SerializeToString())
            copy.batch_id = os.urandom(16)
            assert post(stack, copy.SerializeToString()) == (202, {"accepted": 1, "duplicate": False})
        warnings: list[str] = []
        from ldptel.aggregator.worker import Worker
        from ldptel.shuffler.worker import Shuffler

        Shuffler(cfg, redis_client).run(once=True)
        assert not ingress(redis_client, PADDED["name"])  # released: 300 envelopes ≥ batch_min
        worker = Worker(cfg, redis_client, log=warnings.append)
        worker.run(once=True)
        assert withheld(stack, PADDED["name"])  # old code: published, batches [1]: the victim alone
        assert worker.sealed.refused == 1
        assert any("refused, never published" in w and "1 envelopes (devices) < batch_min 300" in w
                   for w in warnings), warnings
    finally:
        stack.close()


def test_pipelined_ingest_loads_its_script(redis_client: redis.Redis) -> None:
    """``call_many`` (a SealedEnvelopes body's INGEST calls in one round trip) gives what one call
    per envelope gives, also when the server has no copy of the script (it runs nothing, then the
    calls are made again alone, which load it)."""
    from ldptel.store import scripts

    redis_client.script_flush()
    run = scripts.of(redis_client)

    def call(i: int) -> tuple[list, list]:
        return ([f"seen:{i}", "{c:0}:ingress", "{c:0}:metrics", "{c:0}:top"],
                [2_000_000_000, f"batch {i}", 0, 1])

    first = run.call_many("INGEST", [call(i) for i in range(3)])
    assert all(isinstance(e, bytes) and b"-" in e for e in first) and len(set(first)) == 3
    again = run.call_many("INGEST", [call(i) for i in (1, 2, 3)])  # the script is loaded now
    assert again[:2] == [None, None] and isinstance(again[2], bytes)  # duplicates, then a new one
    assert redis_client.xlen("{c:0}:ingress") == 4
    assert redis_client.hget("{c:0}:metrics", "duplicate_batches") == b"2"
