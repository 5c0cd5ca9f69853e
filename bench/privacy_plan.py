"""Plan timings and a table of plans: (mode, oracle, d, n, target) → ε₀ or fake rate, std error,
U and L, and the std error against local OUE at ε = 1 on the same n (√(n·4e/(e−1)²): 1,919 at 10⁶).

Timings per plan, each in a fresh Python process (nothing cached in memory, the plan cache file
not used; the import of the privacy math is timed apart, it is not part of a plan):

- ``cold``: the first ``planner.compute_plan`` call of the process (the issue's bar: < 1 s);
- ``warm``: the same call again in that process (its in-memory cache);
- ``disk``: ``ldptel.privacy.plan`` in another fresh process once the plan is stored on disk
  (what every collector worker, shuffler and aggregator pays after the first).

    python bench/privacy_plan.py
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time

CASES = [
    ("shuffled", "grr", 1024, 1_000_000, 1.0, 1e-8),
    ("shuffled-fakes", "histogram", 1024, 100_000, 1.0, 1e-8),
    ("shuffled", "grr", 100, 100_000, 1.0, 1e-6),
    ("shuffled", "oue", 1024, 1_000_000, 1.0, 1e-8),
    ("shuffled", "olh", 1024, 1_000_000, 1.0, 1e-8),
    ("shuffled", "hadamard", 1024, 1_000_000, 1.0, 1e-8),
    ("shuffled", "sue", 1024, 1_000_000, 1.0, 1e-8),
    ("shuffled", "grr", 16, 10_000_000, 0.5, 1e-8),
    ("shuffled", "grr", 100_000, 1_000_000, 1.0, 1e-8),
    ("shuffled-fakes", "histogram", 100_000, 1_000_000, 1.0, 1e-8),
]

_TIMED = """
import json, sys, time
t0 = time.perf_counter()
from ldptel.privacy import planner
t1 = time.perf_counter()
args = json.loads(sys.argv[1])
plan = planner.compute_plan(*args)
t2 = time.perf_counter()
planner.compute_plan(*args)
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "cold": t2 - t1, "warm": t3 - t2, "plan": plan.as_dict()}))
"""

_DISK = """
import json, sys, time
from ldptel.privacy import plan
args = json.loads(sys.argv[1])
plan(*args)  # stores it (or finds it stored)
print("stored")
"""

_DISK_HIT = """
import json, sys, time
t0 = time.perf_counter()
from ldptel.privacy import plan
plan(*json.loads(sys.argv[1]))
print(json.dumps({"disk": time.perf_counter() - t0}))
"""


def local_oue(n: int) -> float:
    e = math.e
    return math.sqrt(n * 4 * e / (e - 1) ** 2)


def _run(code: str, args: list, env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True,
                          check=True, env=env).stdout.strip()


def main() -> None:
    cache = tempfile.NamedTemporaryFile(prefix="ldptel-plans-", suffix=".json", delete=False).name
    os.unlink(cache)
    env = {**os.environ, "LDPTEL_PLAN_CACHE": cache}
    print(f"{'mode':>14} {'oracle':>9} {'d':>7} {'n':>9} {'ε':>4} {'ε₀ / λ':>9} {'U':>7} {'L':>7} "
          f"{'std err':>8} {'OUE/this':>8} {'s cold':>7} {'s warm':>9} {'s disk':>7}")
    colds = []
    for mode, oracle, d, n, eps, delta in CASES:
        args = [mode, oracle, d, eps, delta, n]
        timed = json.loads(_run(_TIMED, args, env))
        _run(_DISK, args, env)
        disk = json.loads(_run(_DISK_HIT, args, env))["disk"]
        p = timed["plan"]
        colds.append(timed["cold"])
        knob = p["local_epsilon"] if mode == "shuffled" else p["fake_rate"]
        ratio = local_oue(n) / p["std_error"] if p["std_error"] else float("nan")
        print(f"{mode:>14} {oracle:>9} {d:>7} {n:>9} {eps:>4} {knob:>9.4g} {p['central_epsilon']:>7.4f} "
              f"{p['central_epsilon_lower']:>7.4f} {p['std_error'] or float('nan'):>8.3f} {ratio:>8.1f} "
              f"{timed['cold']:>7.3f} {timed['warm']:>9.6f} {disk:>7.3f}")
    print(f"cold plans: the slowest {max(colds):.3f} s; the import of the privacy math (not in a plan): "
          f"{timed['import']:.2f} s; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    os.unlink(cache)
    from ldptel.privacy import planner

    start = time.perf_counter()
    p = planner.compute_plan("shuffled", "grr", 1024, 1.0, 1e-8, 1_000_000, windows=30)
    print(f"with --windows 30 (GRR, d = 1,024, n = 10⁶): cumulative ε {p.cumulative_epsilon:.4f}, "
          f"{time.perf_counter() - start:.3f} s")


if __name__ == "__main__":
    main()
