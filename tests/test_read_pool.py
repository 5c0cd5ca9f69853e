"""``ldptel serve --read-port``: a second gunicorn (the reader pool) serves the export and query
API, series, pages and health at a lower CPU priority; ingest, the device configs and the admin
API stay on ``--port`` only; bad pool arguments exit 2 naming the option; a dead reader pool is
forked again while ingest goes on."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from agg_support import EXPORT_TOKEN, INGEST_TOKEN, random_batches, write_config
from http_support import http_request, request, start_collector, wait_counted
from proc_support import children, descendants, nice_of

from ldptel.store.redis_server import free_port


def serve_processes(root: int) -> list[int]:
    """``root`` (``ldptel serve``) and its descendants running ``ldptel serve`` (the forked gunicorn
    masters and their workers), not the Redis, aggregator or shuffler children."""
    return [root, *(pid for pid, cmd in descendants(root).items() if b"serve" in cmd)]


def get(url: str, path: str, token: str | None = EXPORT_TOKEN):
    return request(url, "GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})


@pytest.mark.slow  # a whole `ldptel serve` stack
def test_reader_pool_serves_reads_at_lower_priority(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "served", "oracle": "oue", "epsilon": 1.0, "domain_size": 10, "min_reports": 500,
         "reports_per_window": 1_000_000, "shuffle_max_delay": "1s"}], aggregator={"block_ms": 100})
    read_port = free_port()
    col = start_collector(tmp_path / "serve", (tmp_path / "c.toml").read_text(), None, workers=1,
                          env={"LDPTEL_DATA_DIR": str(tmp_path / "data")},
                          args=["--read-port", str(read_port), "--read-workers", "2", "--read-nice", "7"])
    reader = f"http://127.0.0.1:{read_port}"
    try:
        col.wait_healthy(reader)  # start_collector waits for --port only
        sent = 0
        for batch in random_batches(cfg.campaigns[0], 1000, 500, seed=np.uint32(4)):
            body = batch.SerializeToString()
            headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"}
            assert request(reader, "POST", "/v1/reports", body, headers)[0] == 404  # no ingest here
            status, reply = request(col.url, "POST", "/v1/reports", body, headers)
            assert status == 202, reply
            sent += reply["accepted"]
        assert get(reader, "/v1/campaigns", INGEST_TOKEN)[0] == 404  # device configs: --port only
        assert get(col.url, "/v1/campaigns", INGEST_TOKEN)[0] == 200
        assert get(reader, "/v1/admin/campaigns")[0] == 404
        # the aggregator's publication, read through the reader pool
        doc = wait_counted(lambda: get(reader, "/v1/campaigns/served/estimates"), sent)
        assert get(col.url, "/v1/campaigns/served/estimates")[1] == doc  # --port still serves it
        assert get(reader, "/v1/campaigns/served/estimates", "nope-nope")[0] == 401
        assert http_request(reader, "GET", "/signin").status == 200
        nices = sorted(nice_of(p) for p in serve_processes(col.proc.pid))
        # serve, the collector's master and its worker at 0; the reader pool's master and 2 workers
        assert nices == [0, 0, 0, 7, 7, 7], nices
        col.proc.send_signal(signal.SIGTERM)
        assert col.proc.wait(timeout=30) in (0, -signal.SIGTERM)
        with pytest.raises(OSError):
            http_request(reader, "GET", "/healthz", timeout=2)
    finally:
        col.stop()


@pytest.mark.slow
def test_ingest_survives_a_killed_reader_pool(tmp_path: Path) -> None:
    """kill -9 of the reader pool's gunicorn master once made serve exit (ingest refused for the
    rest of the run, issue 24 item 10). The pools are independent children now: ingest answers 202
    throughout, serve forks the reader pool again, and it answers within 10 s."""
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "served", "oracle": "grr", "epsilon": 1.0, "domain_size": 4,
         "reports_per_window": 1_000_000}])
    read_port = free_port()
    reader = f"http://127.0.0.1:{read_port}"
    col = start_collector(tmp_path / "serve", (tmp_path / "c.toml").read_text(), None, workers=1,
                          env={"LDPTEL_DATA_DIR": str(tmp_path / "data")},
                          args=["--read-port", str(read_port)])
    batches = iter(random_batches(cfg.campaigns[0], 400, 1, seed=np.uint32(5)))
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"}
    try:
        col.wait_healthy(reader)
        masters = [pid for pid, cmd in children(col.proc.pid).items() if b"serve" in cmd]
        reader_master = next(p for p in masters if nice_of(p) == 10)
        old_workers = set(descendants(reader_master))
        os.kill(reader_master, signal.SIGKILL)
        killed, statuses, back = time.monotonic(), [], None

        def answered_by_a_new_pool() -> bool:
            """``/healthz`` of the reader port answered by a worker of a new master."""
            reply = http_request(reader, "GET", "/healthz", timeout=1)
            pid = json.loads(reply.body)["components"]["collector"]["pid"] if reply.status == 200 else None
            return pid is not None and pid in descendants(col.proc.pid) and pid not in old_workers

        while back is None and time.monotonic() - killed < 10:
            statuses.append(request(col.url, "POST", "/v1/reports", next(batches).SerializeToString(),
                                    headers)[0])
            try:
                if answered_by_a_new_pool():
                    back = time.monotonic() - killed
            except OSError:
                pass
            time.sleep(0.05)
        assert col.proc.poll() is None, col.log()
        assert set(statuses) == {202}, statuses  # ingest never stopped
        print(f"reader pool answering again {back:.1f} s after kill -9; {len(statuses)} batches "
              "posted meanwhile, all 202")
        assert back is not None and back < 10, col.log()
        assert f"reader pool (pid {reader_master}) died (killed by SIGKILL)" in col.log()
        assert get(reader, "/v1/campaigns/served/windows")[0] == 200
    finally:
        col.stop()


@pytest.mark.parametrize("args, message", [
    (["--read-port", "PORT"], "--read-port must be a port other than --port"),
    (["--read-port", "70000"], "--read-port must be a port other than --port"),
    (["--read-port", "FREE", "--read-workers", "0"], "--read-workers must be at least 1"),
    (["--read-port", "FREE", "--read-nice", "20"], "--read-nice must be in [0, 19]"),
    (["--read-port", "FREE", "--read-nice", "-1"], "--read-nice must be in [0, 19]"),
])
def test_bad_pool_arguments_exit_2(args, message, tmp_path, capsys) -> None:
    from ldptel.commands.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text('[[campaigns]]\nname = "ok"\noracle = "grr"\nepsilon = 1.0\ndomain_size = 4\n')
    port = free_port()
    args = [str(port) if a == "PORT" else str(free_port()) if a == "FREE" else a for a in args]
    assert main(["serve", "--config", str(cfg), "--redis-url", "redis://127.0.0.1:1/0",
                 "--port", str(port), *args]) == 2
    assert message in capsys.readouterr().err
