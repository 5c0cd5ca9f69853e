"""Heavy hitters in ``privacy_mode = "shuffled"`` (issue 39) beside the local campaign at ε = 1.

Population: n = 10⁶ devices, Zipf(1.1) over 10⁵ random strings ([a-z0-9], lengths uniform in
1..16 bytes), ``max_length`` = 16, one byte per level (J = 16), width 64. The shuffled campaign is
planned as a config would be (``ldptel.privacy.plan``, oracle ``heavy_hitters``): central
(1, 10⁻⁸) at ``batch_min`` = 10⁵ gives ε₀; the window's one release holds all n devices (every
level), so its certified U at n = 10⁶ is printed with L beside it.

What runs: the real mechanism's vectorized encoder (``HeavyHitters.encode_batch`` at ε₀: each
device's level, pool index and hash drawn as on a device) and the real decoder
(``HeavyHitterAccumulator``, the aggregator's). The shuffle is a permutation of the release's
messages, which the decoder's count table does not see, and sealing is tested elsewhere
(tests/test_shuffled_heavy_hitters.py runs serve, shuffler and aggregator), so neither is run
here. The local campaign at ε = 1 gets the SAME devices' values (one run, same data).

Printed per run: top-20 recall, the median std error of the reported counts (shuffled and local,
and their ratio), the coverage of the reported true strings' 95 % intervals; over ``--runs``
runs (new randomization each, same values) the pooled coverage with its binomial std error.

    .venv/bin/python bench/shuffled_heavy_hitters.py [--runs 10] [--devices 1000000]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from heavy_hitters import vocabulary  # bench/ is the script's directory (Zipf strings, as there)

from ldptel.aggregator.decoders.heavy_hitters import HeavyHitterAccumulator
from ldptel.mechanisms.heavy_hitters import HeavyHitters
from ldptel.privacy import plan
from ldptel.privacy.planner import shuffled_bound

TARGET, DELTA, BATCH_MIN, LEVELS, MAX_LENGTH = 1.0, 1e-8, 100_000, 16, 16


def decode(eps: float, values: np.ndarray, rng: np.random.Generator) -> tuple:
    mech = HeavyHitters(eps, max_length=MAX_LENGTH, levels=LEVELS)
    acc = HeavyHitterAccumulator(mech)
    acc.add(mech.encode_batch(values, rng=rng))
    t0 = time.perf_counter()
    est = acc.estimate()
    return est, time.perf_counter() - t0, mech


def score(est, truth: dict, top: set) -> dict:
    inside = [lo <= truth[s] <= hi for s, lo, hi in zip(est.labels, est.ci_low, est.ci_high, strict=True)
              if truth.get(s, 0) > 0]
    return {"recall": len(top & set(est.labels)) / len(top), "reported": len(est.labels),
            "se": float(np.median(est.std_error)) if len(est.labels) else float("nan"),
            "se_top": float(np.median([se for s, se in zip(est.labels, est.std_error, strict=True)
                                       if s in top])),
            "covered": sum(inside), "true_reported": len(inside),
            "false": sum(truth.get(s, 0) == 0 for s in est.labels)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--devices", type=int, default=1_000_000)
    ap.add_argument("--strings", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=39)
    args = ap.parse_args()
    made = plan("shuffled", "heavy_hitters", LEVELS, TARGET, DELTA, BATCH_MIN)
    eps0 = float(made.local_epsilon)
    at_n = shuffled_bound("heavy_hitters", eps0, LEVELS, args.devices, DELTA)
    print(f"plan: central ({TARGET:g}, {DELTA:g}) at batch_min = {BATCH_MIN:,}: ε₀ = {eps0:g}, at batch_min "
          f"U = {made.central_epsilon:.4f}, L = {made.central_epsilon_lower:.4f} ({made.bound}); planned std "
          f"error of a prefix count at a level {made.std_error:.2f}")
    print(f"this release: n = {args.devices:,} devices (all levels): U = {at_n.epsilon:.4f}, "
          f"L = {at_n.epsilon_lower:.4f} at δ = {DELTA:g}")
    rng = np.random.default_rng(args.seed)
    words = vocabulary(rng, args.strings, MAX_LENGTH, fixed=False)
    w = 1.0 / np.arange(1, words.size + 1) ** 1.1
    idx = rng.choice(words.size, size=args.devices, p=w / w.sum())
    counts = np.bincount(idx, minlength=words.size)
    truth = dict(zip(words, counts.tolist(), strict=True))
    top = set(words[np.argsort(-counts, kind="stable")[:20]])
    values = words[idx]
    covered = total = 0
    ratios, recalls, local_recalls = [], [], []
    print(f"{'run':>3} {'recall20':>8} {'reported':>8} {'false':>5} {'median se':>10} {'local se':>9} "
          f"{'ratio':>6} {'top20 ratio':>11} {'covered':>9} {'decode s':>8}")
    for run in range(args.runs):
        r = np.random.default_rng([args.seed, run])
        sh, t_sh, _ = decode(eps0, values, r)
        lo, _, _ = decode(1.0, values, r)
        s, loc = score(sh, truth, top), score(lo, truth, top)
        covered, total = covered + s["covered"], total + s["true_reported"]
        ratio = loc["se"] / s["se"]
        ratio_top = loc["se_top"] / s["se_top"] if loc["se_top"] == loc["se_top"] else float("nan")
        ratios.append(ratio)
        recalls.append(s["recall"])
        local_recalls.append(loc["recall"])
        print(f"{run:>3} {s['recall']:>8.2f} {s['reported']:>8} {s['false']:>5} {s['se']:>10.1f} "
              f"{loc['se']:>9.1f} {ratio:>6.1f} {ratio_top:>11.1f} "
              f"{s['covered']:>4}/{s['true_reported']:<4} {t_sh:>8.2f}")
    share = covered / max(total, 1)
    print(f"top-20 recall: shuffled mean {np.mean(recalls):.3f} (min {min(recalls):.2f}); local ε = 1 mean "
          f"{np.mean(local_recalls):.3f}")
    print(f"median std error ratio local/shuffled: mean {np.mean(ratios):.1f} (min {min(ratios):.1f})")
    print(f"95 % interval coverage over {args.runs} runs: {covered}/{total} = {share:.4f} "
          f"(binomial std error {np.sqrt(share * (1 - share) / max(total, 1)):.4f})")


if __name__ == "__main__":
    main()
