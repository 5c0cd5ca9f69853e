"""Latency of ``/series`` and ``/windows`` over many windows (issue 13: ≤ 100 ms at 90 daily windows).

Stores ``--windows`` daily windows of a frequency campaign (``--items`` labels, ``--per-window``
reports each, encoded with the campaign's mechanism and committed with ``store.commit``, the
aggregator's own commit), publishes each with ``publish.publish`` (as the aggregator does), starts
``ldptel serve`` (gunicorn, ``--workers``, no aggregator) on an embedded Redis, and times, over
HTTP with one keep-alive client: each endpoint's first request (per-process caches cold for the
worker that answers; with the default single worker, ``/windows``' first request also includes
the worker's own warm-up) and ``--repeat`` requests after it (p50, p95, max), plus each endpoint's own
time in process (the app's test client: no HTTP server or queueing), warm and cold (every
publication read and parsed again for each request). "first" of ``/series`` reads
and parses every window's publication (``documents.read_published_many``, two round trips); a
repeated request reads the window counts and tags and answers the body kept for its ETag.

    .venv/bin/python bench/series.py [--windows 90] [--items 32] [--per-window 5000] [--repeat 100]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis
import requests

from ldptel.aggregator import accumulator_for, publish, store
from ldptel.campaigns.config import load_config
from ldptel.store.redis_server import EmbeddedRedis, free_port

EXPORT = "bench-export-token-0123"
DAY = 86400


def config(items: int) -> str:
    labels = ", ".join(f'"item-{i}"' for i in range(items))
    return f"""[server]
ingest_tokens = ["bench-ingest-token-0123"]
export_tokens = ["{EXPORT}"]

[[campaigns]]
name = "daily"
oracle = "grr"
epsilon = 4.0
domain = [{labels}]
window = "1d"
min_reports = 1000
"""


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--windows", type=int, default=90)
    ap.add_argument("--items", type=int, default=32)
    ap.add_argument("--per-window", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--workers", type=int, default=1,
                    help="gunicorn workers (1: every first request below meets the same process)")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(data_dir=Path(tmp) / "redis") as server:
        path = Path(tmp) / "bench.toml"
        path.write_text(config(args.items))
        camp = load_config(path).campaigns[0]
        r = redis.Redis.from_url(server.url)
        first = (int(time.time()) // DAY - args.windows) * DAY
        t0 = time.perf_counter()
        for i in range(args.windows):
            w = first + i * DAY
            acc = accumulator_for(camp.mechanism())
            weights = rng.dirichlet(np.ones(args.items))
            values = rng.choice(args.items, args.per_window, p=weights)
            acc.add(camp.mechanism().encode_batch(values, rng=rng, campaign=camp.name))
            assert store.commit(r, camp, 0, "bench", [], [], {w: acc}, {w: acc}, {w: 1}, 0) == b"ok"
            publish.publish(r, camp, w)
        print(f"stored and published {args.windows} daily windows x {args.per_window:,} reports, "
              f"{args.items} items ({time.perf_counter() - t0:.1f} s)", flush=True)

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        serve = subprocess.Popen([sys.executable, "-m", "ldptel.commands.cli", "serve", "--config", str(path),
                                  "--redis-url", server.url, "--port", str(port), "--no-aggregator",
                                  "--workers", str(args.workers)],
                                 stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "serve.log", "w"))
        endpoints = {  # /windows first: it warms the worker up without parsing a publication
            "/windows": "/v1/campaigns/daily/windows",
            f"/series ({args.windows} windows x {args.items} items)": "/v1/campaigns/daily/series",
            "/series?format=csv": "/v1/campaigns/daily/series?format=csv",
            "/series?items=<5 items>": "/v1/campaigns/daily/series?items=item-0,item-1,item-2,item-3,item-4",
        }
        try:
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {EXPORT}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    if session.get(url + "/healthz", timeout=5).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if time.monotonic() > deadline:
                    sys.exit("serve did not start:\n" + (Path(tmp) / "serve.log").read_text()[-3000:])
                time.sleep(0.1)
            print(f"{'endpoint':44} {'first':>8} {'p50':>8} {'p95':>8} {'max':>8}  (ms, HTTP)  rows")
            for name, p in endpoints.items():
                t = time.perf_counter()
                reply = session.get(url + p, timeout=30)
                cold = (time.perf_counter() - t) * 1000
                assert reply.status_code == 200, reply.text[:300]
                rows = reply.text.count("\n") - 1 if "csv" in p else len(reply.json().get(
                    "rows", reply.json().get("windows", [])))
                times = []
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    assert session.get(url + p, timeout=30).status_code == 200
                    times.append((time.perf_counter() - t) * 1000)
                print(f"{name:44} {cold:8.1f} {pct(times, 50):8.1f} {pct(times, 95):8.1f} {max(times):8.1f}"
                      f"  {rows:>15,}", flush=True)
            etag = session.get(url + "/v1/campaigns/daily/series").headers["ETag"]
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                assert session.get(url + "/v1/campaigns/daily/series",
                                   headers={"If-None-Match": etag}).status_code == 304
                times.append((time.perf_counter() - t) * 1000)
            print(f"{'/series, If-None-Match (304)':44} {'':8} {pct(times, 50):8.1f} {pct(times, 95):8.1f} "
                  f"{max(times):8.1f}")
        finally:
            serve.terminate()
            serve.wait(30)

        from ldptel.server.app import create_app

        client = create_app(load_config(path), server.url).test_client()
        auth = {"Authorization": f"Bearer {EXPORT}"}
        for cold in (False, True):
            own = {name.split(" (")[0]: _in_process(client, p, auth, args.repeat, cold)
                   for name, p in endpoints.items()}
            print(f"in process{', cold' if cold else ''}, p50 (ms): "
                  + ", ".join(f"{name} {ms:.1f}" for name, ms in own.items()))


def _in_process(client, path: str, headers: dict, repeat: int, cold: bool) -> float:
    """p50 ms of ``path`` in process; ``cold``: with the process's parsed publications and kept
    answer bodies dropped before each request (every publication read and parsed again)."""
    from ldptel.server import body_cache, documents

    client.get(path, headers=headers)
    times = []
    for _ in range(repeat):
        if cold:
            documents._parsed.clear()
            body_cache.CACHE.clear()
        t = time.perf_counter()
        assert client.get(path, headers=headers).status_code == 200
        times.append((time.perf_counter() - t) * 1000)
    return pct(times, 50)


if __name__ == "__main__":
    main()
