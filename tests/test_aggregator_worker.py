"""The aggregator worker against a real (embedded) Redis: exactly-once under SIGKILL, concurrent
workers, a Redis restart, lost claims, retention, undecodable entries, windows, config drift."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import (
    aggregate_cmd,
    random_batches,
    reference,
    run_aggregate,
    same_state,
    write_config,
    xadd_batches,
)

from ldptel.aggregator import store
from ldptel.aggregator.worker import Worker
from ldptel.commands import cli
from ldptel.errors import StateMismatch
from ldptel.keys import GROUP, counts_key, field_window, state_key, stream_key
from ldptel.store import tally
from ldptel.store.redis_server import EmbeddedRedis


def counted(r: redis.Redis, name: str, shards: int, window: int = 0) -> int:
    return sum(int(r.hget(counts_key(name, s), f"n:{window}") or 0) for s in range(shards))


def pending(r: redis.Redis, name: str, shards: int) -> int:
    total = 0
    for s in range(shards):
        try:
            total += r.xpending(stream_key(name, s), GROUP)["pending"]
        except redis.ResponseError:
            pass
    return total


def test_drain_per_window_and_store_reads(redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "hourly", "oracle": "oue", "epsilon": 1.0, "domain_size": 40, "window": "1h",
         "shards": 3, "min_reports": 10}], aggregator={"read_count": 7})
    camp = cfg.campaigns[0]
    sent = {}
    for i, w in enumerate((7200, 3600, 10800)):
        sent[w] = xadd_batches(redis_client, camp, random_batches(camp, 3000 + 500 * i, 100, seed=i), w)
    stats = Worker(cfg, redis_client).run(once=True)
    assert stats.entries == sum(n // 100 for n in sent.values())
    assert stats.reports == sum(sent.values())
    ref = reference(redis_client, camp)
    assert tally.list_windows(redis_client, camp) == [3600, 7200, 10800]
    assert tally.window_counts(redis_client, camp) == dict(sorted(sent.items()))
    for w, n in sent.items():
        acc, got = store.load_accumulator(redis_client, camp, w)
        assert got == n and same_state(acc, ref[w])
    assert tally.resolve_window(redis_client, camp, "latest") == 10800
    assert tally.resolve_window(redis_client, camp, None) == 10800
    assert tally.resolve_window(redis_client, camp, "3600") == 3600
    for bad in ("1800", "-3600", "abc", "1e4", "99999999999999"):
        with pytest.raises(tally.WindowError):
            tally.resolve_window(redis_client, camp, bad)
    assert store.load_accumulator(redis_client, camp, 0)[1] == 0
    assert tally.last_updated(redis_client, camp) is not None
    # one accumulator field per (shard, window) after compaction
    for s in range(3):
        fields = [f for f in redis_client.hkeys(state_key(camp.name, s)) if f.startswith(b"acc:")]
        assert len(fields) == len({field_window(f) for f in fields})
    assert pending(redis_client, camp.name, 3) == 0


def test_claimed_entries_are_not_committed_by_the_slow_worker(redis_client: redis.Redis,
                                                               tmp_path: Path) -> None:
    """A reads entries, B claims them (A looked dead) and commits; A's late commit is refused,
    so each entry is counted once, by B."""
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "race", "oracle": "grr", "epsilon": 1.0, "domain_size": 8}],
        aggregator={"read_count": 50, "claim_idle_ms": 1})
    camp = cfg.campaigns[0]
    total = xadd_batches(redis_client, camp, random_batches(camp, 2000, 100, seed=1))
    a, b = Worker(cfg, redis_client, consumer="A"), Worker(cfg, redis_client, consumer="B")
    a.setup()
    slot = a.slots[0]
    resp = redis_client.xreadgroup(GROUP, "A", {slot.stream: ">"}, count=8)
    entries = resp[0][1]
    time.sleep(0.01)
    b.run(once=True)  # claims A's 8 pending entries (idle > 1 ms) and drains everything
    assert counted(redis_client, camp.name, 1) == total
    assert a.process(slot, entries) == 0 and a.stats.lost == 1
    assert counted(redis_client, camp.name, 1) == total
    a.run(once=True)
    acc, n = store.load_accumulator(redis_client, camp, 0)
    assert n == total and same_state(acc, reference(redis_client, camp)[0])


def test_once_finishes_its_own_pending_after_a_lost_commit(redis_client: redis.Redis,
                                                           tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "part", "oracle": "grr", "epsilon": 1.0, "domain_size": 8}],
        aggregator={"read_count": 50, "claim_idle_ms": 60_000})
    camp = cfg.campaigns[0]
    total = xadd_batches(redis_client, camp, random_batches(camp, 2000, 100, seed=13))
    a = Worker(cfg, redis_client, consumer="A")
    a.setup()
    slot = a.slots[0]
    entries = redis_client.xreadgroup(GROUP, "A", {slot.stream: ">"}, count=8)[0][1]
    redis_client.xclaim(slot.stream, GROUP, "B", 0, [e[0] for e in entries[:3]])
    assert a.process(slot, entries) == 0  # 3 of its entries now belong to B: nothing committed
    a.run(once=True)  # its 5 remaining pending entries and all new ones, before exiting
    assert redis_client.xpending_range(slot.stream, GROUP, "-", "+", 10, consumername="A") == []
    assert counted(redis_client, "part", 1) == total - 300
    Worker(cfg, redis_client, consumer="B").run(once=True)  # B's own 3
    acc, n = store.load_accumulator(redis_client, camp, 0)
    assert n == total and same_state(acc, reference(redis_client, camp)[0])


def test_concurrent_compaction_retries(redis_client: redis.Redis, tmp_path: Path) -> None:
    """A field replaced by another worker between read and commit makes the commit retry."""
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "cc", "oracle": "hadamard", "epsilon": 1.0, "domain_size": 30}])
    camp = cfg.campaigns[0]
    a, b = Worker(cfg, redis_client, consumer="A"), Worker(cfg, redis_client, consumer="B")
    xadd_batches(redis_client, camp, random_batches(camp, 1000, 100, seed=2))
    b.run(once=True)
    slot = a.slots[0]
    a.setup()
    xadd_batches(redis_client, camp, random_batches(camp, 500, 100, seed=3))
    entries = redis_client.xreadgroup(GROUP, "A", {slot.stream: ">"}, count=100)[0][1]
    real_hmget = redis_client.hmget
    calls = []

    def hmget_then_compact(*args, **kwargs):  # B commits (replacing the field) right after A reads
        out = real_hmget(*args, **kwargs)
        if not calls:
            calls.append(1)
            xadd_batches(redis_client, camp, random_batches(camp, 300, 100, seed=4))
            b.run(once=True)
        return out

    redis_client.hmget = hmget_then_compact
    try:
        assert a.process(slot, entries) == len(entries)
    finally:
        redis_client.hmget = real_hmget
    acc, n = store.load_accumulator(redis_client, camp, 0)
    assert n == 1800 and same_state(acc, reference(redis_client, camp)[0])


def _cli_silently(argv: list[str]) -> None:
    """Child of a fork: the ``ldptel`` CLI entry point with stdout/stderr discarded."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os._exit(cli.main(argv))


