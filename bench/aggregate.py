"""Aggregator drain throughput: reports/s from Redis streams into committed state, per mechanism.

For each frequency oracle at d = 1024, ε = 1 (RAPPOR: 128 Bloom bits, 2 hashes, 32 cohorts,
1024 candidates) queue N reports (default 1 000 000) as stream entries of ~1000 reports each —
exactly what the collector writes — into an embedded Redis, then time one real worker
(``Worker.run(once=True)``: XREADGROUP, decode, atomic commit + XACK) draining them. Also printed:
the in-process decode rate of the same batches without Redis (``acc.add`` only), for reference.

    .venv/bin/python bench/aggregate.py [--reports N] [--per-entry K] [--read-count R]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import redis

from ldptel.aggregator import accumulator_for, store
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import parse_config
from ldptel.keys import stream_key
from ldptel.store.redis_server import EmbeddedRedis

D = 1024
ORACLES = ("grr", "sue", "oue", "olh", "hadamard", "rappor")
RAPPOR = {"bloom_bits": 128, "hashes": 2, "cohorts": 32, "f": 0.25, "p": 0.35, "q": 0.65}


def campaign_table(oracle: str) -> dict:
    if oracle == "rappor":
        return {"name": "bench-rappor", "oracle": "rappor", **RAPPOR,
                "candidates": [f"item-{i}" for i in range(D)]}
    return {"name": f"bench-{oracle}", "oracle": oracle, "epsilon": 1.0, "domain_size": D}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reports", type=int, default=1_000_000)
    ap.add_argument("--per-entry", type=int, default=1000, help="reports per stream entry (batch)")
    ap.add_argument("--read-count", type=int, default=500, help="aggregator.read_count")
    ap.add_argument("--oracles", default=",".join(ORACLES))
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    rows = []
    with EmbeddedRedis() as server:
        r = redis.Redis.from_url(server.url)
        for oracle in args.oracles.split(","):
            cfg = parse_config({"aggregator": {"read_count": args.read_count},
                                "campaigns": [campaign_table(oracle)]})
            camp = cfg.campaigns[0]
            mech = camp.mechanism()
            values = rng.zipf(1.3, args.reports) % D
            t0 = time.perf_counter()
            pipe = r.pipeline(transaction=False)
            sizes = 0
            encoded = []
            for start in range(0, args.reports, args.per_entry):
                chunk = values[start:start + args.per_entry]
                if oracle == "rappor":
                    chunk = [f"item-{v}" for v in chunk]
                batch = mech.encode_batch(chunk, rng=rng, campaign=camp.name)
                data = batch.SerializeToString()
                sizes += len(data)
                if len(encoded) < 50:
                    encoded.append(batch)
                pipe.xadd(stream_key(camp.name), {"batch": data, "window": 0, "count": batch.count})
                if len(pipe) >= 200:
                    pipe.execute()
            pipe.execute()
            queue_s = time.perf_counter() - t0

            worker = Worker(cfg, r, log=lambda _msg: None)
            t0 = time.perf_counter()
            stats = worker.run(once=True)
            drain_s = time.perf_counter() - t0
            _, n = store.load_accumulator(r, camp, 0)
            assert n == args.reports == stats.reports, (n, stats.reports)

            acc = accumulator_for(mech)
            t0 = time.perf_counter()
            for b in encoded:
                acc.add(b)
            decode_rate = acc.n / (time.perf_counter() - t0)
            rows.append((oracle, sizes / args.reports, sizes / 2**20, queue_s, drain_s,
                         args.reports / drain_s, decode_rate))
            r.delete(stream_key(camp.name), f"{{ldptel:{camp.name}:0}}:state")
            print(f"  {oracle}: drained {stats.line()}", flush=True)

    print(f"\ndrain from Redis, d = {D}, ε = 1, {args.reports:,} reports queued in entries of "
          f"{args.per_entry} (read_count {args.read_count}), one worker, one core\n")
    print(f"{'oracle':9} {'B/report':>8} {'queued MB':>9} {'queue s':>8} {'drain s':>8} "
          f"{'drain reports/s':>16} {'decode-only /s':>15}")
    for oracle, per, mb, qs, ds, rate, dec in rows:
        print(f"{oracle:9} {per:8.1f} {mb:9.1f} {qs:8.2f} {ds:8.2f} {rate:16,.0f} {dec:15,.0f}")


if __name__ == "__main__":
    main()
