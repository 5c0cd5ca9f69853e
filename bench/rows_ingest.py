"""Collector rows of ``bench/table.py``: CPU per ``POST /v1/reports`` of the real collector against
a minimal Flask app doing the same parse + XADD (``bench/ingest_apps.py``), both served the way
``ldptel serve`` serves (its default server, granian; ``BENCH_SERVER=gunicorn`` for the other; one
worker each), on one embedded Redis, with valid OLH batches
(d = 1,024, ε = 1) of 1, 100 and 1,000 reports, a fresh batch id per request, sent one after the
other on a keep-alive connection. CPU is the server processes' own (``/proc/<pid>/task/*/schedstat``,
every thread of the master and its worker), so the load generator's cost is not counted. Each row
also notes the in-process floor: the same parse and a pipelined XADD in this process."""

from __future__ import annotations

import atexit
import http.client
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import redis
from table import Row, Timed

from ldptel import keys
from ldptel.client import create_mechanism
from ldptel.proto import ReportBatch
from ldptel.store.redis_server import EmbeddedRedis, free_port

TOKEN = "bench-table-ingest-token"
CAMPAIGN = "bench"
PLACEHOLDER = b"\xa5" * 16
CONFIG = f"""
[server]
ingest_tokens = ["{TOKEN}"]
export_tokens = ["bench-table-export-token"]
rate_limit_per_minute = 1000000000
rate_limit_per_address_per_minute = 0  # every simulated device sends from this one address

[[campaigns]]
name = "{CAMPAIGN}"
oracle = "olh"
epsilon = 1.0
domain_size = 1024
"""
HERE = Path(__file__).resolve().parent
# both apps' server (bench/ingest_apps.py): the one ``ldptel serve`` runs the collector with
SERVER = os.environ.get("BENCH_SERVER") or ("granian" if importlib.util.find_spec("granian") else "gunicorn")


class Stack:
    """One embedded Redis and the two collectors, started on first use, stopped at exit."""

    _made: Stack | None = None

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ldptel-bench-table-"))
        (self.tmp / "bench.toml").write_text(CONFIG)
        self.redis = EmbeddedRedis(data_dir=self.tmp / "redis").start()
        self.client = redis.Redis.from_url(self.redis.url)
        self.procs: dict[str, tuple[subprocess.Popen, int]] = {}
        atexit.register(self.stop)
        for app in ("ldptel", "floor"):
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, str(HERE / "ingest_apps.py"), app, "--config", str(self.tmp / "bench.toml"),
                 "--redis-url", self.redis.url, "--port", str(port), "--server", SERVER],
                stdout=subprocess.DEVNULL, stderr=open(self.tmp / f"{app}.log", "wb"))
            self.procs[app] = (proc, port)
        for app, (_, port) in self.procs.items():
            wait_http(f"http://127.0.0.1:{port}/v1/campaigns" if app == "ldptel" else f"http://127.0.0.1:{port}/")

    @classmethod
    def get(cls) -> Stack:
        if cls._made is None:
            cls._made = Stack()
        return cls._made

    def stop(self) -> None:
        for proc, _ in self.procs.values():
            proc.terminate()
        for proc, _ in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.redis.stop()

    def reset(self) -> None:
        """Empty the streams the collectors write (outside the timed part)."""
        self.client.delete(keys.ingress_key(CAMPAIGN), keys.stream_key(CAMPAIGN), "{bench-floor}:ingress")


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
            with urllib.request.urlopen(req, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"no answer from {url}")
        time.sleep(0.1)


def cpu_ns(pid: int) -> int:
    """CPU time of ``pid`` and its children, every thread (ns; schedstat's first field)."""
    total = 0
    pids = [pid]
    try:
        pids += [int(c) for t in os.listdir(f"/proc/{pid}/task")
                 for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
    except OSError:
        pass
    for p in pids:
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                total += int(Path(f"/proc/{p}/task/{t}/schedstat").read_text().split()[0])
        except OSError:
            continue
    return total


def batch_body(size: int) -> tuple[bytes, int]:
    mech = create_mechanism("olh", epsilon=1.0, domain_size=1024)
    rng = np.random.default_rng(size)
    batch = mech.encode_batch(rng.integers(0, 1024, size), rng=rng, campaign=CAMPAIGN, batch_id=PLACEHOLDER)
    body = batch.SerializeToString()
    return body, body.index(PLACEHOLDER)


def post_many(port: int, body: bytes, offset: int, n: int) -> None:
    template = bytearray(body)
    prefix = os.urandom(8)
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for i in range(n):
            template[offset:offset + 16] = prefix + i.to_bytes(8, "little")
            conn.request("POST", "/v1/reports", bytes(template), headers)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 202:
                raise RuntimeError(f"answer {resp.status}: {resp.read()!r}")
    finally:
        conn.close()


def collector(size: int, requests: int):
    def setup(quick: bool) -> Timed:
        n = requests // 4 if quick else requests
        stack = Stack.get()
        body, offset = batch_body(size)

        def side(app: str):
            proc, port = stack.procs[app]

            def run() -> float:
                stack.reset()
                c0 = cpu_ns(proc.pid)
                post_many(port, body, offset, n)
                return (cpu_ns(proc.pid) - c0) / 1e9
            return run

        def in_process() -> str:
            bodies = [bytes(body) for _ in range(n)]
            t0 = time.process_time()
            pipe = stack.client.pipeline(transaction=False)
            for b in bodies:
                batch = ReportBatch.FromString(b)
                pipe.xadd("{bench-inproc}:ingress", {"batch": b, "window": 0, "count": batch.count})
            pipe.execute()
            cpu = time.process_time() - t0
            stack.client.delete("{bench-inproc}:ingress")
            return f"in-process parse + pipelined XADD: {cpu / n * 1e3:.3f} ms"

        return Timed(side("ldptel"), side("floor"), float(n), in_process)
    return setup


ROWS = [
    Row(f"collector CPU per request, batch {size:,}", "ms",
        f"minimal Flask app, same parse + XADD ({SERVER})", "≤ 1.2× at batch 100" if size == 100 else "",
        collector(size, n), group="collector", before="0.55–0.83 ms, 1.4–1.7× (batch 1–1,000)", repeats=1,
        self_timed=True)
    for size, n in ((1, 1500), (100, 1000), (1000, 400))
]
