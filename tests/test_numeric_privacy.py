"""ε-LDP of the numeric randomizers by the ratio test of ``test_privacy.check_ldp`` (Clopper–
Pearson intervals, union bound, α = 1e-6), with mechanisms randomizing at 1.25·ε while claiming ε
as negative controls.

Duchi's and 1BitMean's output is one bit: its two values are the outputs. Piecewise and hybrid
output a real number in [−C, C]; the test counts it in B = 20 equal bins of [−C, C]. That
keeps the test sound: a bin is a deterministic function of the output, and if the densities
satisfy p(y | u) ≤ e^ε·p(y | v) at every y then P(bin | u) = ∫_bin p(y | u) dy ≤ e^ε·P(bin | v)
(data processing), so an honest mechanism is still flagged with probability ≤ α. It keeps
power: for inputs t = 1 and t = −1 the piecewise densities are p on [1, C] resp. [−C, −1] and
p/e^ε elsewhere, so any bin inside [1, C] has ratio exactly e^ε (the bound is attained: at every
ε here some bin lies inside [1, C]), and the 1.25·ε controls have ratio e^{1.25ε} there.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_privacy import N_SAMPLES, check_ldp

from ldptel.mechanisms import NUMERIC_MECHANISMS
from ldptel.mechanisms.numeric import NumericMechanism
from ldptel.mechanisms.onebitmean import OneBitMean

pytestmark = pytest.mark.slow

BINS = 20
INPUTS = [0.0, 2.5, 5.0, 7.5, 10.0]  # t = −1, −0.5, 0, 0.5, 1 on [0, 10]
EPSILONS = [0.5, 1.0, 2.0, 4.0]


def output_codes(mech: NumericMechanism, cols: dict) -> tuple[np.ndarray, int]:
    """The bit, or the bin of the real output among ``BINS`` equal bins of [−C, C]."""
    if mech.column == "bits":
        return np.asarray(cols["bits"], dtype=np.int64), 2
    c = mech.bound
    codes = np.floor((np.asarray(cols["values"]) + c) / (2 * c) * BINS).astype(np.int64)
    return np.clip(codes, 0, BINS - 1), BINS


def counts(mech: NumericMechanism, seed: int, n: int = N_SAMPLES) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = []
    for x in INPUTS:
        codes, size = output_codes(mech, mech.randomize(np.full(n, x), rng))
        rows.append(np.bincount(codes, minlength=size))
    return np.array(rows)


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("name", list(NUMERIC_MECHANISMS))
def test_honest_numeric_within_e_epsilon(name: str, epsilon: float) -> None:
    mech = NUMERIC_MECHANISMS[name](epsilon, 0.0, 10.0)
    result = check_ldp(counts(mech, seed=7), epsilon)
    print(name, result)
    assert not result.violation, str(result)
    assert result.attains_bound, str(result)


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("name", list(NUMERIC_MECHANISMS))
def test_numeric_with_more_epsilon_is_flagged(name: str, epsilon: float) -> None:
    """The broken mechanism: the same randomizer run at 1.25·ε while the campaign claims ε."""
    broken = NUMERIC_MECHANISMS[name](1.25 * epsilon, 0.0, 10.0)
    result = check_ldp(counts(broken, seed=8), epsilon)
    print(name, "1.25ε", result)
    assert result.violation, str(result)


def device_counts(epsilon: float, n: int, broken: float = 1.0) -> np.ndarray:
    """1BitMean's device path (``encode``: α and memoized bits from the device secret), each
    report from a fresh device secret; inputs 0 and 10 (t = ∓1)."""
    rows = []
    for x in (0.0, 10.0):
        bits = [OneBitMean(broken * epsilon, 0.0, 10.0, buckets=4, secret=os.urandom(32))
                .randomize_one(x)["bits"][0] for _ in range(n)]
        rows.append(np.bincount(np.asarray(bits, dtype=np.int64), minlength=2))
    return np.array(rows)


def test_onebitmean_device_path_within_e_epsilon() -> None:
    result = check_ldp(device_counts(1.0, 40_000), 1.0)
    print("1bitmean device", result)
    assert not result.violation, str(result)
    assert result.attains_bound, str(result)


def test_onebitmean_device_path_with_more_epsilon_is_flagged() -> None:
    result = check_ldp(device_counts(1.0, 40_000, broken=2.0), 1.0)
    assert result.violation, str(result)


def one_report_counts(mech: NumericMechanism, n: int) -> np.ndarray:
    """``n`` reports per input from the device's one-report path (``randomize_one`` behind
    ``encode``, OS randomness; plain-Python code, separate from the vectorized randomizer)."""
    rows = []
    for x in INPUTS:
        reports = [mech.randomize_one(x) for _ in range(n)]
        cols = {k: np.concatenate([np.asarray(r[k]) for r in reports]) for k in reports[0]}
        codes, size = output_codes(mech, cols)
        rows.append(np.bincount(codes, minlength=size))
    return np.array(rows)


@pytest.mark.parametrize("name", ["piecewise", "duchi", "hybrid"])
def test_one_report_path_within_e_epsilon(name: str) -> None:
    mech = NUMERIC_MECHANISMS[name](1.0, 0.0, 10.0)
    result = check_ldp(one_report_counts(mech, 30_000), 1.0)
    print(name, "device", result)
    assert not result.violation, str(result)
    assert result.attains_bound, str(result)


@pytest.mark.parametrize("name", ["piecewise", "duchi", "hybrid"])
def test_one_report_path_with_more_epsilon_is_flagged(name: str) -> None:
    broken = NUMERIC_MECHANISMS[name](2.0, 0.0, 10.0)  # claims ε = 1
    assert check_ldp(one_report_counts(broken, 30_000), 1.0).violation
