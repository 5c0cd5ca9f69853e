"""Cold start of the decoders: a fresh process imports the aggregator and decodes its first batch
of every kernel-backed oracle (OLH, OUE, Hadamard, RAPPOR with its regression, a hierarchical range
estimate), with an empty numba cache (every kernel compiled) and with the cache it left (loaded).

    .venv/bin/python bench/cold_start.py [--runs 3]

Each run uses a fresh ``NUMBA_CACHE_DIR``: the first process compiles, the second loads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import time
t0 = time.perf_counter()
import numpy as np
from ldptel.aggregator.decoders import accumulator_for
from ldptel.mechanisms.hadamard import Hadamard
from ldptel.mechanisms.olh import OLH
from ldptel.mechanisms.range_hierarchical import RangeHierarchical
from ldptel.mechanisms.rappor import RAPPOR
from ldptel.mechanisms.unary import OUE
t1 = time.perf_counter()
rng = np.random.default_rng(1)
strings = [f"s{i}" for i in range(40)]
mechs = [OLH(1.0, 1024), OUE(1.0, 1024), Hadamard(1.0, 1024), RangeHierarchical(1.0, 1024),
         RAPPOR(bloom_bits=16, hashes=2, cohorts=8, f=0.5, p=0.5, q=0.75, candidates=strings)]
for mech in mechs:
    values = [strings[i] for i in rng.integers(0, 40, 1000)] if isinstance(mech, RAPPOR) \
        else rng.integers(0, 1024, 1000)
    acc = accumulator_for(mech)
    acc.add(mech.encode_batch(values, rng=rng))
    acc.estimate()
print(f"{t1 - t0:.3f} {time.perf_counter() - t1:.3f}")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    cold, warm = [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "NUMBA_CACHE_DIR": cache}
            for out in (cold, warm):
                res = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                                     check=True)
                imp, first = map(float, res.stdout.split())
                out.append((imp, first))
    for name, xs in (("empty cache (compiles)", cold), ("warm cache (loads)", warm)):
        imp = [x[0] for x in xs]
        first = [x[1] for x in xs]
        total = [a + b for a, b in xs]
        print(f"{name}: import {statistics.median(imp):.2f} s, first decode of all five "
              f"{statistics.median(first):.2f} s [{min(first):.2f}–{max(first):.2f}], "
              f"total {statistics.median(total):.2f} s ({len(xs)} runs)")


if __name__ == "__main__":
    main()
