"""``/healthz`` reports each stage with its lag, and the ingress is bounded (issue 24, item 6).

A shuffler stopped (SIGSTOP) under load once left ``/healthz`` at 200 "ok" while 46,000 reports
piled up in ingress, kept there as devices sent them far past ``shuffle_max_delay``. Now the
shuffler's heartbeat says when it last ended a round with nothing overdue: ``/healthz`` turns 503
within the smallest ``shuffle_max_delay`` (so before 2 × it), the ingress holds at most
``[shuffler] max_ingress_batches`` batches per (version, window, cell) group — further batches of
that group get 503 with Retry-After,
none is trimmed — and once the shuffler resumes every accepted report is counted exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
from http_support import Poster, embedded_redis_client, start_collector
from ingest_support import INGEST_TOKEN
from test_supervise import FAST_AGGREGATOR, aggregator_pid, health, kill_quietly, wait_for

from ldptel.campaigns.config import load_config
from ldptel.client import create_mechanism
from ldptel.store import tally

DELAY_S = 4
CONFIG = f"""
[server]
rate_limit_per_address_per_minute = 0   # the test's fleet sends from one loopback address
max_unfinished_bodies_per_address = 64  # … concurrently
ingest_tokens = ["{INGEST_TOKEN}"]
[shuffler]
max_ingress_batches = 400
{FAST_AGGREGATOR}
[[campaigns]]
name = "hung"
oracle = "grr"
epsilon = 1.0
domain_size = 4
min_reports = 1
reports_per_window = 1000000
shuffle_min_reports = 1000000
shuffle_max_delay = "{DELAY_S}s"
"""
MECH = create_mechanism("grr", epsilon=1.0, domain_size=4)


class Load:
    """Posts one-report batches until stopped; counts what was accepted and refused."""

    def __init__(self, url: str) -> None:
        self.url, self.accepted, self.full, self.other = url, 0, 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        poster, rng = Poster(self.url), np.random.default_rng(1)
        try:
            while not self.stop.is_set():
                batch = MECH.encode_batch(np.array([1]), rng=rng, campaign="hung")
                status, doc = poster.post(batch.SerializeToString(), token=INGEST_TOKEN)
                if status == 202:
                    self.accepted += doc["accepted"]
                elif status == 503 and doc["error"] == "ingress_full":
                    self.full += 1
                else:
                    self.other.append((status, doc))
                time.sleep(0.02)
        finally:
            poster.close()

    def end(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.mark.slow
def test_a_hung_shuffler_turns_healthz_503_and_ingress_stays_bounded(tmp_path) -> None:
    col = start_collector(tmp_path, CONFIG, None, workers=1, stdout=subprocess.PIPE,
                          env={"LDPTEL_DATA_DIR": str(tmp_path / "data")})
    pids: list[int] = []
    load = None
    try:
        url = col.proc.stdout.readline().split(" at ")[1].split()[0]
        r = embedded_redis_client(tmp_path / "data", url)
        status, doc = health(col.url)
        assert status == 200 and doc["components"]["shuffler"]["status"] == "ok", doc
        assert doc["components"]["shuffler"]["stall_after_seconds"] == DELAY_S
        shuffler = aggregator_pid(col, b"shuffle")
        pids.append(shuffler)
        load = Load(col.url)
        time.sleep(1.0)
        os.kill(shuffler, signal.SIGSTOP)
        stopped = time.monotonic()
        wait_for("/healthz 503", lambda: health(col.url)[0] == 503, 3 * DELAY_S)
        took = time.monotonic() - stopped
        status, doc = health(col.url)
        print(f"/healthz 503 {took:.1f} s after SIGSTOP: {doc['components']['shuffler']}")
        assert took < 2 * DELAY_S and doc["components"]["shuffler"]["status"] in ("down", "lagging"), doc
        wait_for("ingress full", lambda: load.full > 0, 40)
        status, doc = health(col.url)
        assert doc["components"]["collector"]["status"] == "degraded", doc  # one full group (issue 34)
        assert doc["components"]["collector"]["degraded"] == {"hung": {"full_groups": 1}}, doc
        assert doc["components"]["collector"]["ingress_fullest"] == 400  # bounded, nothing trimmed
        os.kill(shuffler, signal.SIGCONT)
        wait_for("/healthz 200 again", lambda: health(col.url)[0] == 200, 3 * DELAY_S)
        load.end()
        camp = load_config(col.config_path).campaign("hung")
        assert camp is not None and not load.other, load.other
        wait_for("every accepted report counted", lambda: tally.summary(r, camp).lag_entries == 0
                 and sum(tally.window_counts(r, camp).values()) == load.accepted, 6 * DELAY_S)
        print(f"{load.accepted} reports accepted and counted once; {load.full} batches refused while full")
        r.close()
    finally:
        if load is not None:
            load.end()
        col.stop()
        kill_quietly(pids)
