"""Campaigns in a shuffled privacy mode hold nothing decryptable outside the aggregator: after the
SDK, the collector (over HTTP), the shuffler and the aggregator ran, every key and every stream
entry of Redis, every message the shuffler held and every log line of the collector is tried as a
report (``report_like``: a ``ReportBatch`` the campaign's mechanism reads, or fixed-width rows it
accepts) and none is one; the Redis audit of ``tests/redis_audit.py`` passes with the new keys.
Negative control: the same check finds the reports of a local campaign in the same Redis."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack
from redis_audit import audit
from sealed_support import FAKES, LOCAL, SHUFFLED, devices, publish_keys, sealed_config

from ldptel import keys, sealing
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import Campaign
from ldptel.mechanisms.rows import from_rows, row_dtype
from ldptel.proto import ReportBatch, SealedBatch
from ldptel.shuffler.held import Held
from ldptel.shuffler.worker import Shuffler


def report_like(camp: Campaign, value: bytes) -> bool:
    """Whether ``value`` reads as at least one report of ``camp``: a ``ReportBatch`` its mechanism
    accepts, or whole rows of its row layout that it accepts."""
    mech = camp.mechanism()
    try:
        batch = ReportBatch.FromString(value)
        if batch.count and batch.WhichOneof("payload"):
            mech.checked_columns(batch)
            return True
    except Exception:  # noqa: BLE001 - not a report batch
        pass
    width = row_dtype(mech).itemsize
    if value and len(value) % width == 0:
        cols, n = from_rows(mech, value)
        try:
            mech.validate_columns(cols, n)
            return True
        except Exception:  # noqa: BLE001 - not rows of this mechanism
            return False
    return False


def mine(camp: Campaign, where: str) -> bool:
    """A value of ``camp``'s keys, or of a key of no campaign (the local campaign's reports are
    reports, of another campaign)."""
    return not where.startswith("{ldptel:") or where.startswith(f"{{ldptel:{camp.name}:")


def values_of(r: redis.Redis) -> list[tuple[str, bytes]]:
    """Every value in the database: strings, hash fields (names and values), stream entry fields,
    and each message of every serialized ``SealedBatch`` found there."""
    out: list[tuple[str, bytes]] = []
    for raw in r.scan_iter(count=1000):
        key = raw.decode()
        kind = r.type(key).decode()
        if kind == "string":
            out.append((key, r.get(key)))
        elif kind == "hash":
            for f, v in r.hgetall(key).items():  # a field name may be data (keys.opened_key: an enc)
                name = f.decode(errors="backslashreplace")
                out += [(f"{key}[{name}]", v), (f"{key}<{name}>", f)]
        elif kind == "stream":
            out += [(f"{key}#{eid.decode()}[{f.decode()}]", v) for eid, fields in r.xrange(key)
                    for f, v in fields.items()]
    for where, value in list(out):
        try:
            env = SealedBatch.FromString(value)
        except Exception:  # noqa: BLE001
            continue
        out += [(f"{where}.messages[{i}]", m) for i, m in enumerate(env.messages)]
    return out


@pytest.mark.slow
def test_nothing_decryptable_outside_the_aggregator(redis_client: redis.Redis, redis_url: str,
                                                    tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = sealed_config(tmp_path, [FAKES, SHUFFLED, LOCAL])
    ring = publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    caplog.set_level(logging.DEBUG)
    try:
        rng = np.random.default_rng(9)
        devices(stack, tmp_path, "f", "sf-hist", rng.integers(0, 16, 400))
        devices(stack, tmp_path, "g", "sh-grr", rng.integers(0, 8, 350), seed=1)
        devices(stack, tmp_path, "l", "loc-grr", rng.integers(0, 8, 50), seed=2)
    finally:
        stack.close()
    sealed = [cfg.campaign("sf-hist"), cfg.campaign("sh-grr")]
    assert all(c is not None for c in sealed)
    # in ingress (the collector's writes): ciphertext of the exact length, none a report
    checked = 0
    for where, value in values_of(redis_client):
        for camp in sealed:
            assert not (mine(camp, where) and report_like(camp, value)), f"{where}: a report of {camp.name}"
        checked += 1
    assert checked > 1000
    # the shuffler holds envelopes of ciphertext only
    shuffler = Shuffler(cfg, redis_client)
    for camp in sealed:
        shuffler.read(shuffler.held.setdefault((camp.name, 0), Held(camp.name, 0)))
    held = [(h.campaign, g) for h in shuffler.held.values() for g in h.groups.values() if g.sealed]
    assert sum(len(g.sizes) for _, g in held) == 750  # envelopes: one device each
    for name, g in held:  # held as their sealed messages only (issue 38: compact)
        camp = cfg.campaign(name)
        size = sealing.ciphertext_length(row_dtype(camp.mechanism()).itemsize)
        assert all(len(m) == size and not report_like(camp, m) for m in g.messages)
        kid = g.key_ids[0]
        assert all(sealing.open_all([m], ring.private[kid], sealing.info(
            name, 1, g.window, kid), size - 48)[1] == 0 for m in g.messages[:3])
    shuffler.held.clear()
    shuffler.run(once=True)
    # the analysis stream: release parts of ciphertext; the aggregator decodes them
    for where, value in values_of(redis_client):
        for camp in sealed:
            assert not (mine(camp, where) and report_like(camp, value)), f"{where}: a report of {camp.name}"
    Worker(cfg, redis_client, log=lambda _m: None).run(once=True)
    assert audit(redis_client, cfg) == []
    for where, value in values_of(redis_client):
        for camp in sealed:
            assert not (mine(camp, where) and report_like(camp, value)), f"{where}: a report of {camp.name}"
    # the logs of every stage
    text = "\n".join(r.getMessage() for r in caplog.records).encode()
    for camp in sealed:
        assert not report_like(camp, text)
    # negative control: the local campaign's reports are found by the same check
    local = cfg.campaign("loc-grr")
    assert any(report_like(local, v) for _, v in values_of(redis_client)
               if keys.stream_key("loc-grr", 0) in _)
