"""Plan timings and a table of plans: (mode, oracle, d, n, target) → ε₀ or fake rate, std error,
U and L, and the std error against local OUE at ε = 1 on the same n (√(n·4e/(e−1)²): 1,919 at 10⁶).

    python bench/privacy_plan.py
"""

from __future__ import annotations

import math
import time

from ldptel import privacy_plan

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


def local_oue(n: int) -> float:
    e = math.e
    return math.sqrt(n * 4 * e / (e - 1) ** 2)


def main() -> None:
    print(f"{'mode':>14} {'oracle':>9} {'d':>7} {'n':>9} {'ε':>4} {'ε₀ / λ':>9} {'U':>7} {'L':>7} "
          f"{'std err':>8} {'OUE/this':>8} {'s (cold)':>8} {'s (cached)':>10}")
    for mode, oracle, d, n, eps, delta in CASES:
        start = time.perf_counter()
        p = privacy_plan.plan(mode, oracle, d, eps, delta, n)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        privacy_plan.plan(mode, oracle, d, eps, delta, n)
        cached = time.perf_counter() - start
        knob = p.local_epsilon if mode == "shuffled" else p.fake_rate
        ratio = local_oue(n) / p.std_error if p.std_error else float("nan")
        print(f"{mode:>14} {oracle:>9} {d:>7} {n:>9} {eps:>4} {knob:>9.4g} {p.central_epsilon:>7.4f} "
              f"{p.central_epsilon_lower:>7.4f} {p.std_error or float('nan'):>8.3f} {ratio:>8.1f} "
              f"{cold:>8.3f} {cached:>10.6f}")
    start = time.perf_counter()
    p = privacy_plan.plan("shuffled", "grr", 1024, 1.0, 1e-8, 1_000_000, windows=30)
    print(f"with --windows 30 (GRR, d = 1,024, n = 10⁶): cumulative ε {p.cumulative_epsilon:.4f}, "
          f"{time.perf_counter() - start:.3f} s")


if __name__ == "__main__":
    main()
