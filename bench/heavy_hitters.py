"""Heavy-hitter accuracy, state size and decode time on the issue's population.

Zipf(1.1) over 10 000 random strings ([a-z0-9], lengths uniform in 1..16 bytes), ε = 4.

Accuracy: 200 000 devices, several seeds, two level layouts: one byte per level (the config
default, levels = 16, width = 64) and ≈ 11 bits per level (levels = 12, width = 32). Prints per
layout: top-10 recall (mean, min), false positives (reported strings nobody holds, per decode
and as a share of the reported), the largest |estimate − truth|/std error over reported true
strings, encode rate and decode (level walk) time.

Scale: one window's accumulator at the default parameters fed with distinct blocks of 1 M
randomized reports (each block its own devices and randomness; the 100 M point is 100 blocks
accumulated, never held at once) and decoded at N = 1 M, 10 M and 100 M. Prints the state bytes
(the count table in memory, and ``to_bytes`` as stored in Redis), the decode time (CPU seconds of
this single-threaded process, best of ``--repeat``: on a shared machine the wall time also holds
other processes' turns; both are printed), the top-10 recall and the number of strings reported.

    python bench/heavy_hitters.py [--seeds 5] [--fixed-length] [--scale 1e6,1e7,1e8] [--skip-accuracy]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core (numpy's element-wise kernels are serial)

import numpy as np

from ldptel.aggregator.decoders.heavy_hitters import HeavyHitterAccumulator
from ldptel.mechanisms.heavy_hitters import HeavyHitters

ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)


def vocabulary(rng: np.random.Generator, size: int, max_len: int, fixed: bool) -> np.ndarray:
    out: set[str] = set()
    while len(out) < size:
        n = max_len if fixed else int(rng.integers(1, max_len + 1))
        out.add(bytes(ALPHABET[rng.integers(0, ALPHABET.size, n)]).decode())
    words = np.array(sorted(out), dtype=object)
    rng.shuffle(words)
    return words


def one_run(seed: int, levels: int, width: int, fixed: bool, n: int, eps: float) -> dict:
    rng = np.random.default_rng(seed)
    words = vocabulary(rng, 10_000, 16, fixed)
    w = 1.0 / np.arange(1, words.size + 1) ** 1.1
    idx = rng.choice(words.size, size=n, p=w / w.sum())
    counts = np.bincount(idx, minlength=words.size)
    truth = dict(zip(words, counts.tolist(), strict=True))
    top = set(words[np.argsort(-counts, kind="stable")[:10]])
    mech = HeavyHitters(eps, max_length=16, levels=levels, width=width)
    t0 = time.perf_counter()
    batch = mech.encode_batch(words[idx], rng=rng)
    t_enc = time.perf_counter() - t0
    acc = HeavyHitterAccumulator(mech)
    acc.add(batch)
    t0 = time.perf_counter()
    est = acc.estimate()
    t_dec = time.perf_counter() - t0
    false = [s for s in est.labels if truth.get(s, 0) == 0]
    z = [abs(c - truth[s]) / se for s, c, se in zip(est.labels, est.counts, est.std_error, strict=True)
         if truth.get(s, 0) > 0]
    return {"recall": len(top & set(est.labels)) / 10, "fp": len(false), "reported": len(est.labels),
            "max_z": max(z, default=0.0), "enc_rate": n / t_enc, "decode_s": t_dec,
            "candidates": sum(est.candidates)}


BLOCK = 1_000_000


def scale(sizes: list[int], eps: float, repeat: int, seed: int = 7) -> None:
    """State bytes and decode seconds of one accumulator as distinct 1 M blocks accumulate."""
    rng = np.random.default_rng(seed)
    words = vocabulary(rng, 10_000, 16, False)
    w = 1.0 / np.arange(1, words.size + 1) ** 1.1
    mech = HeavyHitters(eps, max_length=16)
    rows, row_of = mech.string_rows(words)  # rows in sorted order; row_of[i] is words[i]'s row
    acc = HeavyHitterAccumulator(mech)
    counts = np.zeros(words.size, dtype=np.int64)
    print(f"\nscale: default parameters (levels = {mech.levels}, width = {mech.width}, "
          f"pool_size = {mech.pool_size}, g = {mech.g}), blocks of {BLOCK:,} reports\n")
    print(f"{'N':>12} {'state bytes':>12} {'stored bytes':>13} {'decode s':>9} {'wall s':>7} {'recall':>7} "
          f"{'reported':>9} {'cands':>7}")
    for target in sorted(sizes):
        while acc.n < target:
            idx = rng.choice(words.size, size=min(BLOCK, target - acc.n), p=w / w.sum())
            counts += np.bincount(idx, minlength=words.size)
            acc.add_columns(mech.randomize_rows(rows, row_of[idx], rng), idx.size)
            acc.state["n"][0] += idx.size
        times, cpu = [], []
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            est = acc.estimate()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        top = set(words[np.argsort(-counts, kind="stable")[:10]])
        print(f"{acc.n:>12,} {acc.state['counts'].nbytes:>12,} {len(acc.to_bytes()):>13,} "
              f"{min(cpu):>9.2f} {min(times):>7.2f} {len(top & set(est.labels)) / 10:>7.1f} "
              f"{len(est.labels):>9} {sum(est.candidates):>7}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--devices", type=int, default=200_000)
    ap.add_argument("--epsilon", type=float, default=4.0)
    ap.add_argument("--fixed-length", action="store_true", help="all strings 16 bytes (hardest)")
    ap.add_argument("--scale", default="1e6,1e7,1e8", help="report counts for the scale table ('' = none)")
    ap.add_argument("--repeat", type=int, default=3, help="decodes per scale point (best is printed)")
    ap.add_argument("--skip-accuracy", action="store_true")
    args = ap.parse_args()
    if not args.skip_accuracy:
        accuracy(args)
    if args.scale:
        scale([int(float(x)) for x in args.scale.split(",")], args.epsilon, args.repeat)


def accuracy(args: argparse.Namespace) -> None:
    print(f"heavy hitters: Zipf(1.1), 10 000 strings ({'16' if args.fixed_length else '1..16'} bytes), "
          f"N = {args.devices}, ε = {args.epsilon}, {args.seeds} seeds\n")
    print(f"{'layout':>22} {'recall':>14} {'FP/decode':>10} {'FP share':>9} {'max|z|':>7} "
          f"{'cands':>8} {'encode/s':>10} {'decode s':>9}")
    for levels, width in ((16, 64), (12, 32)):
        runs = [one_run(1000 + s, levels, width, args.fixed_length, args.devices, args.epsilon)
                for s in range(args.seeds)]
        rec = np.array([r["recall"] for r in runs])
        fp = sum(r["fp"] for r in runs)
        rep = sum(r["reported"] for r in runs)
        print(f"{f'levels={levels} width={width}':>22} "
              f"{f'{rec.mean():.3f} (min {rec.min():.1f})':>14} {fp / len(runs):>10.2f} "
              f"{fp / max(rep, 1):>9.3f} {max(r['max_z'] for r in runs):>7.2f} "
              f"{np.mean([r['candidates'] for r in runs]):>8.0f} "
              f"{np.median([r['enc_rate'] for r in runs]):>10.3g} "
              f"{np.median([r['decode_s'] for r in runs]):>9.2f}")


if __name__ == "__main__":
    main()
