"""The shuffler's own fakes (``fake_source = "shuffler"``; ``ldptel.shuffler.fakes``) as a row of
``bench/table.py``: the CPU of one release's fakes at d = 1,024 and central (1, 10⁻⁸), μ ≈ 62 per
bucket (~63,600 fakes: Poisson draws with OS randomness, rows, one HPKE seal each), against the
HPKE seals alone of as many rows, made beforehand (``ldptel.sealing.seal``: what any
implementation that seals each fake on its own must pay).
"""

from __future__ import annotations

import time

import numpy as np
from table import Row, Timed

from ldptel import sealing
from ldptel.mechanisms.histogram import Histogram
from ldptel.mechanisms.rows import row_bytes, to_rows
from ldptel.privacy.fake_messages import fakes_for
from ldptel.shuffler.fakes import sealed_fakes

D, EPS, DELTA = 1024, 1.0, 1e-8


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


ROWS = [
    Row("shuffler's fakes of one release (d = 1,024, μ ≈ 62)", "s", "HPKE seals alone, as many rows",
        "≤ 1.2× the seals", release_fakes, group="fakes", repeats=1, self_timed=True, rounds=3),
]