@pytest.mark.slow
def test_fault_sigkill_while_draining(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    """200 000 reports; the real worker process is SIGKILLed at random points ≥ 20 times while it
    drains and restarted; the result equals an uninterrupted run over the same entries.

    Every fifth worker is a fresh ``ldptel aggregate --once`` process killed at a random time
    (start-up included); the others are forked from this (already imported) process running the
    same CLI entry point, so that 20+ restarts do not cost 20+ interpreter start-ups, and are
    killed at a random point after their first commit."""
    agg = {"read_count": 3, "claim_idle_ms": 50, "block_ms": 50}
    params = {"oracle": "grr", "epsilon": 1.0, "domain_size": 16, "shards": 2}
    cfg = write_config(tmp_path / "fault.toml", [{"name": "fault", **params}], aggregator=agg)
    ref_cfg = write_config(tmp_path / "ref.toml", [{"name": "ref", **params}], aggregator=agg)
    camp, ref_camp = cfg.campaigns[0], ref_cfg.campaigns[0]
    batches = random_batches(camp, 200_000, 50, seed=5)
    accepted = xadd_batches(redis_client, camp, batches)
    xadd_batches(redis_client, ref_camp, batches)
    assert accepted == 200_000

    argv = ["aggregate", "--config", str(tmp_path / "fault.toml"), "--redis-url", redis_url, "--once"]
    fork = multiprocessing.get_context("fork")
    rnd = random.Random(11)
    kills_draining = kills_early = spawns = 0
    while kills_draining < 20:
        spawns += 1
        assert spawns < 80, "could not kill the worker 20 times while draining"
        before = counted(redis_client, "fault", 2)
        assert before < accepted, f"drain finished after only {kills_draining} kills"
        if spawns % 5 == 1:  # a fresh process, killed at a random time (often during start-up)
            proc = subprocess.Popen(aggregate_cmd(tmp_path / "fault.toml", redis_url),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + rnd.uniform(0.0, 2.0)
            while time.monotonic() < deadline and counted(redis_client, "fault", 2) == before:
                time.sleep(0.002)
            if time.monotonic() < deadline:  # it is draining already: kill it soon
                time.sleep(rnd.uniform(0.0, 0.04))
            kills_early += proc.poll() is None
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            continue
        child = fork.Process(target=_cli_silently, args=(argv,))
        child.start()
        deadline = time.monotonic() + 20
        while counted(redis_client, "fault", 2) == before and child.is_alive():
            assert time.monotonic() < deadline, "a worker made no progress in 20 s"
            time.sleep(0.002)
        time.sleep(rnd.uniform(0.0, 0.04))  # a random point of the drain
        kills_draining += child.is_alive()
        child.kill()  # SIGKILL
        child.join()
    assert counted(redis_client, "fault", 2) < accepted  # the last kill left work to do

    time.sleep(0.06)  # the dead consumers' entries become claimable
    run_aggregate(tmp_path / "fault.toml", redis_url)
    Worker(ref_cfg, redis_client).run(once=True)  # the uninterrupted run

    acc, n = store.load_accumulator(redis_client, camp, 0)
    ref_acc, ref_n = store.load_accumulator(redis_client, ref_camp, 0)
    assert n == accepted == ref_n
    assert same_state(acc, ref_acc) and same_state(acc, reference(redis_client, camp)[0])
    est, ref_est = acc.estimate(), ref_acc.estimate()
    assert np.array_equal(est.counts, ref_est.counts) and np.array_equal(est.normalized, ref_est.normalized)
    assert pending(redis_client, "fault", 2) == 0
    entries = sum(int(redis_client.hget(counts_key("fault", s), "entries:0") or 0) for s in range(2))
    assert entries == len(batches)


@pytest.mark.slow
def test_two_workers_at_once_equal_one(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    """Two ``ldptel aggregate --once`` processes on the same streams leave the state one worker
    leaves. A worker that starts late (a loaded machine: seconds of imports) may find the streams
    drained by the other; such a round proves nothing about two workers at once, so it is run
    again on a fresh campaign (at most 4 rounds; each round's state is checked either way)."""
    agg = {"read_count": 4, "claim_idle_ms": 40}  # short idle: they also steal from each other
    params = {"oracle": "sue", "epsilon": 2.0, "domain_size": 50, "shards": 2}
    cfg = write_config(tmp_path / "one.toml", [{"name": "one", **params}], aggregator=agg)
    batches = random_batches(cfg.campaigns[0], 30_000, 25, seed=6)
    xadd_batches(redis_client, cfg.campaigns[0], batches)
    Worker(cfg, redis_client).run(once=True)
    one_acc, one_n = store.load_accumulator(redis_client, cfg.campaigns[0], 0)
    rounds: list[list[int]] = []
    for attempt in range(4):
        name = f"two-{attempt}"
        two_cfg = write_config(tmp_path / f"{name}.toml", [{"name": name, **params}], aggregator=agg)
        two = two_cfg.campaigns[0]
        total = xadd_batches(redis_client, two, batches)
        cmd = aggregate_cmd(tmp_path / f"{name}.toml", redis_url)
        procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        outs = [p.communicate(timeout=90)[1] for p in procs]  # the log lines are on stderr
        assert all(p.returncode == 0 for p in procs), outs
        rounds.append([int(out.split("drained ")[1].split()[0]) for out in outs])
        time.sleep(0.05)  # entries a worker left pending are idle past claim_idle_ms (40 ms)
        # picks them up: the same worker in this (already imported) process, not a third
        # interpreter start-up per round
        Worker(two_cfg, redis_client).run(once=True)
        acc, n = store.load_accumulator(redis_client, two, 0)
        assert n == one_n == total and same_state(acc, one_acc)
        assert pending(redis_client, name, 2) == 0
        if all(d > 0 for d in rounds[-1]):
            break
    assert all(d > 0 for d in rounds[-1]), f"both workers must have drained something: {rounds}"


@pytest.mark.integration  # its own Redis, restarted
def test_redis_restart_between_ingest_and_aggregation(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "persist", "oracle": "olh", "epsilon": 1.0, "domain_size": 64}])
    camp = cfg.campaigns[0]
    batches = random_batches(camp, 20_000, 500, seed=7)
    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    try:
        r = redis.Redis.from_url(server.url)
        total = xadd_batches(r, camp, batches)
        ref = reference(r, camp)[0]
        r.close()
        server.stop()  # graceful: SHUTDOWN writes the AOF
        server = EmbeddedRedis(data_dir=tmp_path / "redis", port=server.port).start()
        r = redis.Redis.from_url(server.url)
        Worker(cfg, r).run(once=True)
        acc, n = store.load_accumulator(r, camp, 0)
        assert n == total and same_state(acc, ref)
        # and the aggregated state survives a restart too
        r.close()
        server.stop()
        server = EmbeddedRedis(data_dir=tmp_path / "redis", port=server.port).start()
        r = redis.Redis.from_url(server.url)
        acc, n = store.load_accumulator(r, camp, 0)
        assert n == total and same_state(acc, ref)
        r.close()
    finally:
        server.cleanup()


@pytest.mark.slow
def test_worker_survives_a_redis_restart_while_draining(tmp_path: Path) -> None:
    """A running worker (thread) loses its connection mid-drain, Redis restarts on the same data
    dir, the worker reconnects and counts everything once (the AOF holds stream, PEL and state)."""
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "bounce", "oracle": "hadamard", "epsilon": 1.0, "domain_size": 64}],
        aggregator={"read_count": 2, "block_ms": 50})
    camp = cfg.campaigns[0]
    batches = random_batches(camp, 60_000, 50, seed=14)
    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    stop = threading.Event()
    try:
        r = redis.Redis.from_url(server.url)
        total = xadd_batches(r, camp, batches)
        ref = reference(r, camp)[0]
        worker = Worker(cfg, redis.Redis.from_url(server.url, socket_timeout=5), log=lambda _m: None)
        thread = threading.Thread(target=worker.run, kwargs={"stop": stop}, daemon=True)
        thread.start()
        while counted(r, "bounce", 1) == 0:
            time.sleep(0.005)
        r.close()
        server.stop()  # graceful; the worker is somewhere in its drain
        server = EmbeddedRedis(data_dir=tmp_path / "redis", port=server.port).start()
        r = redis.Redis.from_url(server.url)
        assert 0 < counted(r, "bounce", 1) < total
        more = xadd_batches(r, camp, random_batches(camp, 5000, 50, seed=15))
        deadline = time.monotonic() + 30
        while counted(r, "bounce", 1) < total + more:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.02)
        stop.set()
        thread.join(10)
        acc, n = store.load_accumulator(r, camp, 0)
        assert n == total + more and same_state(acc, reference(r, camp)[0])
        assert pending(r, "bounce", 1) == 0 and ref.n == total
        r.close()
    finally:
        stop.set()
        server.cleanup()


