"""The hot-path table of issue 27: every row as ldptel ÷ a floor measured beside it, in the same
process, interleaved (the order alternates each round), medians and ranges over ``--rounds``.

    .venv/bin/python bench/table.py [--rounds 5] [--quick] [--only olh oue ...] [--markdown]

A row is a ``Row`` (``bench/rows_decoders.py`` holds the decoder rows): ``setup()`` builds the
input once and returns the two timed callables and the work units one call does (pairs, bits,
reports...). Each round times ldptel and the floor once each; the table prints the per-unit
medians with their [min, max] over the rounds, and the ratio's median and range (the ratio of
each round's pair, so a load change between rounds moves both). A row with no floor prints its
time against its target. Rows live in modules of their own, listed in ``ROW_MODULES``
(``rows_decoders``, ``rows_ingest``: the collector's CPU per request, ``rows_shuffle``: the
shuffler's CPU and its longest Redis call); the load test is ``bench/loadtest_pair.py``
(``make bench-loadtest``), too long for this table.

Each round keeps the fastest of ``Row.repeats`` calls per side (a machine shared with other jobs
stalls some calls; the minimum is the code's own cost). The kernels and BLAS run on one thread
for the ratios (``LDPTEL_KERNEL_THREADS=1``, ``OPENBLAS_NUM_THREADS=1``, set here before ldptel
and numpy are imported, as the floors are single-threaded): the table is one core's; the
``parallel`` rows time the same kernels with every core against one.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("LDPTEL_KERNEL_THREADS", "1")
for _blas in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # one core: BLAS too
    os.environ.setdefault(_blas, "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.modules.setdefault("table", sys.modules[__name__])  # the row modules' ``from table import``: this module

ROW_MODULES = ["rows_decoders", "rows_ingest", "rows_shuffle", "rows_fakes", "rows_tokens"]
# the load test's row: ~100 s per run and a second checkout to compare with, so a target of its
# own (bench/loadtest_pair.py); the table names it
SEPARATE = [("loadtest/run.sh --run-time 60s accepted reports/s", "before this issue, same conditions",
             "≥ 1.5×", "make bench-loadtest BEFORE=<checkout> (bench/loadtest_pair.py, ~10 min)")]


@dataclass
class Timed:
    """What ``Row.setup`` returns: the two callables (no arguments), the work units of one call,
    and an optional check run once after the first round (e.g. counts equal)."""

    ldptel: Callable[[], object]
    floor: Callable[[], object] | None
    units: float
    check: Callable[[], str] | None = None


@dataclass
class Paired:
    """What ``Row.setup`` returns when the two sides are measured interleaved in one call (both
    under the same machine conditions, block by block): ``run`` returns (ldptel's cost, the
    floor's cost) in seconds, for ``units`` work units each; a round keeps the call of the
    smallest sum of ``Row.repeats``."""

    run: Callable[[], tuple[float, float]]
    units: float
    check: Callable[[], str] | None = None


@dataclass
class Row:
    name: str
    unit: str  # "ns/pair", "ns/bit", "ns/report", "s", "ms"
    floor_name: str
    target: str
    setup: Callable[[bool], Timed | Paired]  # setup(quick)
    group: str = ""
    before: str = ""  # the figure before this work, for the table
    rounds: int | None = None  # fewer rounds for a row whose one call is long
    repeats: int = 3  # calls per side and round, the fastest kept (a shared machine's stalls)
    self_timed: bool = False  # the callables return their own cost in seconds (e.g. CPU time)
    results: dict = field(default_factory=dict)


def scale(unit: str) -> float:
    return {"ns/pair": 1e9, "ns/bit": 1e9, "ns/report": 1e9, "s": 1.0, "ms": 1e3}[unit]


def _clock(fn: Callable[[], object], self_timed: bool = False) -> float:
    """Seconds one call of ``fn`` takes (wall), or what it returns (``Row.self_timed``)."""
    t0 = time.perf_counter()
    out = fn()
    return float(out) if self_timed else time.perf_counter() - t0  # type: ignore[arg-type]


def measure(row: Row, rounds: int, quick: bool) -> dict:
    timed = row.setup(quick)
    if isinstance(timed, Paired):
        return _measure_paired(row, timed, rounds)
    clock = functools.partial(_clock, self_timed=row.self_timed)
    timed.ldptel()  # warm-up: compile, caches, page faults
    if timed.floor is not None:
        timed.floor()
    note = timed.check() if timed.check else ""
    ours, floors, ratios = [], [], []
    for r in range(row.rounds or rounds):
        if timed.floor is None:
            ours.append(min(clock(timed.ldptel) for _ in range(row.repeats)))
            continue
        a = b = float("inf")
        for i in range(row.repeats):  # alternate the order: no side always runs first
            if (r + i) % 2 == 0:
                a = min(a, clock(timed.ldptel))
                b = min(b, clock(timed.floor))
            else:
                b = min(b, clock(timed.floor))
                a = min(a, clock(timed.ldptel))
        ours.append(a)
        floors.append(b)
        ratios.append(a / b)
    k = scale(row.unit) / timed.units
    return {"ours": [t * k for t in ours], "floor": [t * k for t in floors], "ratio": ratios,
            "note": note}


def _measure_paired(row: Row, paired: Paired, rounds: int) -> dict:
    paired.run()  # warm-up
    note = paired.check() if paired.check else ""
    ours, floors = [], []
    for _ in range(row.rounds or rounds):
        a, b = min((paired.run() for _ in range(row.repeats)), key=sum)
        ours.append(a)
        floors.append(b)
    k = scale(row.unit) / paired.units
    return {"ours": [t * k for t in ours], "floor": [t * k for t in floors],
            "ratio": [a / b for a, b in zip(ours, floors, strict=True)], "note": note}


def spread(xs: list[float], fmt: str) -> str:
    if not xs:
        return "—"
    return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}–{max(xs):{fmt}}]"


def fmt_for(unit: str) -> str:
    return ".3f" if unit in ("ns/pair", "ns/bit", "s") else ".2f"


def header(rounds: int) -> list[str]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True, cwd=Path(__file__).parent).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    return [f"commit {commit}{' (modified)' if dirty else ''}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
            f"{os.cpu_count()} × {cpu}, Python {sys.version.split()[0]}, "
            f"kernel threads {os.environ.get('LDPTEL_KERNEL_THREADS')} (parallel rows: all cores)",
            f"medians [min–max] of {rounds} rounds (fewer where a row says so), each the fastest of 3 "
            "calls (1 for rows over a second), ldptel and its floor interleaved in one process; "
            "ratio = ldptel ÷ floor per round"]


def print_table(rows: list[Row], rounds: int) -> None:
    for line in header(rounds):
        print(line)
    print()
    print("| hot path | ldptel | floor (measured beside it) | ldptel ÷ floor | target | before (issue) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        res, f = row.results, fmt_for(row.unit)
        n = len(res["ours"])
        ours = f"{spread(res['ours'], f)} {row.unit}" + (f" ({n} rounds)" if n != rounds else "")
        floor = f"{row.floor_name}: {spread(res['floor'], f)} {row.unit}" if res["floor"] else row.floor_name
        ratio = spread(res["ratio"], ".2f") + "×" if res["ratio"] else "—"
        note = f" ({res['note']})" if res["note"] else ""
        if res["floor"]:
            floor += note
        else:
            ours += note
        print(f"| {row.name} | {ours} | {floor} | {ratio} | {row.target} | {row.before} |")
    for name, floor, target, how in SEPARATE:
        print(f"| {name} | {how} | {floor} | — | {target} | 193–209 k reports/s |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="smaller inputs (a smoke run)")
    ap.add_argument("--only", nargs="*", default=None, help="row groups to run (olh, oue, ...)")
    args = ap.parse_args()
    rows: list[Row] = []
    for mod in ROW_MODULES:
        rows += importlib.import_module(mod).ROWS
    if args.only:
        rows = [r for r in rows if r.group in args.only]
    t0 = time.perf_counter()
    for row in rows:
        row.results = measure(row, args.rounds, args.quick)
        print(f"  measured {row.name} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    print_table(rows, args.rounds)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
