"""The server's vectorized hashes equal the client's ``xxhash`` ones bit for bit (a report
hashed on the device decodes identically on the server), and the OLH hash family behaves as
OLH's estimator assumes (two distinct items collide w.p. 1/g).

The references here are written from the formulas in ``ldptel.mechanisms.hashing``'s docstring using
only the ``xxhash`` library and Python integers, so they do not share code with what they check.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import xxhash

from ldptel.mechanisms import hashing
from ldptel.mechanisms.olh import olh_g

TWO32 = 1 << 32
EDGE_U32 = np.array([0, 1, 2, 0x7FFFFFFF, 0x80000000, 0x80000001, TWO32 - 2, TWO32 - 1], dtype=np.uint32)
# g for every ε the API accepts is in [2, round(e^10) + 1 = 22027]; include both ends and
# non-powers of two (tests/test_kernels.py checks the OLH kernel's interval arithmetic on them).
G_VALUES = [2, 3, 4, 5, 8, 21, 1000, olh_g(10.0)]


def ref_xxh32(value: int, seed: int) -> int:
    return xxhash.xxh32_intdigest(int(value).to_bytes(4, "little"), seed=int(seed))


TWO64 = 1 << 64


def ref_params(seed: int) -> tuple[int, int]:
    """a = (xxh32(seed, A_HI)·2^32 + xxh32(seed, A_LO)) | 1,
    b = xxh32(seed, B_HI)·2^32 + xxh32(seed, B_LO)."""
    a = (ref_xxh32(seed, hashing.SEED_A_HI) * TWO32 + ref_xxh32(seed, hashing.SEED_A_LO)) | 1
    b = ref_xxh32(seed, hashing.SEED_B_HI) * TWO32 + ref_xxh32(seed, hashing.SEED_B_LO)
    return a, b


def ref_olh(seed: int, key: int, g: int) -> int:
    """H_seed(key) = floor(⌊((a·key + b) mod 2^64) / 2^32⌋ · g / 2^32)."""
    a, b = ref_params(seed)
    return ((a * key + b) % TWO64 // TWO32) * g // TWO32


def random_u32(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.concatenate([EDGE_U32, rng.integers(0, TWO32, n, dtype=np.uint32)])


@pytest.mark.parametrize("seed", [0, 1, hashing.SEED_A_HI, hashing.SEED_B_LO, 0x7FFFFFFF, 0x80000000,
                                  TWO32 - 1, 2_654_435_761])
def test_xxh32_u32_scalar_seed_matches_xxhash(seed: int) -> None:
    values = random_u32(np.random.default_rng(seed % 1000), 3000)
    got = hashing.xxh32_u32(values, seed)
    assert got.dtype == np.uint32
    assert got.tolist() == [ref_xxh32(v, seed) for v in values.tolist()]
    # the library wrapper the SDK uses agrees too
    assert [hashing.xxh32_int(v, seed) for v in values[:50].tolist()] == got[:50].tolist()


def test_xxh32_u32_per_element_seeds_match_xxhash() -> None:
    rng = np.random.default_rng(11)
    values = random_u32(rng, 20_000)
    seeds = random_u32(rng, 20_000)[::-1].copy()  # edge seeds meet random values and vice versa
    got = hashing.xxh32_u32(values, seeds)
    assert got.tolist() == [ref_xxh32(v, s) for v, s in zip(values.tolist(), seeds.tolist(), strict=True)]


def test_item_keys_and_seed_params() -> None:
    assert hashing.item_keys(1000).tolist() == [ref_xxh32(v, 0) for v in range(1000)]
    seeds = random_u32(np.random.default_rng(12), 5000)
    a, b = hashing.seed_params(seeds)
    assert list(zip(a.tolist(), b.tolist(), strict=True)) == [ref_params(s) for s in seeds.tolist()]


@pytest.mark.parametrize("g", G_VALUES)
def test_olh_hash_scalar_and_batch_match_reference(g: int) -> None:
    rng = np.random.default_rng(g)
    seeds = random_u32(rng, 4000)
    keys = random_u32(rng, 4000)[::-1].copy()
    expected = [ref_olh(s, k, g) for s, k in zip(seeds.tolist(), keys.tolist(), strict=True)]
    assert [hashing.olh_hash(s, k, g) for s, k in zip(seeds.tolist(), keys.tolist(), strict=True)] == expected
    got = hashing.olh_hash_batch(seeds, keys, g)
    assert got.tolist() == expected
    assert int(got.max()) < g


def test_olh_pairwise_collision_rate_is_one_over_g() -> None:
    """P(H_s(x) = H_s(x')) over a uniform seed s is 1/g for distinct keys x ≠ x' (the estimator's
    q = 1/g). With n seeds the observed rate has sd sqrt((1/g)(1 − 1/g)/n); we test 4 values of g
    × 6 pairs = 24 rates at 4 sd, so an exact hash family fails with probability ≤ 24·6.3e-5 ≈ 1.5e-3
    (Bonferroni; normal approximation, fine at n·min(1/g) ≥ 18 expected collisions)."""
    rng = np.random.default_rng(2024)
    n = 400_000
    seeds = rng.integers(0, TWO32, n, dtype=np.uint32)
    items = hashing.item_keys(1024)
    pairs = [
        (items[3], items[4]),  # adjacent items of an integer domain
        tuple(items[rng.choice(1024, 2, replace=False)]),  # a random pair of domain items
        (np.uint32(0), np.uint32(TWO32 - 1)),  # edge keys
        tuple(rng.integers(0, TWO32, 2, dtype=np.uint32)),  # two random 32-bit keys
        (np.uint32(7), np.uint32(7 + (1 << 30))),  # differ by 2^30: never collided mod 2^32
        (np.uint32(5), np.uint32(5 + (1 << 31))),  # differ by 2^31
    ]
    for g in (2, 4, 8, olh_g(10.0)):
        sd = math.sqrt((1 / g) * (1 - 1 / g) / n)
        for x, x2 in pairs:
            assert x != x2
            h1 = hashing.olh_hash_batch(seeds, np.full(n, x, dtype=np.uint32), g)
            h2 = hashing.olh_hash_batch(seeds, np.full(n, x2, dtype=np.uint32), g)
            rate = float(np.mean(h1 == h2))
            assert abs(rate - 1 / g) <= 4 * sd, (g, int(x), int(x2), rate, 1 / g, sd)