def test_trim_keeps_pending_and_undelivered(redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "trim", "oracle": "grr", "epsilon": 1.0, "domain_size": 8}],
        aggregator={"retention_seconds": 0, "read_count": 100})
    camp = cfg.campaigns[0]
    key = stream_key("trim", 0)
    xadd_batches(redis_client, camp, random_batches(camp, 1000, 100, seed=8))
    w = Worker(cfg, redis_client)
    w.run(once=True)
    assert redis_client.xlen(key) == 0  # everything acknowledged and older than 0 s
    xadd_batches(redis_client, camp, random_batches(camp, 500, 100, seed=9))
    redis_client.xreadgroup(GROUP, "other", {key: ">"}, count=2)  # 2 pending to another consumer
    xadd_batches(redis_client, camp, random_batches(camp, 300, 100, seed=10))  # undelivered
    assert w.trim() == 0 and redis_client.xlen(key) == 8
    w.step()  # reads and commits the 6 new entries, the 2 pending stay with "other"
    w.trim()
    assert redis_client.xlen(key) == 8  # the oldest entry is pending: nothing after it is trimmed
    redis_client.xack(key, GROUP, *[e[0] for e in redis_client.xrange(key, count=2)])
    w.trim()
    assert redis_client.xlen(key) == 0


def test_retention_counts_from_delivery_not_from_entry_ids(redis_client: redis.Redis, tmp_path: Path) -> None:
    """Entry ids are window starts (0-<n> for the "all" window), not receive times: acknowledged
    entries are still kept retention_seconds after they were delivered."""
    from ldptel.aggregator.upkeep import DeliveryMarks
    from ldptel.store import scripts

    cfg = write_config(tmp_path / "c.toml", [
        {"name": "kept", "oracle": "grr", "epsilon": 1.0, "domain_size": 8}],
        aggregator={"retention_seconds": 3600, "read_count": 100})
    camp = cfg.campaigns[0]
    key = stream_key("kept", 0)
    run = scripts.of(redis_client)
    for i, b in enumerate(random_batches(camp, 300, 100, seed=12)):
        run.call("INGEST", keys=[f"seen-{i}", key, "m", f"{key}_top"], args=[60, b.SerializeToString(), 0,
                                                                           b.count])
    w = Worker(cfg, redis_client)
    w.run(once=True)
    assert w.trim() == 0 and redis_client.xlen(key) == 3  # acknowledged, but delivered just now
    marks = DeliveryMarks(3600)
    assert marks.expired("s", 0.0, (0, 4)) is None
    assert marks.expired("s", 1800.0, (0, 9)) is None
    assert marks.expired("s", 3600.0, (0, 12)) == (0, 4)
    assert marks.expired("s", 5400.0, (0, 20)) == (0, 9)


