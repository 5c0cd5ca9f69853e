"""Heavy-hitter decode cost and std-error sanity: the pool size respects a decode budget, an
explicit pool size past the bound is refused, std errors are finite and non-negative whatever
filled the table, a stored state that disagrees with itself is refused."""

from __future__ import annotations

import numpy as np
import pytest

from ldptel.aggregator.decoders.heavy_hitters import HeavyHitterAccumulator
from ldptel.campaigns.config import ConfigError, parse_config
from ldptel.mechanisms.heavy_hitters import (
    DECODE_BUDGET,
    DEFAULT_POOL,
    MAX_DECODE_LOOKUPS,
    HeavyHitters,
    walk_candidates,
)

EVIL = "=cmd|'/C calc'!A"
WIDE = {"epsilon": 4.0, "max_length": 16, "levels": 8, "width": 8}  # 16 new bits per level


def test_walk_candidates_counts_the_first_level_and_width_children_after() -> None:
    assert walk_candidates(16, 16, 64) == 256 + 15 * 64 * 256
    assert walk_candidates(16, 8, 8) == 2 ** 16 + 7 * 8 * 2 ** 16
    assert walk_candidates(2, 2, 16) == 256 + 16 * 256


def test_default_pool_size_fits_the_decode_budget() -> None:
    """The default layout keeps K = 2048; 16 new bits per level get the largest power of two
    whose decode fits the budget (K = 128 at width 8)."""
    assert HeavyHitters(4.0, max_length=16).pool_size == DEFAULT_POOL
    mech = HeavyHitters(**WIDE)
    cands = walk_candidates(16, 8, 8)
    assert mech.pool_size == 128
    assert mech.pool_size * cands <= DECODE_BUDGET < 2 * mech.pool_size * cands


def test_explicit_pool_size_past_the_decode_bound_is_refused() -> None:
    cands = walk_candidates(16, 8, 8)
    ok = MAX_DECODE_LOOKUPS // cands
    assert HeavyHitters(**WIDE, pool_size=ok).pool_size == ok
    with pytest.raises(ValueError, match=f"pool_size = {ok + 1} makes a decode"):
        HeavyHitters(**WIDE, pool_size=ok + 1)
    with pytest.raises(ConfigError, match="pool_size"):
        parse_config({"campaigns": [{"name": "s", "kind": "heavy_hitters", **WIDE,
                                     "pool_size": 2048}]})
    cfg = parse_config({"campaigns": [{"name": "s", "kind": "heavy_hitters", **WIDE}]})
    assert cfg.campaigns[0].params["pool_size"] == 128


def assert_sane_std_errors(acc: HeavyHitterAccumulator, expected: str) -> None:
    est = acc.estimate()
    assert expected in est.labels
    assert np.isfinite(est.std_error).all() and (est.std_error > 0).all(), est.std_error
    assert est.n == acc.state["counts"].sum()
    assert np.isfinite(est.counts).all()
    for row in est.items():
        assert np.isfinite([row["std_error"], row["ci_low"], row["ci_high"]]).all(), row


@pytest.mark.parametrize("fill", ["add", "add_columns"])
def test_std_errors_are_finite_at_small_n(fill: str) -> None:
    """A hundred reports over two levels. ``add_columns`` alone leaves the state's n at 0 (as a profile script
    did): N is the table's total, so the finite-population term cannot go negative."""
    mech = HeavyHitters(4.0, max_length=4, levels=2, width=8)
    values = np.where(np.arange(100) % 4 == 0, "ab", "zq=1")
    batch = mech.encode_batch(list(values), rng=np.random.default_rng(3))
    acc = HeavyHitterAccumulator(mech)
    if fill == "add":
        acc.add(batch)
    else:
        acc.add_columns(mech.checked_columns(batch), batch.count)
    assert_sane_std_errors(acc, "zq=1")


@pytest.mark.slow
def test_std_errors_are_finite_with_16_new_bits_per_level() -> None:
    """The configuration of the CSV-injection test: 8 levels of 2 bytes, N = 8 000."""
    mech = HeavyHitters(**WIDE)
    values = np.where(np.arange(8000) % 5 == 0, "benign", EVIL)
    batch = mech.encode_batch(list(values), rng=np.random.default_rng(11))
    for fill in ("add", "add_columns"):
        acc = HeavyHitterAccumulator(mech)
        if fill == "add":
            acc.add(batch)
        else:
            acc.add_columns(mech.checked_columns(batch), batch.count)
        assert_sane_std_errors(acc, EVIL)


def test_a_stored_state_whose_n_disagrees_with_its_table_is_refused() -> None:
    mech = HeavyHitters(4.0, max_length=4, levels=4, width=8, pool_size=16)
    for reports in (10, 20_000):  # sparse and dense storage
        acc = HeavyHitterAccumulator(mech)
        acc.add(mech.encode_batch(["ab"] * reports, rng=np.random.default_rng(5)))
        assert HeavyHitterAccumulator.from_bytes(mech, acc.to_bytes()).n == reports
        acc.state["n"][0] += 1
        with pytest.raises(ValueError, match=f"n = {reports + 1} reports but its table holds {reports}"):
            HeavyHitterAccumulator.from_bytes(mech, acc.to_bytes())


def test_a_first_level_shorter_than_a_byte_decodes() -> None:
    """levels = 24 over 3 bytes: one bit per level, no complete byte at the first level."""
    mech = HeavyHitters(4.0, max_length=3, levels=24, width=8)
    acc = HeavyHitterAccumulator(mech)
    acc.add(mech.encode_batch(["ab"] * 3000, rng=np.random.default_rng(1)))
    assert acc.estimate().labels == ["ab"]
