"""``ldptel demo`` (the whole pipeline) and ``ldptel serve`` with its aggregator, as processes."""

from __future__ import annotations

import csv
import io
import json
import re
import signal
import subprocess
import sys
import threading
import time
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
    # 6 oracles, heavy hitters (local and shuffled), range, 2 numeric, shuffled-fakes, and the
    # experiment's two arms
    assert int(sent.replace(",", "")) == 14 * 5000
    assert re.search(r"card  treatment − control +[+−-]\d", out.stdout)
    assert "demo-session-seconds" in out.stdout and "1bitmean" in out.stdout
    assert re.search(r"shuffled-fakes.*\n(.*\n)*.*central ε between", out.stdout)
    # heavy hitters in privacy_mode shuffled beside the local ones: the release claim, both std errors
    assert re.search(r"heavy hitters in privacy_mode shuffled.*\n(.*\n)*.*ε₀ = [\d.]+ per report; central ε "
                     r"between [\d.]+ and [\d.]+ .*demo-search \(local", out.stdout), out.stdout[-3000:]
    # tokens on (issue 37): the devices' envelopes carried tokens (all 5,000 counted, above); a
    # token-less flood of real sealed envelopes is refused whole
    assert re.search(r"token-less flood: 200 sealed envelopes of demo-sealed .*: 200 refused \(401 "
                     r"token_required\); none stored\. The SDK delivered its 5,000 devices' envelopes, each "
                     r"with a token of its own", out.stdout)


POLLED = ("demo-olh", "demo-grr", "demo-search", "demo-session-seconds")  # 10 s windows each
ONE_WINDOW = "demo-sealed"  # window = "all": its one window never ends, so `latest` has none
LATEST_PATHS = {"demo-search": "heavy-hitters", "demo-session-seconds": "mean"}


def test_demo_keeps_running_and_serves_the_export_api() -> None:
    """Issue 35: a data team polling ``window=latest`` every 5 s while the demo's devices report
    never receives a window in progress: every document is ``complete``, its window has ended
    when it is answered (JSON and CSV), and the window in progress is ``window=current``,
    ``complete: false``. ``demo-sealed`` (``window = "all"``: one window that never ends) answers
    ``latest`` with 409 ``no_complete_window`` pointing at ``window=current`` (it answered its one
    window, ``complete: false``)."""
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
        drain = threading.Thread(target=proc.communicate, daemon=True)  # no pipe may fill up
        drain.start()
        url, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}
        assert get_json(url, "/v1/campaigns/demo-olh/estimates", "nope-nope")[0] == 401
        answered: dict[str, set[int]] = {name: set() for name in POLLED}
        polls = 0
        for _ in range(7):  # 30 s: three windows end
            for name in (*POLLED, ONE_WINDOW):
                path = f"/v1/campaigns/{name}/{LATEST_PATHS.get(name, 'estimates')}?window=latest"
                asked = time.time()
                status, doc = get_json(url, path, token)
                polls += 1
                if name == ONE_WINDOW:  # never its one window, which never ends
                    assert status == 409 and doc["error"] == "no_complete_window", (status, doc)
                    assert doc["detail"]["window"] == 0 and "window=current" in doc["detail"]["message"]
                    continue
                if status == 409:  # before the first window has ended: never the window in progress
                    assert doc["error"] == "no_complete_window", doc
                    continue
                assert status == 200, (name, status, doc)
                assert doc["complete"] is True and doc["window"] + 10 <= asked + 1, (name, doc)
                assert doc["n_reports"] >= 1000
                answered[name].add(doc["window"])
            reply = http_request(url, "GET", "/v1/campaigns/demo-olh/estimates?format=csv", headers=auth,
                                 timeout=10)
            if reply.status == 200:
                rows = list(csv.DictReader(io.StringIO(reply.body.decode())))
                assert {r["complete"] for r in rows} == {"true"}
            time.sleep(5)
        status, doc = get_json(url, "/v1/campaigns/demo-olh/estimates?window=current", token)
        if status == 200:  # the window in progress, once released: said to be in progress
            assert doc["complete"] is False and doc["window"] + 10 > time.time() - 1
        else:
            assert status in (409, 503), doc
        status, doc = get_json(url, f"/v1/campaigns/{ONE_WINDOW}/estimates?window=current", token)
        if status == 200:  # its one window, once released in whole batches: never complete
            assert doc["complete"] is False and doc["window"] == 0, doc
        else:
            assert status in (409, 503), doc
        print(f"{polls} polls of window=latest: windows answered per campaign "
              f"{ {k: len(v) for k, v in answered.items()} }, none in progress; {ONE_WINDOW}: 409 "
              f"no_complete_window at every poll, window=current answered {status}")
        assert all(len(v) >= 2 for v in answered.values()), answered  # it moved on as windows ended
        proc.send_signal(signal.SIGINT)
        # the shuffler and aggregator finish their current step first (a cold numba cache: seconds)
        assert proc.wait(timeout=90) == 0
    finally:
        stop(proc)


def test_serve_runs_an_aggregator_beside_the_collector(tmp_path: Path) -> None:
    """``ldptel serve`` without a Redis URL: embedded Redis + gunicorn collector + aggregator
    process; reports POSTed over HTTP become estimates on the export API; SIGTERM stops all."""
    cfg = write_config(tmp_path / "serve.toml", [
        {"name": "served", "oracle": "oue", "epsilon": 1.0, "domain_size": 10, "min_reports": 500,
         "shuffle_max_delay": "1s"}],  # the last 500 reports are counted within seconds, not 60 s
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
