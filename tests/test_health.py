"""The pieces of ``/healthz`` and the operator pages' aggregator line, on a real Redis: heartbeats
(written, read, pruned, removed on a clean stop), how heartbeats become the aggregator's status
and lag, and "no aggregator has committed for N s". The processes and faults are in
test_supervise.py."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
import tomllib

import numpy as np
import pytest
from agg_support import shuffle_once
from http_support import Poster
from ingest_support import INGEST_TOKEN, config_text

from ldptel import keys
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import load_config, parse_config
from ldptel.client import create_mechanism
from ldptel.server.health import aggregator_gauges, aggregator_status
from ldptel.server.pages.status import campaign_status, status_view
from ldptel.server.probe import IngestRates, Snapshot
from ldptel.store import heartbeat


def test_heartbeats_read_prune_forget(redis_client):
    now = time.time()
    heartbeat.beat(redis_client, "host:123:abc", committed=now - 5, caught_up=None, now=now)
    heartbeat.beat(redis_client, "host:456:def", committed=None, caught_up=now - 1, now=now - 2 * 86400)
    redis_client.hset(keys.HEARTBEAT_KEY, "junk", "not a beat")
    beats = {b.consumer: b for b in heartbeat.read(redis_client)}
    assert set(beats) == {"host:123:abc", "host:456:def"}
    fresh = beats["host:123:abc"]
    assert fresh.pid == 123 and abs(fresh.at - now) < 0.002 and fresh.caught_up is None
    assert fresh.committed is not None and abs(fresh.committed - (now - 5)) < 0.002
    assert heartbeat.prune(redis_client, now) == 1  # silent for two days
    heartbeat.forget(redis_client, "host:123:abc")
    assert [b.consumer for b in heartbeat.read(redis_client)] == []


def test_a_running_worker_beats_and_forgets_on_stop(redis_client, redis_url, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(config_text(extra="[aggregator]\nblock_ms = 50\n"))
    worker = Worker(load_config(cfg), redis_client)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, kwargs={"stop": stop})
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not heartbeat.read(redis_client):
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.02)
        (beat,) = heartbeat.read(redis_client)
        assert beat.pid == os.getpid() and beat.consumer == worker.consumer
        assert beat.caught_up is not None and time.time() - beat.caught_up < 5
    finally:
        stop.set()
        thread.join(10)
    assert heartbeat.read(redis_client) == []


def beat(age: float, caught_up_age: float | None, committed_age: float | None = None,
         now: float = 1e9) -> heartbeat.Beat:
    return heartbeat.Beat("h:1:x", now - age, None if committed_age is None else now - committed_age,
                          None if caught_up_age is None else now - caught_up_age)


@pytest.mark.parametrize(("beats", "supervised", "expected"), [
    ([beat(0.5, 1.0)], True, "ok"),
    ([beat(0.5, 301.0)], True, "lagging"),  # fresh, but has not drained the streams for 301 s
    ([beat(0.5, 301.0), beat(0.2, 2.0)], True, "ok"),  # another worker drained them 2 s ago
    ([beat(2.7, 3.0)], True, "down"),  # stale: 3 blocking reads of 0.2 s + 2 s grace
    ([], True, "down"),
    ([beat(0.5, 301.0)], False, "external"),  # informational without a supervised aggregator
    ([beat(2.7, 3.0)], False, "none"),
])
def test_aggregator_status_from_heartbeats(beats, supervised, expected):
    gauges = aggregator_gauges(Snapshot(taken=1e9, redis_ok=True, beats=beats), block_ms=200, now=1e9)
    assert aggregator_status(gauges, max_lag=300, supervised=supervised) == expected


def test_aggregator_gauges():
    snap = Snapshot(taken=1e9, redis_ok=True, beats=[beat(0.5, 4.0, 7.0), beat(60, 1.0, 2.0)])
    gauges = aggregator_gauges(snap, block_ms=200, now=1e9)
    # the stale worker's commit counts as the last commit, not its caught-up time for the lag
    assert gauges == pytest.approx({"workers": 1, "heartbeat_age_seconds": 0.5,
                                    "last_commit_age_seconds": 2.0, "lag_seconds": 4.0})


def test_max_aggregator_lag_is_validated():
    base = '[[campaigns]]\nname = "ok"\noracle = "grr"\nepsilon = 1.0\ndomain_size = 4\n'
    assert parse_config(tomllib.loads(base)).server.max_aggregator_lag_seconds == 300
    good = tomllib.loads("[server]\nmax_aggregator_lag_seconds = 30\n" + base)
    assert parse_config(good).server.max_aggregator_lag_seconds == 30
    for bad in ("0", "true", '"30"', "1.5", "20000000"):
        with pytest.raises(ValueError, match=r"^server\.max_aggregator_lag_seconds: must be an integer"):
            parse_config(tomllib.loads(f"[server]\nmax_aggregator_lag_seconds = {bad}\n" + base))


def test_pages_say_no_aggregator_has_committed(collector, redis_client):
    config = load_config(collector.config_path)
    camp = config.campaign("olh")
    assert camp is not None
    mech = create_mechanism("olh", epsilon=1.0, domain_size=1024)
    poster = Poster(collector.url)

    def post(seed: int) -> None:
        batch = mech.encode_batch(np.arange(4), rng=np.random.default_rng(seed), campaign="olh")
        assert poster.post(batch.SerializeToString(), token=INGEST_TOKEN)[0] == 202

    rates = IngestRates()
    post(1)
    st = campaign_status(redis_client, camp, rates)
    assert st.quiet == "no aggregator has committed yet"
    assert status_view(st)["lag"] == "1 batch waiting (4 reports); no aggregator has committed yet"

    shuffle_once(config, redis_client)
    Worker(config, redis_client).run(once=True)
    assert campaign_status(redis_client, camp, rates).quiet is None  # nothing waits
    post(2)
    assert campaign_status(redis_client, camp, rates).quiet is None  # waiting, but a commit was just now
    later = campaign_status(redis_client, camp, rates, now=time.time() + 60)
    assert later.quiet is not None
    match = re.fullmatch(r"no aggregator has committed for (\d+) s", later.quiet)
    assert match and 59 <= int(match.group(1)) <= 62, later.quiet
    assert later.quiet in status_view(later)["lag"]
    poster.close()


@pytest.mark.slow  # five Python start-ups
def test_supervisor_restarts_with_doubling_backoff(monkeypatch, caplog):
    """A child that always exits at once is restarted no sooner than 1, 2, 4 … × the minimum
    backoff after each death, and each death and restart is logged."""
    from ldptel.commands import supervisor

    monkeypatch.setattr(supervisor, "BACKOFF_MIN_S", 0.05)
    starts: list[float] = []
    procs: list[subprocess.Popen] = []

    def launch() -> subprocess.Popen:
        starts.append(time.monotonic())
        procs.append(subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"]))
        return procs[-1]

    child = supervisor.Supervised("flaky", launch, lambda: None)
    caplog.set_level(logging.WARNING, logger=supervisor.__name__)
    first = child.start()
    deadline = time.monotonic() + 20
    while child.restarts < 4:
        assert time.monotonic() < deadline, child.restarts
        child.check()
        time.sleep(0.005)
    for p in procs:
        p.wait(5)
    gaps = np.diff(starts)
    assert all(gap >= 0.05 * 2**i for i, gap in enumerate(gaps)), gaps  # (death comes before the wait)
    assert f"flaky (pid {first}) died (exit status 3); restarting in 0.1 s" in caplog.text
    assert f"flaky restarted (pid {procs[-1].pid}, restart 4)" in caplog.text
