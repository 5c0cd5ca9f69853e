"""Range-query accuracy and decode time, Haar wavelet vs hierarchical histograms.

D = 1024, ε = 1, N = 200 000 devices of a fixed two-component mixture; R runs of the real
encoder and decoder; ranges with log-uniform lengths. Prints, per method: empirical variance /
formula (± its std error from the run means), MSE by range length (octaves) with the formula's
prediction, median and 90th-percentile rank errors against their predicted std errors, the encode
rate, and the decode time (accumulate and estimate separately).

    python bench/range.py [--runs 40]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ldptel.aggregator.decoders import accumulator_for
from ldptel.mechanisms.range_haar import RangeHaar
from ldptel.mechanisms.range_hierarchical import RangeHierarchical

D, EPS, N = 1024, 1.0, 200_000


def population(seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal(0.29 * D, 0.08 * D, int(0.6 * N))
    b = rng.normal(0.68 * D, 0.05 * D, N - a.size)
    return np.clip(np.concatenate((a, b)).round(), 0, D - 1).astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--ranges", type=int, default=600)
    args = ap.parse_args()
    values = population()
    truth = np.bincount(values, minlength=D)
    cum = np.concatenate(([0], np.cumsum(truth)))
    rng = np.random.default_rng(2)
    length = np.minimum(np.floor(2 ** rng.uniform(0, 10 + 1e-9, args.ranges)).astype(np.int64), D - 1)
    lo = (rng.random(args.ranges) * (D - length + 1)).astype(np.int64)
    hi = lo + length - 1
    octave = np.floor(np.log2(length)).astype(int)
    methods = {"haar": RangeHaar(EPS, D), "hierarchical": RangeHierarchical(EPS, D)}
    table: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    print(f"range queries: D = {D}, ε = {EPS}, N = {N}, {args.runs} runs, {lo.size} ranges\n")
    for name, mech in methods.items():
        V = mech.range_variance(lo, hi, truth, N)
        sq, rank = [], []
        t_enc = t_acc = t_est = 0.0
        for r in range(args.runs):
            t0 = time.perf_counter()
            batch = mech.encode_batch(values, rng=np.random.default_rng(5000 + r))
            t1 = time.perf_counter()
            acc = accumulator_for(mech)
            acc.add(batch)
            t2 = time.perf_counter()
            est = acc.estimate()
            e, _ = est.ranges(lo, hi)
            qs = est.quantiles([0.5, 0.9])
            t3 = time.perf_counter()
            t_enc, t_acc, t_est = t_enc + t1 - t0, t_acc + t2 - t1, t_est + t3 - t2
            sq.append((e - (cum[hi + 1] - cum[lo])) ** 2)
            rank.append([(max(0.0, cum[row["value"]] / N - row["q"], row["q"] - cum[row["value"] + 1] / N),
                          row["rank_std_error"]) for row in qs])
        sq_arr = np.array(sq)
        run_ratio = (sq_arr / V).mean(axis=1)
        table[name] = (np.array([sq_arr[:, octave == k].mean() for k in range(10)]),
                       np.array([V[octave == k].mean() for k in range(10)]))
        rk = np.array(rank)  # runs × 2 × (error, predicted se)
        print(f"{name}: {mech!r}")
        print(f"  variance ratio (empirical/formula) {run_ratio.mean():.3f} ± "
              f"{run_ratio.std(ddof=1) / np.sqrt(args.runs):.3f}")
        for i, q in enumerate((0.5, 0.9)):
            print(f"  q = {q}: rank error RMS {np.sqrt((rk[:, i, 0] ** 2).mean()):.4f}, max "
                  f"{rk[:, i, 0].max():.4f}; predicted std error {rk[:, i, 1].mean():.4f}")
        print(f"  encode {N * args.runs / t_enc:,.0f} reports/s; accumulate "
              f"{N * args.runs / t_acc:,.0f} reports/s; estimate (+{lo.size} ranges, 2 quantiles) "
              f"{1000 * t_est / args.runs:.1f} ms\n")
    print("MSE by range length (empirical; formula in parentheses), ×10⁶ devices²")
    print(f"{'length':>10} " + " ".join(f"{m:>22}" for m in methods))
    for k in range(10):
        cells = [f"{table[m][0][k] / 1e6:9.2f} ({table[m][1][k] / 1e6:8.2f})" for m in methods]
        print(f"{f'{2**k}-{2**(k + 1) - 1}':>10} " + " ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