def test_undecodable_entry_is_skipped_and_counted(redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "bad", "oracle": "oue", "epsilon": 1.0, "domain_size": 16}])
    camp = cfg.campaigns[0]
    good = random_batches(camp, 600, 100, seed=11)
    xadd_batches(redis_client, camp, good[:3])
    redis_client.xadd(stream_key("bad", 0), {"batch": b"\xff\x00garbage", "window": 0, "count": 5})
    wrong = camp.mechanism().encode_batch(np.arange(16), rng=np.random.default_rng(1))
    wrong.unary.bits = wrong.unary.bits[:-1]  # wrong row length
    xadd_batches(redis_client, camp, [wrong])
    xadd_batches(redis_client, camp, good[3:])
    logs: list[str] = []
    stats = Worker(cfg, redis_client, log=logs.append).run(once=True)
    assert stats.rejected == 2 and stats.reports == 600
    acc, n = store.load_accumulator(redis_client, camp, 0)
    ref = store.new_accumulator(camp)
    for b in good:
        ref.add(b)
    assert n == 600 and same_state(acc, ref)
    assert int(redis_client.hget(counts_key("bad", 0), "rejected")) == 2
    assert sum("skipped" in m for m in logs) == 2


def test_changed_campaign_parameters_stop_the_worker(redis_client: redis.Redis, tmp_path: Path) -> None:
    camp = {"name": "drift", "oracle": "grr", "epsilon": 1.0, "domain_size": 8}
    cfg = write_config(tmp_path / "a.toml", [camp])
    xadd_batches(redis_client, cfg.campaigns[0], random_batches(cfg.campaigns[0], 500, 100, seed=12))
    Worker(cfg, redis_client).run(once=True)
    changed = write_config(tmp_path / "b.toml", [{**camp, "domain_size": 9}])
    with pytest.raises(StateMismatch, match="drift"):
        Worker(changed, redis_client).run(once=True)


