"""OS randomness (the SDK's default, ``mechanisms/randomness.OsRandom``) takes what numpy's
``Generator.integers`` takes: array bounds that broadcast. A range campaign (Haar: ``K[level]``
coefficients per level) encodes with an array ``high``; with OS randomness ``integers`` used to
test ``span <= 0`` on that array and ``report_many`` / ``ldptel simulate`` crashed with "The
truth value of an array with more than one element is ambiguous" (they worked only seeded)."""

from __future__ import annotations

import numpy as np
import pytest

from ldptel.mechanisms.randomness import OS_RANDOM
from ldptel.mechanisms.range_haar import RangeHaar
from ldptel.mechanisms.range_hierarchical import RangeHierarchical


def test_integers_takes_array_bounds():
    high = np.array([1, 2, 4, 8, 1024])
    out = OS_RANDOM.integers(0, high)
    assert out.shape == high.shape and (out >= 0).all() and (out < high).all()
    low = np.array([5, 10])
    out = OS_RANDOM.integers(low, low + 3, size=2)
    assert ((out >= low) & (out < low + 3)).all()
    draws = OS_RANDOM.integers(0, np.full(20_000, 4))
    assert set(np.unique(draws)) == {0, 1, 2, 3}  # every value of [0, 4) comes up
    with pytest.raises(ValueError):
        OS_RANDOM.integers(0, np.array([3, 0]))


def test_integers_scalars_unchanged():
    assert isinstance(OS_RANDOM.integers(7), int)
    assert 3 <= OS_RANDOM.integers(3, 4) < 4
    assert OS_RANDOM.integers(0, 256, size=(2, 3), dtype=np.uint8).dtype == np.uint8
    assert OS_RANDOM.integers(0, 2**32, 5).shape == (5,)


@pytest.mark.parametrize("make", [RangeHaar, RangeHierarchical])
def test_range_campaign_encodes_with_os_randomness(make):
    """The range mechanisms with the default (OS) randomness, as ``report_many`` uses them."""
    mech = make(epsilon=2.0, domain_size=1024)
    values = np.arange(0, 1024, 7)
    assert mech.encode_batch(values).count == values.size
