"""Frequency-oracle benchmark: for d = 1024, ε = 1, N = 1 000 000 reports, per
mechanism: batch encode rate, decode rate (accumulate + estimate), MSE / (N·Var*), and the
median time of one ``encode`` call (OS randomness).

    .venv/bin/python bench/oracles.py [--n 1000000] [--d 1024] [--epsilon 1] [--repeat 3]
                                      [--epsilon-inf 2] [--only grr grr-memo ...]

``<oracle>-memo`` rows are the memoized variants (ε₁ = ``--epsilon``, ε∞ = ``--epsilon-inf``):
encode/s is ``encode_batch`` of fresh simulated devices (PRR and IRR drawn from the generator),
"secrets/s" the same N reports from N/100 devices with HMAC-derived permanent responses (100
reports per device, the longitudinal case), encode() µs is ``mech.device(secret).encode``
after its first call, and "decode vs plain" the decode rate over the plain oracle's (same run).

Rates are medians over ``--repeat`` runs, single process (numpy's BLAS may use more threads in
RAPPOR's regression; set OMP_NUM_THREADS=1 for a strict single core). Targets: decode ≥ 1 M
reports/s (OLH ≥ 300 k), RAPPOR accumulation ≥ 1 M/s, batch encode ≥ 1 M/s, encode ≤ 20 µs.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import numpy as np

from ldptel.aggregator import accumulator_for
from ldptel.client import create_mechanism

CHUNK = 100_000  # reports per encoded batch


def population(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    w = 1.0 / np.arange(1, d + 1) ** 1.1
    return rng.choice(d, size=n, p=w / w.sum())


def build(name: str, d: int, eps: float, eps_inf: float = 2.0):
    if name.endswith("-memo"):
        return create_mechanism(name[:-5], epsilon=eps, domain_size=d, memoize=True,
                                epsilon_inf=eps_inf)
    if name == "rappor":
        return create_mechanism("rappor", bloom_bits=128, hashes=2, cohorts=64, f=0.5, p=0.5,
                                q=0.75, candidates=[f"v{i}" for i in range(d)])
    return create_mechanism(name, epsilon=eps, domain_size=d)


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(name: str, n: int, d: int, eps: float, repeat: int, seed: int, eps_inf: float) -> dict:
    rng = np.random.default_rng(seed)
    values = population(n, d, rng)
    truth = np.bincount(values, minlength=d)
    mech = build(name, d, eps, eps_inf)
    inputs = [f"v{v}" for v in values] if name == "rappor" else values
    chunks = [inputs[i : i + CHUNK] for i in range(0, n, CHUNK)]

    batches: list = []

    def encode() -> None:
        batches.clear()
        batches.extend(mech.encode_batch(c, rng=rng) for c in chunks)

    t_encode = median_time(encode, repeat)
    columns = [(mech.columns(b), b.count) for b in batches]

    acc_holder: list = []

    def accumulate() -> None:
        acc = accumulator_for(mech)
        for cols, count in columns:
            acc.add_columns(cols, count)
        acc.state["n"][0] = n
        acc_holder[:] = [acc]

    t_acc = median_time(accumulate, repeat)
    t_est = median_time(lambda: acc_holder[0].estimate(), repeat)
    est = acc_holder[0].estimate()
    err = est.counts - truth
    if name == "rappor":
        theory = float(np.mean(est.std_error**2))
        var_star = float("nan")
    else:
        var_star = mech.variance_star()
        theory = n * var_star
    one = [inputs[0]] * 200
    encoder = mech.device(os.urandom(32)) if name.endswith("-memo") else mech
    encoder.encode(one[0] if name == "rappor" else int(one[0]))  # memoized: the PRR is derived once
    t_one = []
    for v in one:
        t0 = time.perf_counter()
        encoder.encode(v if name == "rappor" else int(v))
        t_one.append(time.perf_counter() - t0)
    secrets_rate = float("nan")
    if name.endswith("-memo"):
        # 100 reports of one fixed value per device, devices in chunks of CHUNK reports
        devices = [os.urandom(32) for _ in range(max(1, CHUNK // 100))]
        per_report = [devices[i // 100] for i in range(CHUNK)]
        fixed = np.repeat(values[: n // 100], 100)
        t_sec = median_time(lambda: [mech.encode_batch(fixed[i : i + CHUNK], rng=rng,
                                                       secrets=per_report[: fixed[i : i + CHUNK].size])
                                     for i in range(0, fixed.size, CHUNK)], repeat)
        secrets_rate = fixed.size / t_sec
    return {
        "mechanism": name,
        "encode_per_s": n / t_encode,
        "accumulate_per_s": n / t_acc,
        "decode_per_s": n / (t_acc + t_est),
        "estimate_s": t_est,
        "mse_ratio": float(np.mean(err**2)) / theory,
        "var_star": var_star,
        "encode_one_us": statistics.median(t_one) * 1e6,
        "secrets_per_s": secrets_rate,
    }


def paired_decode_ratio(oracle: str, n: int, d: int, eps: float, eps_inf: float, pairs: int,
                        seed: int) -> float:
    """Median over ``pairs`` back-to-back decode timings of t_plain/t_memo (> 1: the memoized
    decode is faster), the order alternating: robust to a machine whose load drifts."""
    rng = np.random.default_rng(seed)
    values = population(n, d, rng)
    timings = []
    cols = []
    for name in (oracle, f"{oracle}-memo"):
        mech = build(name, d, eps, eps_inf)
        cols.append((mech, [(mech.columns(b), b.count) for b in
                            (mech.encode_batch(values[i : i + CHUNK], rng=rng)
                             for i in range(0, n, CHUNK))]))

    def decode(mech, columns) -> None:
        acc = accumulator_for(mech)
        for c, count in columns:
            acc.add_columns(c, count)
        acc.state["n"][0] = n
        acc.estimate()

    for i in range(pairs):  # alternate which one runs first (ABBA): no order advantage
        order = (0, 1) if i % 2 == 0 else (1, 0)
        t = {k: median_time(lambda k=k: decode(*cols[k]), 1) for k in order}
        timings.append(t[0] / t[1])
    return statistics.median(timings)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--epsilon-inf", type=float, default=2.0, help="ε∞ of the -memo rows")
    ap.add_argument("--only", nargs="*", default=None, help="mechanisms to run")
    ap.add_argument("--pairs", type=int, default=0,
                    help="also time decode of each -memo row and its plain oracle back to back this "
                         "many times and print the median ratio")
    args = ap.parse_args()
    names = args.only or ["grr", "sue", "oue", "olh", "hadamard", "rappor",
                          *(f"{o}-memo" for o in ("grr", "sue", "oue", "olh", "hadamard"))]
    print(f"d = {args.d}, ε = {args.epsilon}, ε∞ = {args.epsilon_inf} (-memo rows), "
          f"N = {args.n:,}, median of {args.repeat}")
    header = (f"{'mechanism':13} {'encode/s':>12} {'decode/s':>12} {'accum/s':>12} "
              f"{'estimate s':>10} {'MSE/theory':>10} {'encode() µs':>12} {'secrets/s':>12} "
              f"{'decode vs plain':>15}")
    print(header)
    print("-" * len(header))
    decode_rate: dict[str, float] = {}
    for name in names:
        r = run(name, args.n, args.d, args.epsilon, args.repeat, args.seed, args.epsilon_inf)
        decode_rate[name] = r["decode_per_s"]
        plain = decode_rate.get(name.removesuffix("-memo"), float("nan"))
        vs = f"{r['decode_per_s'] / plain:.2f}" if name.endswith("-memo") else ""
        sec = f"{r['secrets_per_s']:,.0f}" if name.endswith("-memo") else ""
        print(f"{r['mechanism']:13} {r['encode_per_s']:>12,.0f} {r['decode_per_s']:>12,.0f} "
              f"{r['accumulate_per_s']:>12,.0f} {r['estimate_s']:>10.3f} {r['mse_ratio']:>10.3f} "
              f"{r['encode_one_us']:>12.1f} {sec:>12} {vs:>15}", flush=True)
    for name in names:
        if args.pairs and name.endswith("-memo"):
            ratio = paired_decode_ratio(name[:-5], args.n, args.d, args.epsilon, args.epsilon_inf,
                                        args.pairs, args.seed)
            print(f"{name}: decode rate / plain, median of {args.pairs} back-to-back pairs: "
                  f"{ratio:.3f}", flush=True)
    print("MSE/theory: empirical MSE over all items / (N·Var*) (RAPPOR: / mean predicted std_error²);"
          f" one run over d items, so its sd is about sqrt(2/d) = {math.sqrt(2 / args.d):.3f}")
    print("decode/s = N / (accumulate + estimate); RAPPOR's estimate (the regression over its"
          " candidates) costs the same at any N")


if __name__ == "__main__":
    main()