def test_heavy_hitter_table_is_not_rewritten_on_every_small_commit(redis_client: redis.Redis,
                                                                  tmp_path: Path) -> None:
    """The heavy-hitter state is a dense count table once many reports are in, but a commit of a
    few reports stores only its non-zero cells; size-tiered folding compares stored sizes, so
    small commits gather in small fields beside the big one instead of rewriting it each time.
    The window's state stays the exact sum of everything committed."""
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "words", "kind": "heavy_hitters", "epsilon": 4.0, "max_length": 4,
         "pool_size": 256}], aggregator={"read_count": 1000})
    camp = cfg.campaigns[0]
    mech = camp.mechanism()
    rng = np.random.default_rng(8)
    words = np.array(["ab", "abcd", "x", "zz", "q"], dtype=object)
    bulk = [mech.encode_batch(words[rng.integers(0, 5, 1000)], rng=rng, campaign=camp.name)
            for _ in range(60)]
    xadd_batches(redis_client, camp, bulk)
    Worker(cfg, redis_client).run(once=True)
    small = [mech.encode_batch(words[rng.integers(0, 5, 20)], rng=rng, campaign=camp.name)
             for _ in range(30)]
    xadd_batches(redis_client, camp, small)
    one = dataclasses.replace(cfg, aggregator=dataclasses.replace(cfg.aggregator, read_count=1))
    stats = Worker(one, redis_client).run(once=True)  # one commit per batch
    assert stats.commits == 30
    fields = {f: redis_client.hstrlen(state_key(camp.name, 0), f)
              for f in redis_client.hkeys(state_key(camp.name, 0)) if f.startswith(b"acc:")}
    sizes = sorted(fields.values())
    assert 2 <= len(fields) <= 6, sizes  # the dense table plus O(log) small fields
    assert sizes[0] < 0.2 * sizes[-1], sizes
    acc, n = store.load_accumulator(redis_client, camp, 0)
    assert n == 60 * 1000 + 30 * 20 and same_state(acc, reference(redis_client, camp)[0])
