"""The shuffler's own fakes (``fake_source = "shuffler"``; ``ldptel.shuffler.fakes``) as rows of
``bench/table.py``: one release's fakes at d = 1,024 and central (1, 10⁻⁸), μ ≈ 62 per bucket
(~63,600 fakes: Poisson draws with OS randomness, rows, one HPKE seal each):

- its CPU in one process against the HPKE seals alone of as many rows, made beforehand
  (``ldptel.sealing.seal``: what any implementation that seals each fake on its own must pay);
- sealed on 2 processes (``shuffler.sealer.Sealer``, ``[shuffler] fake_processes``) ÷ on 1: the
  wall time of a release, and its CPU-seconds (this process and the pool's children, from
  ``/proc``), both sides in one run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from table import Row, Timed

from ldptel import sealing
from ldptel.mechanisms.histogram import Histogram
from ldptel.mechanisms.rows import row_bytes, to_rows
from ldptel.privacy.fake_messages import fakes_for
from ldptel.shuffler.fakes import sealed_fakes
from ldptel.shuffler.sealer import Sealer

D, EPS, DELTA = 1024, 1.0, 1e-8
TICK = os.sysconf("SC_CLK_TCK")


def release_fakes(quick: bool) -> Timed:
    mu = fakes_for(EPS, DELTA)
    if quick:
        mu /= 10
    mech = Histogram(D)
    public = sealing.new_private().public_key()
    info = sealing.info("bench-fakes", 1, 0, sealing.key_id(sealing.public_bytes(public)))
    rows = row_bytes(to_rows(mech, {"values": np.arange(round(mu * D)) % D}, round(mu * D)))
    made: list[int] = []

    def ours() -> float:
        c0 = time.process_time()
        out = sealed_fakes(mech, mu, public, info)
        cpu = time.process_time() - c0
        made.append(len(out))
        return cpu

    def floor() -> float:
        c0 = time.process_time()
        sealing.seal(rows, public, info)
        return time.process_time() - c0

    def check() -> str:
        per = len(rows)
        return f"μ = {mu:.1f} per bucket: {np.mean(made):,.0f} fakes per release (floor: {per:,} seals)"

    return Timed(ours, floor, 1.0, check)


def _cpu(sealer: Sealer) -> float:
    """CPU-seconds so far of this process and of ``sealer``'s pool processes (``/proc``)."""
    pool = sealer._pool
    pids = list(pool._processes) if pool is not None and pool._processes else []  # type: ignore[attr-defined]
    total = time.process_time()
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    return total


def on_processes(cpu: bool):
    """One release's fakes sealed on 2 processes ÷ on 1: wall seconds, or (``cpu``) CPU-seconds
    of every process that sealed."""
    def setup(quick: bool) -> Timed:
        mu = fakes_for(EPS, DELTA) / (10 if quick else 1)
        mech = Histogram(D)
        public = sealing.new_private().public_key()
        info = sealing.info("bench-fakes", 1, 0, sealing.key_id(sealing.public_bytes(public)))
        two, one = Sealer(2), Sealer(1)
        sealed_fakes(mech, mu / 10, public, info, seal=two.seal)  # the pool started before the clock

        def on(sealer: Sealer):
            def run() -> float:
                c0, t0 = _cpu(sealer), time.perf_counter()
                sealed_fakes(mech, mu, public, info, seal=sealer.seal)
                return _cpu(sealer) - c0 if cpu else time.perf_counter() - t0
            return run

        return Timed(on(two), on(one), 1.0, lambda: f"μ = {mu:.1f}: ~{mu * D:,.0f} seals a release")
    return setup


ROWS = [
    Row("shuffler's fakes of one release (d = 1,024, μ ≈ 62)", "s", "HPKE seals alone, as many rows",
        "≤ 1.2× the seals", release_fakes, group="fakes", repeats=1, self_timed=True, rounds=3),
    Row("shuffler's fakes of one release, wall: 2 processes ÷ 1", "s", "1 process (fake_processes = 1)",
        "≤ 0.6× (2 cores)", on_processes(cpu=False), group="fakes", repeats=1, self_timed=True, rounds=3),
    Row("shuffler's fakes of one release, CPU-s: 2 processes ÷ 1", "s", "1 process (fake_processes = 1)",
        "≤ 1.1× (same seals)", on_processes(cpu=True), group="fakes", repeats=1, self_timed=True, rounds=3),
]
