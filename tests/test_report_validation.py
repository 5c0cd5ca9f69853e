"""``Mechanism.validate_columns`` (in process): the poisoning bounds are the exact binomial-tail
quantiles (checked against scipy), honest batches pass, and each kind of bad report is rejected at
its index."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ldptel.client import create_mechanism
from ldptel.mechanisms.errors import ImplausibleReport, InvalidReport
from ldptel.mechanisms.poisoning import (
    FALSE_REJECT,
    binomial_pmf,
    rappor_weight_bounds,
    unary_weight_bounds,
)
from ldptel.proto import ReportBatch


def unary_tails(d: int, p: float, q: float, lo: int, hi: int) -> tuple[float, float]:
    """P(W < lo), P(W > hi) for W = Bernoulli(p) + Binomial(d − 1, q) (scipy)."""
    b = stats.binom(d - 1, q)
    below = (1 - p) * b.cdf(lo - 1) + p * b.cdf(lo - 2)
    above = (1 - p) * b.sf(hi) + p * b.sf(hi - 1)
    return below, above


@pytest.mark.parametrize("oracle", ["sue", "oue"])
@pytest.mark.parametrize("epsilon,d", [(0.5, 64), (1.0, 1021), (4.0, 1024), (10.0, 5000), (0.1, 200_000)])
def test_unary_bounds_are_exact_binomial_quantiles(oracle, epsilon, d):
    mech = create_mechanism(oracle, epsilon=epsilon, domain_size=d)
    lo, hi = mech.weight_bounds()
    below, above = unary_tails(d, mech.p, mech.q, lo, hi)
    assert below + above < 1e-9
    # tight: one step narrower on either side would exceed α/2 on that side
    if lo < d:
        assert unary_tails(d, mech.p, mech.q, lo + 1, hi)[0] > FALSE_REJECT / 2
    if hi > 0:
        assert unary_tails(d, mech.p, mech.q, lo, hi - 1)[1] > FALSE_REJECT / 2


def test_rappor_bounds_cover_every_bloom_weight():
    k, h, ps, qs = 128, 4, 0.3, 0.7
    lo, hi = rappor_weight_bounds(k, h, ps, qs)
    for m in range(1, h + 1):
        pmf = np.convolve(stats.binom(m, qs).pmf(np.arange(m + 1)),
                          stats.binom(k - m, ps).pmf(np.arange(k - m + 1)))
        assert pmf[:lo].sum() + pmf[hi + 1:].sum() < 1e-9


def test_binomial_pmf_window():
    lo, pmf = binomial_pmf(10**6, 0.3)
    ref = stats.binom(10**6, 0.3).pmf(np.arange(lo, lo + pmf.size))
    assert abs(pmf.sum() - 1) < 1e-12 and np.allclose(pmf, ref, rtol=1e-7, atol=1e-300)


def _passes(mech, batch) -> bool:
    try:
        mech.validate_columns(mech.columns(batch), batch.count)
    except InvalidReport:
        return False
    return True


def test_honest_batches_pass():
    """No false rejection on 50,000 honest reports per oracle; the same check refuses the batch
    once one report is made impossible (so the check was not a no-op)."""
    rng = np.random.default_rng(5)
    for oracle in ("grr", "sue", "oue", "olh", "hadamard"):
        mech = create_mechanism(oracle, epsilon=1.0, domain_size=300)
        batch = mech.encode_batch(rng.integers(0, 300, 50_000), rng=rng)
        assert _passes(mech, batch), oracle
        bad = ReportBatch()
        bad.CopyFrom(batch)
        bad.count = batch.count + 1  # one report more than the columns hold
        assert not _passes(mech, bad), oracle
    mech = create_mechanism("rappor", bloom_bits=32, hashes=3, cohorts=16, f=0.5, p=0.5, q=0.75)
    batch = mech.encode_batch([f"v{i % 1000}" for i in range(50_000)], rng=rng)
    assert _passes(mech, batch)
    for _ in range(20):  # the device path too (memoized permanent response)
        assert _passes(mech, mech.encode("v1"))


def test_first_bad_report_is_named():
    mech = create_mechanism("oue", epsilon=2.0, domain_size=64)
    cols = mech.columns(mech.encode_batch(np.arange(20), rng=np.random.default_rng(1)))
    cols["bits"] = cols["bits"].copy()
    cols["bits"][12] = 0xFF  # implausible
    cols["bits"][15, 0] = 0xFF
    with pytest.raises(ImplausibleReport) as exc:
        mech.validate_columns(cols, 20)
    assert exc.value.index == 12 and "implausible" in exc.value.reason

    grr = create_mechanism("grr", epsilon=1.0, domain_size=4)
    with pytest.raises(InvalidReport) as exc:
        grr.validate_columns({"values": np.array([0, 3, 9, 4])}, 4)
    assert exc.value.index == 2 and not isinstance(exc.value, ImplausibleReport)
    with pytest.raises(InvalidReport, match="values has 3 entries"):
        grr.validate_columns({"values": np.array([0, 3, 1])}, 4)


def test_small_domains_reject_nothing_plausible():
    """With d = 2 every weight 0..2 is possible for an honest SUE device: nothing is rejected."""
    assert unary_weight_bounds(2, 0.6, 0.4) == (0, 2)


def _set_bit_row(msg, row: int, width: int, data: bytes) -> None:
    raw = bytearray(msg.bits)
    raw[row * width:(row + 1) * width] = data
    msg.bits = bytes(raw)


def _bad_2_and_5(kind: str):
    """A batch of 8 honest reports of ``kind``, then report 5 broken by the check its mechanism
    lists first and report 2 by a later one (or the same one where there is only one)."""
    from ldptel.mechanisms.heavy_hitters import HeavyHitters
    from ldptel.mechanisms.range_haar import RangeHaar
    from ldptel.mechanisms.range_hierarchical import RangeHierarchical

    rng = np.random.default_rng(3)
    if kind == "rappor":
        mech = create_mechanism("rappor", bloom_bits=61, hashes=2, cohorts=4, f=0.5, p=0.5, q=0.75)
        batch = mech.encode_batch([f"v{i}" for i in range(8)], rng=rng)
        batch.rappor.cohorts[5] = 4  # cohort out of range
        _set_bit_row(batch.rappor, 2, 8, bytes(8))  # no bit set: implausible
        return mech, batch
    if kind == "heavy_hitters":
        mech = HeavyHitters(2.0, 4, secret=bytes(16))
        batch = mech.encode_batch(["ab", "cd", "ef", "gh", "ij", "kl", "mn", "op"], rng=rng)
        batch.heavy_hitters.levels[5] = mech.levels
        batch.heavy_hitters.seed_indices[2] = mech.pool_size
        return mech, batch
    if kind == "range_haar":
        mech = RangeHaar(1.0, 64)
        batch = mech.encode_batch(np.arange(8), rng=rng)
        batch.range.levels[5] = mech.h
        batch.range.indices[2] = int(mech.K[batch.range.levels[2]])
        return mech, batch
    if kind == "range_hierarchical":
        mech = RangeHierarchical(1.0, 64)
        batch = mech.encode_batch(np.arange(8), rng=rng)
        batch.range.levels[5] = mech.H
        batch.range.values[2] = 1 << 20
        return mech, batch
    mech = create_mechanism(kind, epsilon=1.0, domain_size=100)
    batch = mech.encode_batch(np.arange(8), rng=rng)
    if kind in ("sue", "oue"):
        raw = bytearray(batch.unary.bits)
        raw[5 * 13 + 12] |= 0x01  # padding bit after bit 100
        batch.unary.bits = bytes(raw)
        _set_bit_row(batch.unary, 2, 13, bytes(13))  # no bit set: implausible
    else:
        payload = getattr(batch, batch.WhichOneof("payload"))
        field = "indices" if kind == "hadamard" else "values"
        limit = {"grr": 100, "olh": mech.g if kind == "olh" else 0, "hadamard": 128}[kind]
        getattr(payload, field)[5] = limit
        getattr(payload, field)[2] = limit + 1
    return mech, batch


@pytest.mark.parametrize("kind", ["grr", "sue", "oue", "olh", "hadamard", "rappor", "heavy_hitters",
                                  "range_haar", "range_hierarchical"])
def test_lowest_bad_index_is_named(kind):
    """Every mechanism names the lowest bad report, whichever of its checks flags it."""
    mech, batch = _bad_2_and_5(kind)
    with pytest.raises(InvalidReport) as exc:
        mech.checked_columns(batch)
    assert exc.value.index == 2, exc.value
