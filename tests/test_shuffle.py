"""The shuffler stage (``ldptel.shuffler``) against the real collector over HTTP and a real Redis:
exactly once (collector → shuffler → aggregator equals a direct decode of every batch sent), two
shufflers racing, the release rules, the re-packed batches, the dedupe marker's rounded expiry,
and a SIGTERM'd ``ldptel shuffle`` that loses nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack, random_batches, run_shuffle, same_state, shuffle_once, write_config

from ldptel import keys
from ldptel.aggregator import store
from ldptel.aggregator.worker import Worker
from ldptel.mechanisms.randomness import OS_RANDOM, permutation
from ldptel.proto import ReportBatch
from ldptel.shuffler.held import Held
from ldptel.shuffler.repack import split_sizes
from ldptel.shuffler.worker import Shuffler
from ldptel.store import scripts, tally

CAMPAIGNS = [
    {"name": "s-grr", "oracle": "grr", "epsilon": 1.0, "domain_size": 12, "shards": 2},
    {"name": "s-oue", "oracle": "oue", "epsilon": 1.0, "domain_size": 30, "window": "1h"},
    {"name": "s-had", "oracle": "hadamard", "epsilon": 1.0, "domain_size": 20},
    {"name": "s-rap", "oracle": "rappor", "bloom_bits": 32, "hashes": 2, "cohorts": 4, "f": 0.25,
     "p": 0.35, "q": 0.65, "candidates": [f"c{i}" for i in range(12)]},
    {"name": "s-num", "kind": "numeric", "mechanism": "piecewise", "epsilon": 1.0, "lower": 0.0,
     "upper": 10.0},
]


def entries(r: redis.Redis, key: str) -> list:
    return r.xrange(key)


def in_ingress(r: redis.Redis, camp) -> int:
    return sum(r.xlen(keys.ingress_key(camp.name, s)) for s in range(camp.shards))


def direct_decode(camp, batches: list[ReportBatch]):
    acc = store.new_accumulator(camp)
    for b in batches:
        acc.add(b)
    return acc


def equal_state(a, b) -> bool:
    """Equal accumulator states: integer arrays exactly (counts are order-free), float sums (the
    numeric kind's Σy, Σy²) to 1e-12 relative (summed in another order)."""
    if a.state.keys() != b.state.keys():
        return False
    return all(np.array_equal(a.state[k], b.state[k]) if np.asarray(a.state[k]).dtype.kind in "iub"
               else np.allclose(a.state[k], b.state[k], rtol=1e-12, atol=0) for k in a.state)


def post_all(stack: HttpStack, batches: list[ReportBatch]) -> int:
    return sum(stack.post_batch(b)["accepted"] for b in batches)


def numeric_batches(camp, n: int, per: int, seed: int) -> list[ReportBatch]:
    mech = camp.mechanism()
    rng = np.random.default_rng(seed)
    return [mech.encode_batch(rng.uniform(0, 10, size=per), rng=rng, campaign=camp.name)
            for _ in range(n // per)]


@pytest.fixture
def stack(redis_client: redis.Redis, redis_url: str, tmp_path: Path):
    cfg = write_config(tmp_path / "c.toml", CAMPAIGNS, shuffler={"batch_reports": 300})
    s = HttpStack(cfg, redis_url)
    yield cfg, s
    s.close()


def sent_batches(cfg) -> dict[str, list[ReportBatch]]:
    out = {}
    for i, camp in enumerate(cfg.campaigns):
        if camp.kind == "numeric":
            out[camp.name] = numeric_batches(camp, 1500, 50, seed=i)
        else:  # uneven batch sizes: 1 … 97 reports
            sizes = [1 + (7 * k) % 97 for k in range(40)]
            pool = random_batches(camp, sum(sizes), sum(sizes), seed=i)[0]
            mech = camp.mechanism()
            cols = mech.columns(pool)
            out[camp.name] = []
            start = 0
            for size in sizes:
                part = {k: (v[start:start + size] if len(v) == pool.count else v) for k, v in cols.items()}
                out[camp.name].append(mech.pack(part, size, camp.name))
                start += size
    return out


def test_exactly_once_through_the_shuffler(stack, redis_client: redis.Redis) -> None:
    """Every batch POSTed to the collector lands in ingress (not in the analysis stream); one
    drain moves every report, re-packed into batches of ≈ ``batch_reports`` without batch ids,
    and the aggregated state equals a direct decode of the batches sent, per campaign."""
    cfg, s = stack
    sent = sent_batches(cfg)
    for camp in cfg.campaigns:
        assert post_all(s, sent[camp.name]) == sum(b.count for b in sent[camp.name])
        assert in_ingress(redis_client, camp) == len(sent[camp.name])
        assert all(redis_client.xlen(keys.stream_key(camp.name, sh)) == 0 for sh in range(camp.shards))
    stats = shuffle_once(cfg, redis_client)
    assert stats.refused == 0
    assert stats.ingress_reports == sum(b.count for bs in sent.values() for b in bs)
    Worker(cfg, redis_client).run(once=True)
    for camp in cfg.campaigns:
        assert in_ingress(redis_client, camp) == 0
        window = tally.list_windows(redis_client, camp)
        assert len(window) == 1
        acc, n = store.load_accumulator(redis_client, camp, window[0])
        assert n == sum(b.count for b in sent[camp.name])
        assert equal_state(acc, direct_decode(camp, sent[camp.name])), camp.name
        counters = {"analysis_reports": 0, "ingress_reports": 0, "ingress_batches": 0}
        for sh in range(camp.shards):
            got = redis_client.hgetall(keys.shuffle_metrics_key(camp.name, sh))
            for k in counters:
                counters[k] += int(got.get(k.encode(), 0))
            for eid, fields in entries(redis_client, keys.stream_key(camp.name, sh)):
                batch = ReportBatch.FromString(fields[b"batch"])
                assert batch.batch_id == b"" and batch.campaign_version == camp.version
                assert int(eid.split(b"-")[0]) == window[0] * 1000  # the id holds the window only
                assert int(fields[b"count"]) == batch.count <= 300
        assert counters == {"analysis_reports": n, "ingress_reports": n,
                            "ingress_batches": len(sent[camp.name])}


def test_repacked_batch_sizes_are_as_equal_as_possible() -> None:
    assert split_sizes(1000, 300) == [250, 250, 250, 250]
    assert split_sizes(1001, 1000) == [501, 500]
    assert split_sizes(7, 1000) == [7]
    assert split_sizes(0, 10) == []
    p = permutation(OS_RANDOM, 10_000)
    assert sorted(p.tolist()) == list(range(10_000)) and not np.array_equal(p, np.arange(10_000))


def test_two_shufflers_racing_move_every_report_once(stack, redis_client: redis.Redis) -> None:
    """A holds a stream's entries; B (lease or not: a drain ignores it) moves them; A's release
    is refused (nothing written, ``refused`` counted) and A reads the stream again. Then two
    shufflers drain concurrently in threads. Every report is counted exactly once."""
    cfg, s = stack
    camp = cfg.campaign("s-oue")
    first = random_batches(camp, 2000, 100, seed=5)
    post_all(s, first)
    a, b = Shuffler(cfg, redis_client), Shuffler(cfg, redis_client)
    held = Held(camp.name, 0)
    assert a.read(held) == len(first)
    [group] = held.groups.values()
    b.run(once=True)
    assert a.release(held, group, "test") is False
    assert int(redis_client.hget(keys.shuffle_metrics_key(camp.name), "refused")) == 1
    held.reset()
    assert a.read(held) == 0  # it is all in the analysis stream already
    second = random_batches(camp, 6000, 50, seed=6)
    post_all(s, second)
    threads = [threading.Thread(target=x.run, kwargs={"once": True}) for x in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    Worker(cfg, redis_client).run(once=True)
    [window] = tally.list_windows(redis_client, camp)
    acc, n = store.load_accumulator(redis_client, camp, window)
    assert n == 8000 and in_ingress(redis_client, camp) == 0
    assert same_state(acc, direct_decode(camp, first + second))


def rules_config(tmp_path: Path, **camp) -> object:
    base = {"name": "rules", "oracle": "grr", "epsilon": 1.0, "domain_size": 8}
    return write_config(tmp_path / "r.toml", [{**base, **camp}], shuffler={"max_held_reports": 500})


def released(r: redis.Redis) -> int:
    return int(r.hget(keys.shuffle_metrics_key("rules"), "analysis_reports") or 0)


def test_release_rules(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    """A group is held below ``shuffle_min_reports``, released once it reaches it; a group
    below it is released once its first report waited ``shuffle_max_delay`` (1 s); a group is
    released at ``[shuffler] max_held_reports`` (500) whatever the other two say."""
    cfg = rules_config(tmp_path, shuffle_min_reports=100, shuffle_max_delay="1d")
    camp = cfg.campaigns[0]
    s = HttpStack(cfg, redis_url)
    try:
        sh = Shuffler(cfg, redis_client)
        post_all(s, random_batches(camp, 60, 30, seed=1))
        sh.step()
        assert released(redis_client) == 0 and in_ingress(redis_client, camp) == 2
        post_all(s, random_batches(camp, 40, 40, seed=2))
        sh.step()
        assert released(redis_client) == 100 and in_ingress(redis_client, camp) == 0
    finally:
        s.close()
    redis_client.flushdb()
    cfg = rules_config(tmp_path, shuffle_min_reports=100_000, shuffle_max_delay="1s")
    s = HttpStack(cfg, redis_url)
    try:
        sh = Shuffler(cfg, redis_client)
        post_all(s, random_batches(camp, 10, 10, seed=3))
        sh.step()
        assert released(redis_client) == 0
        time.sleep(0.6)
        post_all(s, random_batches(camp, 10, 10, seed=4))
        sh.step()
        assert released(redis_client) == 0  # 0.6 s < 1 s
        time.sleep(0.5)
        sh.step()
        assert released(redis_client) == 20  # the first report waited 1.1 s: the group goes
        post_all(s, random_batches(camp, 499, 499, seed=5))
        sh.step()
        assert released(redis_client) == 20
        post_all(s, random_batches(camp, 1, 1, seed=6))
        sh.step()
        assert released(redis_client) == 520  # 500 held = max_held_reports
    finally:
        s.close()


def test_dedupe_marker_expires_on_a_day_boundary(redis_client: redis.Redis, redis_url: str,
                                                 tmp_path: Path) -> None:
    """The marker's expiry is a multiple of max(window, 1 day), at least 7 days after receipt:
    it reveals the day a batch id was received, not the time."""
    cfg = write_config(tmp_path / "m.toml", [
        {"name": "m-all", "oracle": "grr", "epsilon": 1.0, "domain_size": 8},
        {"name": "m-week", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "window": "8d"}])
    s = HttpStack(cfg, redis_url)
    try:
        for camp, unit in zip(cfg.campaigns, (86400, 8 * 86400), strict=True):
            [batch] = random_batches(camp, 5, 5, seed=1)
            t0 = time.time()
            s.post_batch(batch)
            pttl = redis_client.pttl(keys.seen_key(camp.name, 0, batch.batch_id))
            t1 = time.time()
            at_lo, at_hi = t0 * 1000 + pttl, t1 * 1000 + pttl  # the expiry, epoch ms, within [lo, hi]
            boundary = round(at_hi / (unit * 1000)) * unit * 1000
            assert at_lo - 5 <= boundary <= at_hi + 5, (camp.name, at_lo, at_hi)
            assert pttl >= keys.DEDUPE_TTL_SECONDS * 1000 - 1000
            assert redis_client.get(keys.seen_key(camp.name, 0, batch.batch_id)) == b"1"
    finally:
        s.close()
    assert keys.dedupe_expire_at(86400 * 10 + 5, 0) == 86400 * 18
    assert keys.dedupe_expire_at(86400 * 10, 3600) == 86400 * 17
    assert keys.dedupe_expire_at(86400 * 10, 7 * 86400) == 86400 * 21


def test_shuffle_script_refuses_a_moved_entry(redis_client: redis.Redis) -> None:
    """SHUFFLE with one ingress id that is gone writes nothing (no analysis entry, ingress kept)."""
    ingress, analysis = keys.ingress_key("x"), keys.stream_key("x")
    ok = redis_client.xadd(ingress, {"batch": b"b", "window": 0, "count": 1}, id="0-1")
    res = scripts.of(redis_client).call("SHUFFLE", keys=[ingress, analysis, keys.shuffle_metrics_key("x")],
                                        args=[2, 2, 0, 1, ok, b"0-2", b"new", 2])
    assert res == [b"refused", b"0-2"]
    assert redis_client.xlen(ingress) == 1 and redis_client.xlen(analysis) == 0


@pytest.mark.slow
def test_sigterm_shuffler_loses_nothing(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    """``ldptel shuffle`` holding reports (min 1 000 000, delay 1 d) gets SIGTERM: it exits 0
    within seconds, and everything it held is still in ingress; a drain then moves all of it."""
    cfg = write_config(tmp_path / "t.toml", [
        {"name": "term", "oracle": "grr", "epsilon": 1.0, "domain_size": 8,
         "shuffle_min_reports": 1_000_000, "shuffle_max_delay": "1d"}], shuffler={"poll_ms": 50})
    camp = cfg.campaigns[0]
    s = HttpStack(cfg, redis_url)
    proc = subprocess.Popen([sys.executable, "-m", "ldptel.commands.cli", "shuffle", "--config",
                             str(tmp_path / "t.toml"), "--redis-url", redis_url],
                            stderr=subprocess.PIPE, text=True)
    try:
        sent = random_batches(camp, 3000, 100, seed=9)
        post_all(s, sent)
        deadline = time.monotonic() + 20
        while not redis_client.exists(keys.shuffle_lease_key("term")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # a few rounds: it read and holds everything
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, proc.stderr.read() if proc.stderr else ""
        assert in_ingress(redis_client, camp) == 30 and redis_client.xlen(keys.stream_key("term")) == 0
        assert not redis_client.exists(keys.shuffle_lease_key("term"))  # given up on the way out
        run_shuffle(tmp_path / "t.toml", redis_url)
        Worker(cfg, redis_client).run(once=True)
        acc, n = store.load_accumulator(redis_client, camp, 0)
        assert n == 3000 and same_state(acc, direct_decode(camp, sent))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        s.close()


def test_a_shuffler_reads_a_stream_reset_under_it(stack, redis_client: redis.Redis) -> None:
    """Redis data reset (FLUSHDB) between two rounds of one shuffler: the new stream's ids start
    again at ``0-1``; holding nothing, the shuffler reads it from the start, not after the last id
    it had read."""
    cfg, s = stack
    camp = cfg.campaign("s-had")
    sh = Shuffler(cfg, redis_client)
    post_all(s, random_batches(camp, 300, 100, seed=1))
    assert sh.step(once=True) == 6  # 3 entries read, 3 released
    redis_client.flushdb()
    post_all(s, random_batches(camp, 100, 100, seed=2))
    assert sh.step(once=True) == 2 and in_ingress(redis_client, camp) == 0


def test_entries_of_an_unknown_version_stay_in_ingress(stack, redis_client: redis.Redis) -> None:
    """An ingress entry naming a version neither the config nor the registry knows is left in
    ingress (logged once, however often the shuffler runs); the rest of the stream moves on."""
    cfg, s = stack
    camp = cfg.campaign("s-grr")
    [odd] = random_batches(camp, 10, 10, seed=1)
    odd.campaign_version = 9
    redis_client.xadd(keys.ingress_key(camp.name, 0), {"batch": odd.SerializeToString(), "window": 0,
                                                       "count": 10}, id="0-1")  # a window-start id
    normal = [b for b in random_batches(camp, 200, 20, seed=2) if keys.shard_of(b.batch_id, 2) == 0]
    post_all(s, normal)
    lines: list[str] = []
    sh = Shuffler(cfg, redis_client, log=lines.append)
    sh.run(once=True)
    sh.step(once=True)
    assert redis_client.xlen(keys.ingress_key(camp.name, 0)) == 1
    [(_, left)] = redis_client.xrange(keys.ingress_key(camp.name, 0))
    assert ReportBatch.FromString(left[b"batch"]).campaign_version == 9
    assert int(redis_client.hget(keys.shuffle_metrics_key(camp.name, 0), "ingress_batches")) == len(normal)
    assert sum("unknown version 9" in line for line in lines) == 1, lines
