"""``ldptel demo`` (the whole pipeline) and ``ldptel serve`` with its aggregator, as processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
from agg_support import EXPORT_TOKEN, INGEST_TOKEN, random_batches, write_config

from ldptel.redis_server import free_port


def get_json(url: str, token: str) -> tuple[int, dict]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


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
    out = subprocess.run([sys.executable, "-m", "ldptel.cli", "demo", "--exit", "--users", "5000"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for oracle in ("grr", "sue", "oue", "olh", "hadamard", "rappor"):
        assert oracle in out.stdout
    assert "items in 95% CI" in out.stdout and "export token: demo-export-" in out.stdout
    assert "heavy hitters" in out.stdout and "quantile" in out.stdout
    sent = re.search(r"sent ([\d,]+) randomized reports", out.stdout).group(1)
    assert int(sent.replace(",", "")) == 8 * 5000  # 6 oracles, 1 heavy-hitter, 1 range campaign


def test_demo_keeps_running_and_serves_the_export_api() -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "ldptel.cli", "demo", "--users", "2000", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C" in line:
                break
        text = "".join(lines)
        token = re.search(r"export token: (\S+)", text).group(1)
        status, doc = get_json(f"http://127.0.0.1:{port}/v1/campaigns/demo-olh/estimates", token)
        assert status == 200 and doc["n_reports"] == 2000 and len(doc["items"]) == 64
        assert get_json(f"http://127.0.0.1:{port}/v1/campaigns/demo-olh/estimates", "nope-nope")[0] == 401
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


def test_serve_runs_an_aggregator_beside_the_collector(tmp_path: Path) -> None:
    """``ldptel serve`` without a Redis URL: embedded Redis + gunicorn collector + aggregator
    process; reports POSTed over HTTP become estimates on the export API; SIGTERM stops all."""
    cfg = write_config(tmp_path / "serve.toml", [
        {"name": "served", "oracle": "oue", "epsilon": 1.0, "domain_size": 10, "min_reports": 500}],
        aggregator={"block_ms": 100})
    port = free_port()
    env = {**os.environ, "LDPTEL_DATA_DIR": str(tmp_path / "data")}
    env.pop("REDIS_URL", None)
    cmd = [sys.executable, "-m", "ldptel.cli", "serve", "--config", str(tmp_path / "serve.toml"),
           "--port", str(port), "--workers", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=2):
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "serve did not come up"
                time.sleep(0.1)
        sent = 0
        for batch in random_batches(cfg.campaigns[0], 2000, 500, seed=np.uint32(3)):
            req = urllib.request.Request(base + "/v1/reports", data=batch.SerializeToString(), headers={
                "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                sent += json.loads(resp.read())["accepted"]
        deadline = time.monotonic() + 30
        while True:
            status, doc = get_json(base + "/v1/campaigns/served/estimates", EXPORT_TOKEN)
            if status == 200 and doc["n_reports"] == sent:
                break
            assert status in (200, 409), (status, doc)  # 409: not all counted yet
            assert time.monotonic() < deadline, (status, doc)
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    finally:
        stop(proc)
