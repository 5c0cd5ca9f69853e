"""Retention (``campaigns[].retention``): expired windows' state and publications are deleted by
the aggregator's upkeep, entries of an expired window are never counted nor bring it back, and
the collector-vs-aggregator lag stays right after the counters are gone. Real Redis, the real
worker, stream entries written as the collector writes them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from agg_support import random_batches, write_config, xadd_batches

from ldptel import keys
from ldptel.aggregator import retention
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import ConfigError, parse_config
from ldptel.store import published, tally

CAMP = {"name": "ticks", "oracle": "grr", "epsilon": 2.0, "domain": ["a", "b", "c"], "window": "10s",
        "min_reports": 50}
SERVER = {"ingest_tokens": ["ingest-token-1"], "export_tokens": ["export-token-1"]}


@pytest.mark.parametrize("value, message", [
    ("1x", "must be a duration"), (30, "must be a duration"), ("5s", "at least the window length (10s)"),
])
def test_bad_retention_names_the_key(value: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"server": SERVER, "campaigns": [{**CAMP, "retention": value}]})
    assert str(err.value).startswith("campaigns[ticks].retention: ") and message in str(err.value)
    with pytest.raises(ConfigError, match=r"campaigns\[ticks\]\.retention: needs windows of a fixed length"):
        parse_config({"server": SERVER, "campaigns": [{**CAMP, "window": "all", "retention": "1d"}]})
    camp = parse_config({"server": SERVER, "campaigns": [{**CAMP, "retention": "90d"}]}).campaigns[0]
    assert camp.retention_seconds == 90 * 86400
    assert parse_config({"server": SERVER, "campaigns": [CAMP]}).campaigns[0].retention_seconds is None


def test_expired_boundary() -> None:
    camp = parse_config({"server": SERVER, "campaigns": [{**CAMP, "retention": "30s"}]}).campaigns[0]
    # window [100, 110) ended at 110; expired from 110 + 30 on
    assert not retention.expired(camp, 100, now=139.9) and retention.expired(camp, 100, now=140.0)
    plain = parse_config({"server": SERVER, "campaigns": [CAMP]}).campaigns[0]
    assert not retention.expired(plain, 0, now=1e12)


def test_expired_windows_are_deleted_and_never_come_back(tmp_path: Path, redis_client: redis.Redis) -> None:
    plain_cfg = write_config(tmp_path / "plain.toml", [CAMP])
    cfg = write_config(tmp_path / "kept.toml", [{**CAMP, "retention": "30s"}])
    camp, plain = cfg.campaigns[0], plain_cfg.campaigns[0]
    cur = int(time.time()) // 10 * 10
    old, older = cur - 100, cur - 200  # ended 90 s and 190 s ago: past a 30 s retention
    for seed, w in enumerate((older, old, cur)):
        xadd_batches(redis_client, plain, random_batches(plain, 200, 50, seed=seed), window=w)
    Worker(plain_cfg, redis_client).run(once=True)  # counted while nothing expires
    assert tally.window_counts(redis_client, camp) == {older: 200, old: 200, cur: 200}
    kept = published.read(redis_client, camp, cur)
    assert kept is not None and kept.doc is not None

    assert retention.expire(redis_client, plain) == []  # no retention: nothing is deleted
    assert sorted(retention.expire(redis_client, camp)) == [older, old]
    assert tally.window_counts(redis_client, camp) == {cur: 200}
    assert published.read(redis_client, camp, old) is None
    assert published.read(redis_client, camp, older) is None
    fields = [f.decode() for f in redis_client.hkeys(keys.state_key("ticks"))]
    assert not [f for f in fields if f":{old}" in f or f":{older}" in f], fields
    assert published.read(redis_client, camp, cur).digest == kept.digest  # the live window untouched
    summ = tally.summary(redis_client, camp)
    assert (summ.backlog, summ.lag_entries, summ.lag_reports) == (0, 0, 0)  # expired counts kept

    # late entries of an expired window (a slow delivery, a replay) are rejected, never counted
    xadd_batches(redis_client, camp, random_batches(camp, 100, 50, seed=9), window=old)
    worker = Worker(cfg, redis_client)
    worker.run(once=True)
    assert tally.window_counts(redis_client, camp) == {cur: 200}
    summ = tally.summary(redis_client, camp)
    assert summ.rejected == 2 and summ.backlog == 0 and summ.lag_entries == 0
    worker.publisher.note(camp, old)  # noted for publication: dropped, never re-created
    worker.publisher.due(drained=True, everything=True)
    assert published.read(redis_client, camp, old) is None
    assert retention.expire(redis_client, camp) == []
