"""The compiled decode kernels (``ldptel.mechanisms.kernels``) count exactly what a plain
reference written here counts, and exactly what the numpy code they replaced counted on the same
reports (that code is kept below, verbatim, as ``old_*``), on one thread and on several.

The plain references use only Python integers, ``xxhash`` (through ``test_hashing``'s reference
hash) and ``np.unpackbits``, so they share no code with the kernels.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_hashing import EDGE_U32, G_VALUES, TWO32, TWO64, ref_olh, ref_params

from ldptel.aggregator.decoders import accumulator_for
from ldptel.mechanisms import hashing
from ldptel.mechanisms.hadamard import Hadamard
from ldptel.mechanisms.kernels import bits, olh, parallel, signed
from ldptel.mechanisms.olh import OLH
from ldptel.mechanisms.rappor import RAPPOR
from ldptel.mechanisms.unary import OUE, SUE

# --- the pre-change implementations (verbatim, as references) ---------------------------------


def old_olh_match_params(seeds, ys, g):
    a, b = hashing.seed_params(seeds)
    y = np.asarray(ys, dtype=np.uint64)
    two32 = np.uint64(1 << 32)
    gg = np.uint64(g)
    lo = (y * two32 + gg - np.uint64(1)) // gg
    hi = ((y + np.uint64(1)) * two32 + gg - np.uint64(1)) // gg
    with np.errstate(over="ignore"):
        b_shift = b - (lo << np.uint64(32))
    return a, b_shift, (hi - lo) << np.uint64(32)


def old_olh_support_counts(a, b_shift, w, keys, block=128):
    keys = np.asarray(keys, dtype=np.uint32).astype(np.uint64)
    m = keys.size
    out = np.zeros(m, dtype=np.int64)
    block = min(block, 255)
    pad = (-m) % 8
    buf = np.empty((block, m), dtype=np.uint64)
    hit = np.zeros((block, m + pad), dtype=np.uint8)
    for start in range(0, a.size, block):
        n = min(block, a.size - start)
        u = buf[:n]
        np.multiply(a[start : start + n, None], keys[None, :], out=u)
        np.add(u, b_shift[start : start + n, None], out=u)
        np.less(u, w[start : start + n, None], out=hit[:n, :m].view(bool))
        lanes = hit[:n].view(np.uint64).sum(axis=0, dtype=np.uint64)
        out += lanes.view(np.uint8)[:m]
    return out


def old_column_popcount(packed, width):
    ROWS = 255
    out = np.zeros(width, dtype=np.int64)
    row_bytes = packed.shape[1]
    pad = (-row_bytes * 8) % 64
    scratch = np.zeros((ROWS, row_bytes * 8 + pad), dtype=np.uint8)
    for start in range(0, packed.shape[0], ROWS):
        block = packed[start : start + ROWS]
        m = block.shape[0]
        scratch[:m, : row_bytes * 8] = np.unpackbits(block, axis=1)
        lanes = scratch[:m].view(np.uint64).sum(axis=0, dtype=np.uint64)
        out += lanes.view(np.uint8)[:width]
    return out


def old_rappor_ones(cohorts, packed, m, k):
    ones = np.zeros((m, k), dtype=np.int64)
    per_cohort = np.bincount(cohorts, minlength=m)
    order = np.argsort(cohorts, kind="stable")
    sorted_bits = packed[order]
    ends = np.cumsum(per_cohort)
    for j in np.nonzero(per_cohort)[0]:
        ones[j] += old_column_popcount(sorted_bits[ends[j] - per_cohort[j] : ends[j]], k)
    return ones


def old_fwht(a):
    x = np.array(a, dtype=np.float64)
    n = x.size
    h = 1
    while h < n:
        y = x.reshape(-1, 2, h)
        x = np.concatenate((y[:, 0] + y[:, 1], y[:, 0] - y[:, 1]), axis=1).reshape(n)
        h *= 2
    return x


def old_signed_histogram(indices, signs, size):
    b = np.where(signs, 1, -1)
    return np.bincount(indices, weights=b, minlength=size).astype(np.int64)


# --- helpers ----------------------------------------------------------------------------------


@pytest.fixture(params=[1, 3], ids=["1-thread", "3-threads"])
def threads(request, monkeypatch):
    """Run each test on one thread and on three, with chunks small enough to split."""
    monkeypatch.setattr(olh, "MIN_CHUNK", 64)
    monkeypatch.setattr(bits, "MIN_CHUNK", 16)
    parallel.set_threads(request.param)
    yield request.param
    parallel.set_threads(None)


def test_chunks_split_by_work() -> None:
    parallel.set_threads(4)
    try:
        assert parallel.chunks(10, 1.0, 100) == [(0, 10)]  # too little work: one chunk
        assert parallel.chunks(1000, 1.0, 100) == [(0, 250), (250, 500), (500, 750), (750, 1000)]
        assert parallel.chunks(3, 1e9, 1) == [(0, 1), (1, 2), (2, 3)]  # never more chunks than items
        assert parallel.chunks(0, 1.0, 1) == [(0, 0)]
    finally:
        parallel.set_threads(None)


# --- OLH --------------------------------------------------------------------------------------


@pytest.mark.parametrize("g", G_VALUES)
def test_olh_support_matches_reference_and_previous_code(g: int, threads: int) -> None:
    """C[j] = #{i : H_seed_i(key_j) == y_i}: the kernel, a brute force over the reference hash,
    and the previous numpy path agree exactly (701 reports: not a multiple of the kernel's 4; 37
    keys: not a multiple of 8)."""
    rng = np.random.default_rng(100 + g)
    n = 701
    seeds = np.concatenate([EDGE_U32, rng.integers(0, TWO32, n - EDGE_U32.size, dtype=np.uint32)])
    keys = [*EDGE_U32.tolist(), *hashing.item_keys(29).tolist()]
    ys = [ref_olh(s, keys[int(rng.integers(len(keys)))], g) if rng.random() < 0.5 else int(rng.integers(g))
          for s in seeds.tolist()]
    expected = np.zeros(len(keys), dtype=np.int64)
    for s, y in zip(seeds.tolist(), ys, strict=True):
        expected += np.array([ref_olh(s, k, g) == y for k in keys])
    key_arr = np.array(keys, dtype=np.uint32)
    got = olh.olh_support(seeds, np.array(ys, dtype=np.int64), g, key_arr)
    np.testing.assert_array_equal(got, expected)
    old = old_olh_support_counts(*old_olh_match_params(seeds, np.array(ys, dtype=np.int64), g), key_arr)
    np.testing.assert_array_equal(got, old)


@pytest.mark.parametrize("g", G_VALUES)
def test_olh_match_params_bucket_edges(g: int) -> None:
    """The kernel's interval test (u − lo·2^32) mod 2^64 < w agrees with H(u) == y exactly at the
    bucket edges u = lo·2^32 − 1, lo·2^32, hi·2^32 − 1, hi·2^32 (a floor/ceil slip fails here)."""
    seed = 12345
    a_ref, b = ref_params(seed)
    for y in sorted({0, 1, g // 2, g - 1}):
        a, b_shift, w = olh.match_params(np.array([seed], np.uint32), np.array([y]), g)
        assert int(a[0]) == a_ref
        lo, hi = -(-y * TWO32 // g), -(-(y + 1) * TWO32 // g)
        edges = [(lo * TWO32 - 1) % TWO64, lo * TWO32, hi * TWO32 - 1, (hi * TWO32) % TWO64]
        got = [(u - b + int(b_shift[0])) % TWO64 < int(w[0]) for u in edges]
        truth = [(u // TWO32) * g // TWO32 == y for u in edges]
        assert got == truth == [False, True, True, False], (g, y)


@pytest.mark.parametrize(("epsilon", "d"), [(1.0, 1024), (4.0, 300), (10.0, 2500)])
def test_olh_decoder_counts_equal_previous_code(epsilon: float, d: int, threads: int) -> None:
    """The accumulator's support counts on simulated reports (several tiles of keys at d = 2500)
    equal the previous implementation's."""
    rng = np.random.default_rng(7)
    mech = OLH(epsilon, d)
    cols = mech.columns(mech.encode_batch(rng.integers(0, d, 3001), rng=rng))
    acc = accumulator_for(mech)
    acc.add_columns(cols, 3001)
    old = old_olh_support_counts(*old_olh_match_params(cols["seeds"], cols["values"], mech.g), mech.keys)
    np.testing.assert_array_equal(acc.state["support"], old)
    assert acc.state["support"].sum() > 0


