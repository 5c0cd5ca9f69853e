"""The load-test row of issue 27 (``make bench-loadtest``): ``loadtest/run.sh --run-time 60s`` on
this checkout and, with ``--before DIR``, on another checkout of ldptel (its own ``.venv``: e.g. a
``git worktree`` of the commit before the change, ``make install-test`` run in it), interleaved
(before, after, after, before, …) so that both meet the same load; prints each run's accepted
reports/s and exactly-once verdict, then the medians, ranges and the ratio. Each run takes about
100 s (start-up, 60 s of load, drain and check), so it is kept out of ``make bench``. Each side
runs its own ``loadtest/ldptel.toml``: since issue 36 it holds ``lt-sealed`` (a shuffled-fakes
campaign whose shuffler seals ~63,600 fakes a release), so a checkout before that meets a lighter
load (docs/privacy.md: 194,000 against 142,000–154,000 reports/s on 2 shared cores).

    .venv/bin/python bench/loadtest_pair.py [--before DIR] [--pairs 3] [--run-time 60s]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def run(checkout: Path, out: Path, run_time: str) -> tuple[float, bool, str]:
    """(accepted reports/s, exactly once, load average before) of one ``run.sh``."""
    cmd = ["bash", str(checkout / "loadtest" / "run.sh"), "--run-time", run_time, "--out", str(out)]
    proc = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True)
    summary = (out / "summary.txt").read_text() if (out / "summary.txt").exists() else proc.stderr[-2000:]
    rate = re.search(r"accepted reports/s ([\d,]+)", summary)
    load = re.search(r"load average before ([\d.]+)", summary)
    once = proc.returncode == 0 and "OK: every accepted report counted exactly once" in summary
    return (float(rate.group(1).replace(",", "")) if rate else 0.0), once, (load.group(1) if load else "?")


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f} [{min(xs):,.0f}–{max(xs):,.0f}]" if xs else "—"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, default=None, help="a checkout of the version to compare with")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--run-time", default="60s")
    args = ap.parse_args()
    sides = [("after", HERE)] + ([("before", args.before.resolve())] if args.before else [])
    tmp = Path(tempfile.mkdtemp(prefix="ldptel-loadtest-pair-"))
    got: dict[str, list[float]] = {name: [] for name, _ in sides}
    ok = True
    for i in range(args.pairs):
        for name, checkout in (sides if i % 2 else sides[::-1]):
            rate, once, load = run(checkout, tmp / f"{name}-{i}", args.run_time)
            ok &= once
            got[name].append(rate)
            print(f"  {name} run {i + 1}: {rate:,.0f} accepted reports/s, "
                  f"{'exactly once' if once else 'CHECK FAILED'}, load average before {load}", flush=True)
    print(f"\nloadtest/run.sh --run-time {args.run_time}, {args.pairs} runs per side, interleaved "
          f"({os.cpu_count()} CPUs); logs in {tmp}")
    for name, _ in sides:
        print(f"{name}: {spread(got[name])} accepted reports/s")
    if args.before and got["before"] and got["after"]:
        ratios = [a / b for a, b in zip(got["after"], got["before"], strict=True) if b]
        print(f"after ÷ before: {statistics.median(ratios):.2f}× [{min(ratios):.2f}–{max(ratios):.2f}] "
              "(per pair; target ≥ 1.5×)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
