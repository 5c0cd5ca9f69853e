"""Numeric-mechanism benchmark: per mechanism (piecewise, duchi, hybrid, 1bitmean) at ε, on
N reports of a log-normal population clipped to [0, 600]: batch encode rate (``encode_batch``
into ``ReportBatch``es of 100 000), decode rate (the worker's path: parse the serialized batch,
``Accumulator.add``, ``estimate``), the median time of one ``encode`` call (OS randomness; for
1bitmean the memoized device path), and the variance ratio: the empirical variance of the mean
over ``--reps`` repetitions of ``--rep-n`` reports on a fixed population / the formula
Σ Var(y | tᵢ)/N² (``mean_variance``; its sampling sd is ≈ √(2/reps)).

    .venv/bin/python bench/numeric.py [--n 1000000] [--epsilon 1] [--repeat 5]

Rates are medians over ``--repeat`` runs, one process. Targets: encode ≥ 1 M reports/s, decode
≥ 10 M reports/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from oracles import median_time  # bench/ is the script's directory

from ldptel.aggregator.decoders import accumulator_for
from ldptel.mechanisms import NUMERIC_MECHANISMS, OneBitMean
from ldptel.proto import ReportBatch

CHUNK = 100_000
LOWER, UPPER = 0.0, 600.0


def one_encode_us(mech, repeat: int = 2000) -> float:
    if isinstance(mech, OneBitMean):
        mech = OneBitMean(mech.epsilon, LOWER, UPPER, buckets=mech.buckets, secret=os.urandom(32))
    times = []
    for v in np.linspace(LOWER, UPPER, repeat):
        t0 = time.perf_counter()
        mech.encode(float(v))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def variance_ratio(mech, reps: int, n: int, rng: np.random.Generator) -> float:
    values = np.clip(rng.lognormal(np.log(150), 0.8, n), LOWER, UPPER)
    y = mech.unbiased_unit(mech.randomize(np.tile(values, reps), rng)).reshape(reps, n)
    return float(y.mean(axis=1).var(ddof=1) / mech.mean_variance(values))


def run(name: str, args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(args.seed)
    mech = NUMERIC_MECHANISMS[name](args.epsilon, LOWER, UPPER)
    values = rng.lognormal(np.log(150), 0.8, args.n)
    chunks = [values[i:i + CHUNK] for i in range(0, args.n, CHUNK)]
    blobs: list[bytes] = []

    def encode() -> None:
        blobs[:] = [mech.encode_batch(c, rng=rng).SerializeToString() for c in chunks]

    def decode() -> None:
        acc = accumulator_for(mech)
        for blob in blobs:
            acc.add(ReportBatch.FromString(blob))
        acc.estimate()

    t_enc = median_time(encode, args.repeat)
    t_dec = median_time(decode, args.repeat)
    return {"mechanism": name, "encode": args.n / t_enc, "decode": args.n / t_dec,
            "one": one_encode_us(mech), "ratio": variance_ratio(mech, args.reps, args.rep_n, rng),
            "bytes": sum(map(len, blobs)) / args.n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--reps", type=int, default=1000, help="repetitions for the variance ratio")
    ap.add_argument("--rep-n", type=int, default=2000, help="reports per repetition")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(f"N = {args.n:,} reports, ε = {args.epsilon:g}, medians of {args.repeat} runs; variance ratio "
          f"over {args.reps} × {args.rep_n} reports (sd ≈ {(2 / args.reps) ** 0.5:.3f})")
    print(f"{'mechanism':>10} {'encode/s':>12} {'decode/s':>12} {'encode()':>10} {'bytes/rep':>10} "
          f"{'var ratio':>10}")
    for name in NUMERIC_MECHANISMS:
        r = run(name, args)
        print(f"{name:>10} {r['encode']:>12,.0f} {r['decode']:>12,.0f} {r['one']:>8.1f}µs "
              f"{r['bytes']:>10.3f} {r['ratio']:>10.3f}")


if __name__ == "__main__":
    main()