# --- packed bit counts ------------------------------------------------------------------------


@pytest.mark.parametrize("width", [1, 7, 8, 13, 64, 100, 1024, 1031])
def test_column_ones_match_unpackbits_and_previous_code(width: int, threads: int) -> None:
    """Every width (not a multiple of 8 or 64: the padded copy), 600 rows (a lane flushes after
    255), one group and 5 groups; unaligned rows are copied, not misread."""
    rng = np.random.default_rng(width)
    rows = np.packbits(rng.random((600, width)) < 0.3, axis=1)
    plain = np.unpackbits(rows, axis=1, count=width).sum(axis=0, dtype=np.int64)
    np.testing.assert_array_equal(bits.column_ones(rows, width), plain)
    np.testing.assert_array_equal(bits.column_ones(rows, width), old_column_popcount(rows, width))
    unaligned = np.frombuffer(b"\0" + rows.tobytes(), dtype=np.uint8)[1:].reshape(rows.shape)
    np.testing.assert_array_equal(bits.column_ones(unaligned, width), plain)
    groups = rng.integers(0, 5, rows.shape[0])
    per = bits.column_ones(rows, width, groups, 5)
    for g in range(5):
        plain_g = np.unpackbits(rows[groups == g], axis=1, count=width).sum(axis=0)
        np.testing.assert_array_equal(per[g], plain_g)


