"""``ldptel serve`` under faults: it restarts a kill -9'd aggregator and embedded Redis, ``/healthz``
says which component is down, ``/healthz`` and ``/metrics`` answer within 2 s while Redis is
frozen (SIGSTOP), per-process metrics survive it, and a second ``serve`` of one data directory
exits 2 naming the first. Every process a test starts or stops is killed or resumed in its
``finally``; every wait is bounded."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import redis
from http_support import (
    METRICS_AUTH,
    Collector,
    Poster,
    embedded_redis_client,
    http_request,
    request,
    start_collector,
)
from ingest_support import INGEST_TOKEN, config_text
from proc_support import alive, children

from ldptel.campaigns.config import load_config
from ldptel.client import create_mechanism
from ldptel.store import heartbeat, tally
from ldptel.store.redis_server import EmbeddedRedis, free_port

pytestmark = pytest.mark.slow

FAST_AGGREGATOR = "[aggregator]\nblock_ms = 200\nclaim_idle_ms = 1000\n"  # stale after 2.6 s
MECH = create_mechanism("olh", epsilon=1.0, domain_size=1024)


def wait_for(what: str, check: Callable[[], object], timeout: float = 20.0) -> object:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def health(url: str) -> tuple[int, dict]:
    status, body = request(url, "GET", "/healthz", timeout=5)
    assert isinstance(body, dict)
    return status, body


def post(col: Collector, seed: int, n: int = 10) -> None:
    batch = MECH.encode_batch(np.arange(n), rng=np.random.default_rng(seed), campaign="olh")
    poster = Poster(col.url)
    try:
        assert poster.post(batch.SerializeToString(), token=INGEST_TOKEN)[0] == 202
    finally:
        poster.close()


def aggregator_pid(col: Collector, command: bytes = b"aggregate") -> int:
    """The pid of the ``ldptel aggregate`` (or another ``command``'s) child of ``serve``."""
    pids = [pid for pid, cmd in children(col.proc.pid).items() if command in cmd]
    assert pids, f"no {command.decode()} child"
    return pids[0]


def aggregator_status(col: Collector) -> str:
    return health(col.url)[1]["components"]["aggregator"]["status"]


def counted(r: redis.Redis, col: Collector) -> int:
    """Reports of campaign olh the aggregator has counted (0 while any batch waits)."""
    camp = load_config(col.config_path).campaign("olh")
    assert camp is not None
    summ = tally.summary(r, camp)
    return sum(summ.windows.values()) if summ.lag_entries == 0 else 0


def metric(text: str, line_start: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return None


def kill_quietly(pids: list[int]) -> None:
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break


def test_serve_restarts_a_killed_aggregator_and_redis(tmp_path):
    col = start_collector(tmp_path, config_text(extra=FAST_AGGREGATOR), None, workers=1,
                          stdout=subprocess.PIPE, env={"LDPTEL_DATA_DIR": str(tmp_path / "data")})
    pids: list[int] = []
    try:
        url = col.proc.stdout.readline().split(" at ")[1].split()[0]
        r = embedded_redis_client(tmp_path / "data", url)
        agg_pid = aggregator_pid(col)
        pids += [agg_pid, int(r.info("server")["process_id"])]
        post(col, 1)
        wait_for("the first batch counted", lambda: counted(r, col) == 10)

        # kill -9 the aggregator: serve restarts it, the new one counts
        os.kill(agg_pid, signal.SIGKILL)
        post(col, 2)
        wait_for("the second batch counted", lambda: counted(r, col) == 20)
        new_agg = aggregator_pid(col)
        pids.append(new_agg)
        assert new_agg != agg_pid
        wait_for("the new aggregator's heartbeat", lambda: [
            b for b in heartbeat.read(r) if b.pid == new_agg and time.time() - b.at < 2])
        wait_for("/healthz to see it", lambda: aggregator_status(col) == "ok", 5)  # probe: ≤ 1 s old
        assert f"aggregator (pid {agg_pid}) died (killed by SIGKILL)" in col.log()
        assert f"aggregator restarted (pid {new_agg}" in col.log()

        # a frozen aggregator (no heartbeat): /healthz answers 503 naming it, then 200 again
        os.kill(new_agg, signal.SIGSTOP)
        try:
            status, body = wait_for("503", lambda: (lambda h: h[0] == 503 and h)(health(col.url)), 10)
            assert body["components"]["aggregator"]["status"] == "down"
            assert body["components"]["redis"]["status"] == "ok"
        finally:
            os.kill(new_agg, signal.SIGCONT)
        wait_for("200 after SIGCONT", lambda: health(col.url)[0] == 200, 10)

        # kill -9 the embedded Redis: serve restarts it on its port and data (AOF)
        redis_pid = int(r.info("server")["process_id"])
        os.kill(redis_pid, signal.SIGKILL)
        wait_for("a new Redis", lambda: _redis_pid(r) not in (None, redis_pid))
        pids.append(_redis_pid(r) or 0)
        wait_for("200 after the Redis restart", lambda: health(col.url)[0] == 200)
        post(col, 3)
        wait_for("all three batches counted", lambda: counted(r, col) == 30)
        assert f"embedded Redis (pid {redis_pid}) died (killed by SIGKILL)" in col.log()

        # the aggregator's metrics reach the collector's /metrics (each report counted once)
        text = request(col.url, "GET", "/metrics", headers=METRICS_AUTH)[1]
        assert isinstance(text, str)
        assert metric(text, 'ldptel_aggregator_reports_total{campaign="olh"}') == 30
        assert metric(text, "ldptel_aggregator_workers") == 1
        r.close()
    finally:
        col.stop()
        kill_quietly(pids)


def test_serve_restarts_a_killed_shuffler(tmp_path):
    """kill -9 of the shuffler child: serve restarts it, and the new one moves what was posted
    after the kill (once the dead one's lease lapsed) — nothing is lost."""
    col = start_collector(tmp_path, config_text(extra=FAST_AGGREGATOR), None, workers=1,
                          stdout=subprocess.PIPE, env={"LDPTEL_DATA_DIR": str(tmp_path / "data")})
    pids: list[int] = []
    try:
        url = col.proc.stdout.readline().split(" at ")[1].split()[0]
        r = embedded_redis_client(tmp_path / "data", url)  # the reader: serve's Redis has roles
        shuffler = aggregator_pid(col, b"shuffle")
        pids += [shuffler, int(r.info("server")["process_id"])]
        post(col, 1)
        wait_for("the first batch counted", lambda: counted(r, col) == 10)
        os.kill(shuffler, signal.SIGKILL)
        post(col, 2)
        wait_for("the second batch counted", lambda: counted(r, col) == 20, 30)
        new = aggregator_pid(col, b"shuffle")
        pids.append(new)
        assert new != shuffler
        assert f"shuffler (pid {shuffler}) died (killed by SIGKILL)" in col.log()
        assert f"shuffler restarted (pid {new}" in col.log()
        r.close()
    finally:
        col.stop()
        kill_quietly(pids)


def _redis_pid(r: redis.Redis) -> int | None:
    try:
        return int(r.info("server")["process_id"])
    except redis.RedisError:
        return None


def test_frozen_redis_health_and_metrics_answer_within_2s(tmp_path):
    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    assert server.process is not None
    redis_pid = server.process.pid
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    col = None
    try:
        col = start_collector(tmp_path / "collector", config_text(), server.url, workers=2,
                              env={"TMPDIR": str(tmpdir)})
        post(col, 7, n=5)
        r = redis.Redis.from_url(server.url)
        assert health(col.url)[0] == 200
        time.sleep(1.5)  # every worker's probe has read the counters since the batch

        os.kill(redis_pid, signal.SIGSTOP)
        try:
            time.sleep(2.0)  # every worker's probe has tried Redis since it froze
            for path in ("/healthz", "/metrics", "/healthz", "/metrics"):
                t0 = time.monotonic()
                auth = METRICS_AUTH if path == "/metrics" else None
                reply = http_request(col.url, "GET", path, headers=auth, timeout=5)
                assert time.monotonic() - t0 < 2.0, path
                if path == "/healthz":
                    body = reply.parsed()
                    assert reply.status == 503 and isinstance(body, dict)
                    assert body["redis"] == "down" and body["components"]["redis"]["status"] == "down"
                else:
                    text = reply.body.decode()
                    assert reply.status == 200
                    assert metric(text, "ldptel_redis_up") == 0
                    # the last-known Redis counters, and the per-process metrics of every worker
                    assert metric(text, 'ldptel_reports_accepted_total{campaign="olh"}') == 5
                    posts = 'ldptel_http_requests_total{code="202",endpoint="ingest.post_reports"}'
                    assert metric(text, posts) == 1
                    assert 'ldptel_build_info{python="' in text
        finally:
            os.kill(redis_pid, signal.SIGCONT)
        wait_for("200 after SIGCONT", lambda: health(col.url)[0] == 200, 10)
        assert len(list(tmpdir.glob("ldptel-metrics-*"))) == 1  # serve's PROMETHEUS_MULTIPROC_DIR

        # a worker killed: its live gauges go (granian: serve's supervisor sees it gone; gunicorn:
        # its child_exit hook), the request counts stay
        text = request(col.url, "GET", "/metrics", headers=METRICS_AUTH)[1]
        assert isinstance(text, str)
        workers = sorted(set(re.findall(r'ldptel_process_open_fds\{pid="(\d+)",role="collector"\}', text)))
        assert len(workers) == 2, text
        requests_before = metric(text, 'ldptel_http_requests_total{code="200",endpoint="health.metrics"}')
        os.kill(int(workers[0]), signal.SIGKILL)

        def replaced() -> str | None:
            try:
                status, now = request(col.url, "GET", "/metrics", headers=METRICS_AUTH)
            except ConnectionResetError:  # a connection the killed worker had accepted (granian's
                return None  # workers accept eagerly): the next one goes to a live worker
            assert status == 200 and isinstance(now, str), (status, now, col.log()[-3000:])
            live = set(re.findall(r'ldptel_process_open_fds\{pid="(\d+)",role="collector"\}', now))
            return now if workers[0] not in live and len(live) == 2 else None

        text = wait_for("the dead worker's gauges removed", replaced)
        after = metric(text, 'ldptel_http_requests_total{code="200",endpoint="health.metrics"}')
        assert after is not None and requests_before is not None and after > requests_before
        r.close()
    finally:
        if col is not None:
            col.stop()
        kill_quietly([redis_pid])
        server.cleanup()
    assert not list(tmpdir.glob("ldptel-metrics-*"))  # removed when serve stopped


def test_second_serve_of_one_data_dir_exits_2(tmp_path):
    env = {"LDPTEL_DATA_DIR": str(tmp_path / "data")}
    first = start_collector(tmp_path, config_text(), None, workers=1, env=env)
    clean = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("LDPTEL_")}
    cmd = [sys.executable, "-m", "ldptel.commands.cli", "serve", "--config", str(first.config_path),
           "--port", str(free_port())]
    second = subprocess.Popen(cmd, env={**clean, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        out, err = second.communicate(timeout=30)
        assert second.returncode == 2, (out, err)
        assert f"in use by process {first.proc.pid}" in err, err
        assert "embedded Redis at" not in out  # no second server on that data directory
        assert health(first.url)[0] == 200
    finally:
        if second.poll() is None:
            second.send_signal(signal.SIGTERM)
            second.communicate(timeout=30)
        first.stop()
    lock = next(Path(tmp_path / "data").iterdir()) / "ldptel-serve.lock"
    assert lock.exists()


def test_serve_says_whether_an_aggregator_runs(tmp_path):
    """With an external Redis none runs unless ``--aggregator``; then it is supervised and counts."""
    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    cols: list[Collector] = []
    pids: list[int] = []
    try:
        text = config_text(extra=FAST_AGGREGATOR)
        cols.append(start_collector(tmp_path / "a", text, server.url, stdout=subprocess.PIPE))
        line = cols[0].proc.stdout.readline()
        assert line.startswith("ldptel: no aggregator runs here (--no-aggregator)"), line
        status, body = health(cols[0].url)
        assert status == 200 and body["components"]["aggregator"]["supervised"] is False
        cols[0].stop()

        col = start_collector(tmp_path / "b", text, server.url, stdout=subprocess.PIPE, args=["--aggregator"])
        cols.append(col)
        line = col.proc.stdout.readline()
        assert line.startswith("ldptel: aggregator running beside the collector (pid"), line
        pids.append(aggregator_pid(col))
        post(col, 11, n=5)
        r = redis.Redis.from_url(server.url)
        wait_for("the batch counted", lambda: counted(r, col) == 5)
        wait_for("a fresh heartbeat", lambda: aggregator_status(col) == "ok")
        assert health(col.url)[1]["components"]["aggregator"]["supervised"] is True
        counted_metric = 'ldptel_aggregator_reports_total{campaign="olh"}'
        wait_for("the aggregator's metrics",
                 lambda: metric(str(request(col.url, "GET", "/metrics", headers=METRICS_AUTH)[1]),
                                counted_metric) == 5)
        r.close()

        # the aggregator without the shuffler: it runs, and serve does not say it does not
        # (regression: the shuffler's `if` had taken the aggregator's `else`)
        no_shuffler = config_text(extra=FAST_AGGREGATOR + "\n[shuffler]\nenabled = false\n")
        off = start_collector(tmp_path / "c", no_shuffler, server.url, stdout=subprocess.PIPE,
                              args=["--aggregator"])
        cols.append(off)
        lines = [off.proc.stdout.readline() for _ in range(2)]
        assert lines[0].startswith("ldptel: aggregator running beside the collector (pid"), lines
        assert lines[1].startswith("ldptel: collector on"), lines
        pids.append(aggregator_pid(off))
    finally:
        for c in cols:
            c.stop()
        kill_quietly(pids)
        server.cleanup()


def test_serve_killed_leaves_no_process_and_frees_its_data_dir(tmp_path):
    """kill -9 of ``serve`` itself: gunicorn, the shuffler, the aggregator and the embedded Redis
    stop too (so no orphan keeps the data directory), and the next ``serve`` of the config starts
    on the same data."""
    env = {"LDPTEL_DATA_DIR": str(tmp_path / "data")}
    col = start_collector(tmp_path, config_text(), None, workers=1, env=env)
    kids = list(children(col.proc.pid))
    try:
        assert len(kids) == 4  # redis-server, ldptel shuffle, ldptel aggregate, gunicorn
        post(col, 5)
        os.kill(col.proc.pid, signal.SIGKILL)
        col.proc.wait(10)
        wait_for("every child to exit", lambda: not any(alive(p) for p in kids), 20)
        again = start_collector(tmp_path, config_text(), None, workers=1, env=env, stdout=subprocess.PIPE)
        try:
            url = again.proc.stdout.readline().split(" at ")[1].split()[0]
            r = embedded_redis_client(tmp_path / "data", url)
            wait_for("the batch of the killed serve counted", lambda: counted(r, again) == 10)
            r.close()
        finally:
            again.stop()
    finally:
        col.stop()
        kill_quietly(kids)
