"""The averaging attack of the privacy-over-time issue on memoized 1BitMean (issue 16).

M = 2 000 devices hold fixed values drawn uniformly from d = 8 candidates (the bucket midpoints of
[0, 100] with buckets = 8) and each sends R = 100 reports through its own device path
(``randomize_one``: α and the memoized bits from its secret). The attacker links all reports of a
device, decodes them with the product's estimator (the mean of the reports' unbiased values,
``unbiased_unit``) and guesses the nearest candidate. A memoized device with a fixed value sends
one bit (α and the value fix its boundary), so its reports together are ε-LDP: no attacker can
beat e^ε/(e^ε + d − 1) under the uniform prior; the test allows 4 binomial sigmas,
4·√(b(1 − b)/M). Negative control: the same attack on fresh bits (``memoize = false``): 100
Duchi bits at ε = 2 locate t within sd ≈ 0.12 against a half spacing of 0.125, accuracy ≈ 0.7,
far above the bound 0.514 + 0.045.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldptel.mechanisms import OneBitMean

pytestmark = pytest.mark.slow

M, R, D, EPSILON, BUCKETS = 2_000, 100, 8, 2.0, 8
CANDIDATES = (np.arange(D) + 0.5) * 100 / D  # the bucket midpoints of [0, 100]
BOUND = math.exp(EPSILON) / (math.exp(EPSILON) + D - 1)
MARGIN = 4 * math.sqrt(BOUND * (1 - BOUND) / M)


def attack_accuracy(memoize: bool, seed: int) -> float:
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, D, M)
    hits = 0
    for value_index in truth:
        dev = OneBitMean(EPSILON, 0, 100, memoize=memoize, buckets=BUCKETS, secret=rng.bytes(32))
        bits = [dev.randomize_one(CANDIDATES[value_index])["bits"][0] for _ in range(R)]
        t = float(np.mean(dev.unbiased_unit({"bits": np.array(bits)})))  # the product's estimator
        guess = int(np.argmin(np.abs(dev.from_unit(t) - CANDIDATES)))
        hits += guess == value_index
    return hits / M


def test_memoized_onebitmean_bounds_the_averaging_attack() -> None:
    accuracy = attack_accuracy(memoize=True, seed=7)
    assert accuracy <= BOUND + MARGIN, (accuracy, BOUND, MARGIN)


def test_fresh_bits_fail_the_bound() -> None:  # the negative control
    accuracy = attack_accuracy(memoize=False, seed=8)
    assert accuracy > BOUND + MARGIN, (accuracy, BOUND, MARGIN)
