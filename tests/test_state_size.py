"""No accumulator's state grows with the number of reports: every kind's state (in memory, and
the bytes a fully populated state stores) is the same after 2 000 and after 40 000 reports, and
two states merge by addition into the same shapes."""

from __future__ import annotations

import numpy as np
import pytest

from ldptel.aggregator.decoders import accumulator_for
from ldptel.mechanisms.builder import build_mechanism

CONFIGS = {
    "grr": {"oracle": "grr", "epsilon": 1.0, "domain_size": 50},
    "sue": {"oracle": "sue", "epsilon": 1.0, "domain_size": 50},
    "oue": {"oracle": "oue", "epsilon": 1.0, "domain_size": 50},
    "olh": {"oracle": "olh", "epsilon": 1.0, "domain_size": 50},
    "hadamard": {"oracle": "hadamard", "epsilon": 1.0, "domain_size": 50},
    "rappor": {"oracle": "rappor", "bloom_bits": 32, "hashes": 2, "cohorts": 8, "f": 0.5,
               "p": 0.5, "q": 0.75, "candidates": [f"c{i}" for i in range(20)]},
    "heavy_hitters": {"kind": "heavy_hitters", "epsilon": 4.0, "max_length": 4, "pool_size": 64},
    "range_haar": {"kind": "range", "epsilon": 1.0, "domain_size": 64},
    "range_hierarchical": {"kind": "range", "method": "hierarchical", "epsilon": 1.0,
                           "domain_size": 64},
    "numeric_piecewise": {"kind": "numeric", "epsilon": 1.0, "lower": 0, "upper": 50,
                          "mechanism": "piecewise"},
    "numeric_1bitmean": {"kind": "numeric", "epsilon": 1.0, "lower": 0, "upper": 50,
                         "mechanism": "1bitmean"},
}


def values_for(name: str, n: int, rng: np.random.Generator) -> object:
    if name == "rappor":
        return [f"c{i}" for i in rng.integers(0, 20, n)]
    if name == "heavy_hitters":
        return np.array(["ab", "abcd", "x", "zz"], dtype=object)[rng.integers(0, 4, n)]
    return rng.integers(0, 50, n)


def sizes(acc) -> dict[str, tuple]:
    return {k: (v.shape, v.dtype.str) for k, v in acc.state.items()}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_state_does_not_grow_with_reports(name: str) -> None:
    mech = build_mechanism(CONFIGS[name])
    rng = np.random.default_rng(5)
    small, large = accumulator_for(mech), accumulator_for(mech)
    small.add(mech.encode_batch(values_for(name, 2_000, rng), rng=rng))
    for _ in range(20):
        large.add(mech.encode_batch(values_for(name, 2_000, rng), rng=rng))
    assert large.n == 20 * small.n
    assert sizes(small) == sizes(large)
    assert len(large.to_bytes()) <= sum(a.nbytes for a in large.state.values()) + 4096
    merged = type(small).from_bytes(mech, small.to_bytes()).merge(large)
    assert merged.n == 21 * small.n and sizes(merged) == sizes(large)