def test_column_ones_refuses_a_group_out_of_range() -> None:
    rows = np.zeros((3, 2), dtype=np.uint8)
    with pytest.raises(ValueError, match="group 4 of row 1"):
        bits.column_ones(rows, 16, np.array([0, 4, 1]), 4)
    with pytest.raises(ValueError, match="group -1 of row 0"):
        bits.column_ones(rows, 16, np.array([-1, 0, 1]), 4)


@pytest.mark.parametrize("mech", [OUE(1.0, 1000), SUE(2.0, 64)], ids=["oue", "sue"])
def test_unary_decoder_counts_equal_previous_code(mech, threads: int) -> None:
    rng = np.random.default_rng(3)
    cols = mech.columns(mech.encode_batch(rng.integers(0, mech.domain_size, 2000), rng=rng))
    acc = accumulator_for(mech)
    acc.add_columns(cols, 2000)
    np.testing.assert_array_equal(acc.state["support"], old_column_popcount(cols["bits"], mech.domain_size))


def test_rappor_decoder_counts_equal_previous_code(threads: int) -> None:
    mech = RAPPOR(bloom_bits=100, hashes=2, cohorts=8, f=0.5, p=0.5, q=0.75,
                  candidates=[f"s{i}" for i in range(20)])
    rng = np.random.default_rng(4)
    batch = mech.encode_batch([f"s{i}" for i in rng.integers(0, 20, 1500)], rng=rng)
    cols = mech.columns(batch)
    acc = accumulator_for(mech)
    acc.add(batch)
    np.testing.assert_array_equal(acc.state["ones"], old_rappor_ones(cols["cohorts"], cols["bits"], 8, 100))
    np.testing.assert_array_equal(acc.state["cohort_n"], np.bincount(cols["cohorts"], minlength=8))
    bad = {**cols, "cohorts": np.where(np.arange(1500) == 9, 8, cols["cohorts"])}
    with pytest.raises(ValueError, match="group 8 of row 9"):
        acc.add_columns(bad, 1500)


# --- Hadamard ---------------------------------------------------------------------------------


def test_signed_histogram_matches_reference_and_previous_code() -> None:
    rng = np.random.default_rng(5)
    idx = rng.integers(0, 64, 5000)
    signs = rng.random(5000) < 0.4
    plain = np.zeros(64, dtype=np.int64)
    np.add.at(plain, idx, np.where(signs, 1, -1))
    got = signed.signed_histogram(idx, signs, 64)
    np.testing.assert_array_equal(got, plain)
    np.testing.assert_array_equal(got, old_signed_histogram(idx, signs, 64))
    for bad in (64, -1):
        with pytest.raises(ValueError, match=f"index {bad} of report 3 "):
            signed.signed_histogram(np.where(np.arange(5000) == 3, bad, idx), signs, 64)


@pytest.mark.parametrize("n", [1, 2, 8, 1024])
def test_fwht_matches_dense_hadamard_and_previous_code(n: int) -> None:
    a = np.random.default_rng(n).integers(-1000, 1000, n)
    j = np.arange(n)
    H = 1 - 2 * (np.bitwise_count(j[:, None] & j[None, :]) & 1).astype(np.int64)
    got = signed.fwht(a)
    np.testing.assert_array_equal(got, H @ a)
    np.testing.assert_array_equal(got, old_fwht(a))
    np.testing.assert_array_equal(a, np.random.default_rng(n).integers(-1000, 1000, n))  # input kept
    with pytest.raises(ValueError, match="power-of-two"):
        signed.fwht(np.zeros(6))


def test_hadamard_decoder_equals_previous_code() -> None:
    mech = Hadamard(1.0, 100)
    rng = np.random.default_rng(6)
    cols = mech.columns(mech.encode_batch(rng.integers(0, 100, 4000), rng=rng))
    acc = accumulator_for(mech)
    acc.add_columns(cols, 4000)
    acc.state["n"][0] = 4000
    old = old_signed_histogram(cols["indices"], cols["signs"], mech.D)
    np.testing.assert_array_equal(acc.state["signs"], old)
    np.testing.assert_array_equal(acc.estimate().counts, mech.scale * old_fwht(old)[:100])
