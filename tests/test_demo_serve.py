"""``ldptel demo`` (the whole pipeline) and ``ldptel serve`` with its aggregator, as processes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from agg_support import EXPORT_TOKEN, INGEST_TOKEN, random_batches, write_config
from http_support import http_request, request, start_collector, wait_counted

from ldptel.store.redis_server import free_port

pytestmark = pytest.mark.slow


def get_json(url: str, path: str, token: str) -> tuple[int, dict]:
    reply = http_request(url, "GET", path, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    return reply.status, json.loads(reply.body)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM (so the process stops its Redis and aggregator), SIGKILL only as a last resort."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_demo_exit_prints_table() -> None:
    out = subprocess.run([sys.executable, "-m", "ldptel.commands.cli", "demo", "--exit", "--users", "5000"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for oracle in ("grr", "sue", "oue", "olh", "hadamard", "rappor"):
        assert oracle in out.stdout
    assert "items in 95% CI" in out.stdout and "export token: demo-export-" in out.stdout
    assert "heavy hitters" in out.stdout and "quantile" in out.stdout
    sent = re.search(r"sent ([\d,]+) randomized reports", out.stdout).group(1)
    # 6 oracles, heavy hitters, range, 2 numeric, shuffled-fakes, and the experiment's two arms
    assert int(sent.replace(",", "")) == 13 * 5000
    assert re.search(r"card  treatment − control +[+−-]\d", out.stdout)
    assert "demo-session-seconds" in out.stdout and "1bitmean" in out.stdout
    assert re.search(r"shuffled-fakes.*\n(.*\n)*.*central ε between", out.stdout)


def test_demo_keeps_running_and_serves_the_export_api() -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "ldptel.commands.cli", "demo", "--users", "2000", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C" in line:
                break
        text = "".join(lines)
        token = re.search(r"export token: (\S+)", text).group(1)
        url, path = f"http://127.0.0.1:{port}", "/v1/campaigns/demo-olh/estimates"
        status, doc = get_json(url, path, token)
        assert status == 200 and doc["n_reports"] == 2000 and len(doc["items"]) == 64
        assert get_json(url, path, "nope-nope")[0] == 401
        drain = threading.Thread(target=proc.communicate, daemon=True)  # no pipe may fill up
        drain.start()
        proc.send_signal(signal.SIGINT)
        # the shuffler and aggregator finish their current step first (a cold numba cache: seconds)
        assert proc.wait(timeout=90) == 0
    finally:
        stop(proc)


def test_serve_runs_an_aggregator_beside_the_collector(tmp_path: Path) -> None:
    """``ldptel serve`` without a Redis URL: embedded Redis + gunicorn collector + aggregator
    process; reports POSTed over HTTP become estimates on the export API; SIGTERM stops all."""
    cfg = write_config(tmp_path / "serve.toml", [
        {"name": "served", "oracle": "oue", "epsilon": 1.0, "domain_size": 10, "min_reports": 500}],
        aggregator={"block_ms": 100})
    col = start_collector(tmp_path / "serve", (tmp_path / "serve.toml").read_text(), None, workers=1,
                          env={"LDPTEL_DATA_DIR": str(tmp_path / "data")})
    proc = col.proc
    try:
        sent = 0
        for batch in random_batches(cfg.campaigns[0], 2000, 500, seed=np.uint32(3)):
            status, reply = request(col.url, "POST", "/v1/reports", batch.SerializeToString(), {
                "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
            assert status == 202, reply
            sent += reply["accepted"]
        wait_counted(lambda: get_json(col.url, "/v1/campaigns/served/estimates", EXPORT_TOKEN), sent, 30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    finally:
        stop(proc)
