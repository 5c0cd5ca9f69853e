"""``ldptel demo``: simulated devices through every frequency oracle, estimates vs truth.

For now an offline simulation (no services): a Zipf population, each device randomizing its value
with the real mechanism, the real decoder estimating counts with 95% CIs.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ldptel.aggregator import estimate
from ldptel.client import create_mechanism

DOMAIN = 64
EPSILON = 2.0
TOP = 5


def zipf_population(n: int, d: int, rng: np.random.Generator, s: float = 1.1) -> np.ndarray:
    """n values in [0, d) with P(v) ∝ 1/(v+1)^s."""
    w = 1.0 / np.arange(1, d + 1) ** s
    return rng.choice(d, size=n, p=w / w.sum())


def demo_mechanisms() -> dict:
    cands = [f"item-{i}" for i in range(DOMAIN)]
    return {
        "grr": create_mechanism("grr", epsilon=EPSILON, domain_size=DOMAIN),
        "sue": create_mechanism("sue", epsilon=EPSILON, domain_size=DOMAIN),
        "oue": create_mechanism("oue", epsilon=EPSILON, domain_size=DOMAIN),
        "olh": create_mechanism("olh", epsilon=EPSILON, domain_size=DOMAIN),
        "hadamard": create_mechanism("hadamard", epsilon=EPSILON, domain_size=DOMAIN),
        "rappor": create_mechanism("rappor", bloom_bits=128, hashes=2, cohorts=32, f=0.25,
                                   p=0.35, q=0.65, candidates=cands),
    }


def run_demo(args: argparse.Namespace) -> int:
    if args.users < 1000:
        print("ldptel demo: --users must be at least 1000", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed)
    values = zipf_population(args.users, DOMAIN, rng)
    truth = np.bincount(values, minlength=DOMAIN)
    print(f"ldptel demo: {args.users} simulated devices, Zipf(1.1) over {DOMAIN} items\n")
    for name, mech in demo_mechanisms().items():
        t0 = time.perf_counter()
        if name == "rappor":
            batch = mech.encode_batch([f"item-{v}" for v in values], rng=rng)
        else:
            batch = mech.encode_batch(values, rng=rng)
        est = estimate(mech, [batch])
        dt = time.perf_counter() - t0
        print(f"{name:9s} ε = {mech.epsilon:.2f}  ({dt:.2f} s)")
        print(f"  {'item':>8} {'true':>8} {'estimate':>10} {'95% CI':>22} {'normalized':>10}")
        for v in np.argsort(-est.counts)[:TOP]:
            ci = f"[{est.ci_low[v]:.0f}, {est.ci_high[v]:.0f}]"
            flag = "" if est.ci_low[v] <= truth[v] <= est.ci_high[v] else "  (outside CI)"
            print(f"  {v:>8} {truth[v]:>8} {est.counts[v]:>10.0f} {ci:>22} "
                  f"{est.normalized[v]:>10.0f}{flag}")
        print()
    return 0
