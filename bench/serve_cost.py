"""CPU per poll through the real HTTP server: what a polling client costs the collector.

Stores N heavy-hitter, frequency and range reports (``serve_latency.scaled_state``) and publishes
them, starts ``ldptel serve`` (gunicorn, ``--workers``) once per ``--python`` (e.g. this branch's
venv and another checkout's, to compare two versions on one Redis and one machine), and sends
each server, in turn and in rounds (AB, BA, …), ``--requests`` requests of the pollers' cycle
of ``serve_latency.ENDPOINTS`` from one keep-alive client that sends each URL's ``ETag`` back
(no ingest: nothing is republished, so the API answers 304 after the first request, as between
two publications). Prints each server's CPU milliseconds per request (its process tree:
supervisor, gunicorn master and workers) and Redis' — CPU seconds used, which the load of a
shared machine moves much less than latency.

    .venv/bin/python bench/serve_cost.py [--python .venv/bin/python --python ../main/.venv/bin/python]
        [--n 1000000] [--requests 2000] [--rounds 4] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis
from serve_latency import CONFIG, ENDPOINTS, EXPORT, Connection, cpu_seconds, scaled_state, signed_in_cookie

from ldptel.aggregator import publish, store
from ldptel.campaigns.config import load_config
from ldptel.store.redis_server import EmbeddedRedis, free_port


def wait_healthy(url: str, timeout: float = 60.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if Connection(url).request("GET", "/healthz")[0] == 200:
            return
        time.sleep(0.2)
    sys.exit(f"{url} did not become healthy")


def cycle(url: str, count: int) -> None:
    """``count`` requests of the pollers' cycle, each URL's ETag sent back."""
    cookie, conn = signed_in_cookie(url), Connection(url)
    etags: dict[str, str] = {}
    names = list(ENDPOINTS)
    for i in range(count):
        name = names[i % len(names)]
        headers = {"Authorization": f"Bearer {EXPORT}"} if name.startswith("/") else {"Cookie": cookie}
        if name in etags:
            headers["If-None-Match"] = etags[name]
        status, answer = conn.request("GET", ENDPOINTS[name], headers=headers)
        assert status in (200, 304), (name, status)
        if status == 200 and answer["ETag"]:
            etags[name] = answer["ETag"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", action="append", help="interpreter of an ldptel install (repeatable)")
    ap.add_argument("--n", type=int, default=1_000_000, help="stored reports per campaign")
    ap.add_argument("--requests", type=int, default=2000, help="requests per round and server")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    args = ap.parse_args()
    pythons = args.python or [sys.executable]
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(data_dir=Path(tmp) / "redis") as server:
        config_path = Path(tmp) / "bench.toml"
        config_path.write_text(CONFIG)
        r = redis.Redis.from_url(server.url)
        rng = np.random.default_rng(1)
        for camp in load_config(config_path).campaigns:
            acc, k = scaled_state(camp, args.n, min(100_000, args.n), rng)
            store.commit(r, camp, 0, "bench", [], [], {0: acc}, {0: acc}, {0: k}, 0)
            publish.publish(r, camp, 0)
        assert server.process is not None
        servers: list[tuple[str, subprocess.Popen, str]] = []
        try:
            for py in pythons:
                port = free_port()
                proc = subprocess.Popen([py, "-m", "ldptel.commands.cli", "serve",
                                         "--config", str(config_path),
                                         "--redis-url", server.url, "--port", str(port),
                                         "--workers", str(args.workers)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
                servers.append((py, proc, f"http://127.0.0.1:{port}"))
            for _, _, url in servers:
                wait_healthy(url)
                cycle(url, 6 * 10)  # warm-up: imports, first renderings
            costs: dict[str, list[tuple[float, float]]] = {py: [] for py, _, _ in servers}
            for rnd in range(args.rounds):
                for py, proc, url in (servers if rnd % 2 == 0 else servers[::-1]):
                    time.sleep(1.5)  # let background threads settle
                    roots = {"server": proc.pid, "redis": server.process.pid}
                    before, t0 = cpu_seconds(roots), time.time()
                    cycle(url, args.requests)
                    after, took = cpu_seconds(roots), time.time() - t0
                    ms = [(after[k] - before[k]) / args.requests * 1000 for k in ("server", "redis")]
                    costs[py].append((ms[0], ms[1]))
                    print(f"round {rnd + 1} {py}: server {ms[0]:.2f} ms, Redis {ms[1]:.3f} ms CPU per "
                          f"request ({args.requests / took:.0f} requests/s; load average "
                          f"{os.getloadavg()[0]:.1f})", flush=True)
        finally:
            for _, proc, _ in servers:
                proc.terminate()
                proc.wait(30)
        print(f"\nCPU per request of the pollers' cycle ({len(ENDPOINTS)} endpoints, ETags sent back; "
              f"median of {args.rounds} rounds):")
        for py, rows in costs.items():
            print(f"  {py}: server {float(np.median([a for a, _ in rows])):.2f} ms, "
                  f"Redis {float(np.median([b for _, b in rows])):.3f} ms")


if __name__ == "__main__":
    main()
