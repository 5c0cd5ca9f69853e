"""Shuffler throughput: reports/s from the ingress stream to the analysis stream, per mechanism.

For each frequency oracle at d = 1024, ε = 1 (RAPPOR: 128 Bloom bits, 2 hashes, 32 cohorts) queue
N reports (default 200 000) as ingress entries of ``--per-entry`` reports (default 100, as the load
test's devices send) into an embedded Redis, then time one real shuffler draining them
(``Shuffler.run(once=True)``: XRANGE, parse, one permutation, re-pack, ``scripts.SHUFFLE``), wall
and process CPU time, and Redis's own CPU (``INFO cpu``) over the drain.

    .venv/bin/python bench/shuffle.py [--reports N] [--per-entry K] [--batch-reports B]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import redis

from ldptel.campaigns.config import parse_config
from ldptel.keys import ingress_key, stream_key
from ldptel.shuffler.worker import Shuffler
from ldptel.store.redis_server import EmbeddedRedis

D = 1024
ORACLES = ("grr", "oue", "olh", "hadamard", "rappor")
RAPPOR = {"bloom_bits": 128, "hashes": 2, "cohorts": 32, "f": 0.25, "p": 0.35, "q": 0.65}


def campaign_table(oracle: str) -> dict:
    base = {"name": f"bench-{oracle}", "shuffle_min_reports": 1000}
    if oracle == "rappor":
        return {**base, "oracle": "rappor", **RAPPOR, "candidates": [f"item-{i}" for i in range(D)]}
    return {**base, "oracle": oracle, "epsilon": 1.0, "domain_size": D}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def redis_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reports", type=int, default=200_000)
    ap.add_argument("--per-entry", type=int, default=100, help="reports per ingress entry (batch)")
    ap.add_argument("--batch-reports", type=int, default=1000, help="[shuffler] batch_reports")
    ap.add_argument("--oracles", default=",".join(ORACLES))
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    print(f"{args.reports} reports in ingress entries of {args.per_entry}, re-packed by "
          f"{args.batch_reports}")
    print(f"{'oracle':10} {'wall s':>7} {'reports/s':>11} {'CPU s/1M':>9} {'Redis CPU s/1M':>15}")
    with EmbeddedRedis() as server:
        r = redis.Redis.from_url(server.url)
        for oracle in args.oracles.split(","):
            cfg = parse_config({"shuffler": {"batch_reports": args.batch_reports},
                                "campaigns": [campaign_table(oracle)]})
            camp = cfg.campaigns[0]
            mech = camp.mechanism()
            values = rng.zipf(1.3, args.reports) % D
            labels = camp.labels()
            pipe = r.pipeline(transaction=False)
            for i, start in enumerate(range(0, args.reports, args.per_entry)):
                chunk = values[start:start + args.per_entry]
                data = [labels[v] for v in chunk] if oracle == "rappor" else chunk
                batch = mech.encode_batch(data, rng=rng, campaign=camp.name)
                pipe.xadd(ingress_key(camp.name), {"batch": batch.SerializeToString(), "window": 0,
                                                   "count": batch.count}, id=f"0-{i + 1}")
            pipe.execute()
            shuffler = Shuffler(cfg, r)
            c0, rc0, t0 = cpu_seconds(), redis_cpu(r), time.perf_counter()
            stats = shuffler.run(once=True)
            wall, cpu, rcpu = time.perf_counter() - t0, cpu_seconds() - c0, redis_cpu(r) - rc0
            assert stats.ingress_reports == args.reports and r.xlen(ingress_key(camp.name)) == 0
            per_m = 1e6 / args.reports
            print(f"{oracle:10} {wall:7.2f} {args.reports / wall:11,.0f} {cpu * per_m:9.2f} "
                  f"{rcpu * per_m:15.2f}")
            r.delete(ingress_key(camp.name), stream_key(camp.name))


if __name__ == "__main__":
    main()
