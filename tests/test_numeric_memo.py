"""Memoized 1BitMean over repeated collection: the mean stays unbiased while every device's value
drifts slowly, and a device's reports only change when its α-rounded bucket boundary does.

Drift tested: N = 20 000 devices on [0, 100] with buckets = 8 (boundaries 12.5 apart), start
values log-normal (median 20, clipped), each device drifting upward by its own δᵢ ~ U(0, 1.5)
per round for T = 12 rounds (≤ 18 in all: a device crosses at most two boundaries). Each round
every device reports through its own device path (``encode``: α and the memoized bits from its
secret). At every round the estimated mean must be within 4 std errors of the devices' true mean
at that round; the std error is the formula's √(Σ Var(y | tᵢ))/N (α-rounding keeps
Var(y | t) = C² − t², see ``onebitmean``), and the rounds' reports of one device are dependent, but
each round's are independent across devices, which is all the per-round bound needs.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from ldptel.mechanisms import OneBitMean

pytestmark = pytest.mark.slow

N, T, EPSILON, BUCKETS = 20_000, 12, 1.0, 8


def test_mean_unbiased_under_slow_drift() -> None:
    rng = np.random.default_rng(21)
    start = np.clip(rng.lognormal(math.log(20), 0.8, N), 0, 100)
    drift = rng.uniform(0, 1.5, N)
    devices = [OneBitMean(EPSILON, 0, 100, buckets=BUCKETS, secret=os.urandom(32)) for _ in range(N)]
    mech = devices[0]
    history = np.zeros((T, N), dtype=bool)
    for r in range(T):
        values = np.clip(start + drift * r, 0, 100)
        history[r] = [d.randomize_one(v)["bits"][0] for d, v in zip(devices, values, strict=True)]
        y = mech.unbiased_unit({"bits": history[r]})
        se = math.sqrt(mech.mean_variance(values))
        z = (y.mean() - mech.to_unit(values).mean()) / se
        print(f"round {r}: true mean {values.mean():.2f}, estimate {mech.from_unit(y.mean()):.2f}, "
              f"z {z:+.2f}")
        assert abs(z) <= 4, (r, z)
    # memoization: a device's rounded boundary only grows as its value does (α fixed), and ≤ 18 of
    # drift moves it at most twice, so its report changes at most twice; most never change
    changes = (history[1:] != history[:-1]).sum(axis=0)
    print(f"devices whose report never changed: {np.mean(changes == 0):.3f}")
    assert np.mean(changes == 0) > 0.5
    assert changes.max() <= 2


def test_static_device_reveals_one_report() -> None:
    """The averaging attack on 100 reports of one unchanging value gains nothing: they are one
    bit, so their average is exactly one ε-LDP report (the memo, per device)."""
    rng = np.random.default_rng(4)
    for x in rng.uniform(0, 100, 200):
        dev = OneBitMean(EPSILON, 0, 100, buckets=BUCKETS, secret=os.urandom(32))
        assert len({dev.randomize_one(float(x))["bits"][0] for _ in range(100)}) == 1
