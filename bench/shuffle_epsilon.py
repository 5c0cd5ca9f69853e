"""Time and accuracy of ldptel.privacy.shuffle_epsilon against the authors' numerical bound.

For n ∈ {10⁴, 10⁵, 10⁶} and ε₀ ∈ {1, 2, 4} at δ = 10⁻⁶, prints our ε, the authors' tight value
(apple/ml-shuffling-amplification, lower mode, step 1; tests/reference/fmt2021_shuffle_epsilon.json),
the ratio, the authors' upper bound at their README settings, and the seconds per uncached call
(best of --repeat, cache cleared before each). Then the same timing for larger n (blocked C).

    python bench/shuffle_epsilon.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ldptel.privacy import clones as privacy

REFERENCE = Path(__file__).resolve().parent.parent / "tests" / "reference" / "fmt2021_shuffle_epsilon.json"


def timed(epsilon0: float, n: int, delta: float, repeat: int) -> tuple[float | None, float]:
    best, value = float("inf"), None
    for _ in range(repeat):
        privacy._shuffle_epsilon_cached.cache_clear()
        start = time.perf_counter()
        value = privacy.shuffle_epsilon(epsilon0, n, delta)
        best = min(best, time.perf_counter() - start)
    return value, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    reference = json.loads(REFERENCE.read_text())
    delta = reference["delta"]
    print(f"{'n':>9} {'ε₀':>3} {'ours':>10} {'authors':>10} {'ratio':>8} {'auth.README':>11} {'s/call':>7}")
    for row in reference["rows"]:
        ours, seconds = timed(row["epsilon0"], row["n"], delta, args.repeat)
        tight = row["authors_tight"]
        ratio = ours / tight if ours is not None else float("nan")
        print(
            f"{row['n']:>9} {row['epsilon0']:>3} {ours:>10.7f} {tight:>10.7f} {ratio:>8.5f}"
            f" {row['authors_upper_default']:>11.6f} {seconds:>7.3f}"
        )
    print("larger n:")
    for n in (10**7, 10**8, 10**9):
        for epsilon0 in (1.0, 4.0):
            ours, seconds = timed(epsilon0, n, delta, args.repeat)
            print(f"{n:>10} {epsilon0:>3} {ours!s:>22} {seconds:>7.3f}")


if __name__ == "__main__":
    main()
