"""Collector ingest benchmark (target: ≥ 50 000 reports/s into Redis on 2 cores, batches of 100).

Starts an embedded Redis and ``ldptel serve`` (gunicorn, ``--workers`` processes) on free
loopback ports, then for each batch size posts valid OLH batches (d = 1024, ε = 1, a fresh
batch_id per request) from ``--clients`` load-generator processes, each holding one keep-alive
``http.client`` connection, for ``--seconds`` (or ``--max-requests`` per client). Reports/s counts
reports the collector answered 202 for and is checked against the length of the stream it writes
(the ingress stream: the shuffler is on by default, and none runs here). In the same run
it measures the raw pipelined XADD rate of the same Redis with the same entries (one client,
pipelines of 500), and prints collector / raw as a ratio.

    .venv/bin/python bench/ingest.py [--batches 1,100,1000] [--seconds 4] [--clients 4] [--workers 2]

The load generator shares the machine with the collector and Redis, so the numbers are a floor.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import redis

from ldptel import keys
from ldptel.client import create_mechanism
from ldptel.store.redis_server import EmbeddedRedis, free_port

TOKEN = "bench-ingest-token"
CAMPAIGN = "bench"
PLACEHOLDER = b"\xa5" * 16
CONFIG = f"""
[server]
ingest_tokens = ["{TOKEN}"]
export_tokens = ["bench-export-token"]
rate_limit_per_minute = 1000000000
rate_limit_per_address_per_minute = 0  # every simulated device sends from this one address

[[campaigns]]
name = "{CAMPAIGN}"
oracle = "olh"
epsilon = 1.0
domain_size = 1024
"""


def batch_body(size: int, seed: int = 1) -> tuple[bytes, int]:
    """A valid serialized batch of ``size`` OLH reports and the offset of its batch_id."""
    mech = create_mechanism("olh", epsilon=1.0, domain_size=1024)
    rng = np.random.default_rng(seed)
    batch = mech.encode_batch(rng.integers(0, 1024, size), rng=rng, campaign=CAMPAIGN,
                              batch_id=PLACEHOLDER)
    body = batch.SerializeToString()
    offset = body.index(PLACEHOLDER)
    assert body.count(PLACEHOLDER) == 1
    return body, offset


def _client(args: tuple) -> tuple[int, int, float]:
    """One load-generator process: POST on a keep-alive connection until time or count runs out.
    Returns (accepted reports, failed requests, seconds)."""
    port, body, offset, size, seconds, max_requests, start_at = args
    template = bytearray(body)
    prefix = os.urandom(8)
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}",
               "Connection": "keep-alive"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while time.time() < start_at:
        time.sleep(0.001)
    t0 = time.perf_counter()
    deadline = t0 + seconds
    accepted = failed = 0
    for i in range(max_requests):
        if time.perf_counter() >= deadline:
            break
        template[offset:offset + 16] = prefix + i.to_bytes(8, "little")
        try:
            conn.request("POST", "/v1/reports", bytes(template), headers)
            resp = conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            failed += 1
            continue
        if resp.status == 202:
            accepted += size
        else:
            failed += 1
    elapsed = time.perf_counter() - t0
    conn.close()
    return accepted, failed, elapsed


def raw_xadd_rate(url: str, body: bytes, size: int, seconds: float, pipeline: int = 500) -> float:
    """Entries/s of pipelined XADDs of ``body`` (one client) into a scratch stream."""
    client = redis.Redis.from_url(url)
    key = "{bench}:raw"
    client.delete(key)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pipe = client.pipeline(transaction=False)
        for _ in range(pipeline):
            pipe.xadd(key, {"batch": body, "window": 0, "count": size})
        pipe.execute()
        n += pipeline
    rate = n / (time.perf_counter() - t0)
    client.delete(key)
    client.close()
    return rate


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"collector did not answer {url}")
        time.sleep(0.1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,100,1000", help="batch sizes (comma-separated)")
    ap.add_argument("--seconds", type=float, default=4.0, help="load duration per batch size")
    ap.add_argument("--max-requests", type=int, default=200_000, help="cap per client process")
    ap.add_argument("--clients", type=int, default=4, help="load-generator processes")
    ap.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    ap.add_argument("--raw-seconds", type=float, default=2.0, help="duration of the raw XADD run")
    args = ap.parse_args()
    sizes = [int(s) for s in args.batches.split(",")]

    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="ldptel-bench-"))
    (tmp / "bench.toml").write_text(CONFIG)
    port = free_port()
    rows = []
    with EmbeddedRedis(data_dir=tmp / "redis") as server:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "ldptel.commands.cli", "serve", "--config", str(tmp / "bench.toml"),
             "--redis-url", server.url, "--port", str(port), "--workers", str(args.workers)],
            stdout=subprocess.DEVNULL, stderr=open(tmp / "serve.log", "wb"), env=env,
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz")
            client = redis.Redis.from_url(server.url)
            ctx = mp.get_context("fork")
            with ctx.Pool(args.clients) as pool:
                for size in sizes:
                    body, offset = batch_body(size)
                    before = client.xlen(keys.ingress_key(CAMPAIGN))
                    # warm-up (connections, script load, numpy caches), not counted
                    pool.map(_client, [(port, body, offset, size, 0.3, 10**6, time.time())] * args.clients)
                    warm = client.xlen(keys.ingress_key(CAMPAIGN)) - before
                    start_at = time.time() + 0.2
                    t0 = time.perf_counter()
                    res = pool.map(_client, [(port, body, offset, size, args.seconds,
                                              args.max_requests, start_at)] * args.clients)
                    wall = time.perf_counter() - t0 - 0.2
                    accepted = sum(r[0] for r in res)
                    failed = sum(r[1] for r in res)
                    stored = client.xlen(keys.ingress_key(CAMPAIGN)) - before - warm
                    if stored * size != accepted or failed:
                        print(f"warning: batch {size}: {accepted} accepted vs {stored * size} stored, "
                              f"{failed} failed requests", file=sys.stderr)
                    rate = accepted / max(r[2] for r in res) if accepted else 0.0
                    raw = raw_xadd_rate(server.url, body, size, args.raw_seconds)
                    rows.append((size, len(body), rate, rate / size, raw * size, raw, failed, wall))
            client.close()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    load_after = os.getloadavg()

    print(f"ldptel ingest benchmark: OLH d=1024 ε=1, gunicorn {args.workers} workers, "
          f"{args.clients} client processes, {args.seconds:g} s per size, {os.cpu_count()} CPUs")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    print(f"{'batch':>6} {'body B':>8} {'reports/s':>11} {'requests/s':>11} "
          f"{'raw XADD reports/s':>19} {'raw XADD entries/s':>19} {'ratio':>7}")
    for size, nbytes, rate, rps, raw_reports, raw_entries, _failed, _wall in rows:
        print(f"{size:>6} {nbytes:>8} {rate:>11,.0f} {rps:>11,.0f} {raw_reports:>19,.0f} "
              f"{raw_entries:>19,.0f} {rate / raw_reports:>7.3f}")
    target = next((r[2] for r in rows if r[0] == 100), None)
    if target is not None:
        print(f"target ≥ 50,000 reports/s at batch 100: {'met' if target >= 50_000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
