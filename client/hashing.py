"""Hash functions shared by the SDK (scalar, the ``xxhash`` library) and the aggregator
(vectorized numpy). Both sides must agree bit for bit; ``tests/test_hashing.py`` checks it.

OLH hash family. A report's 32-bit ``seed`` selects the function

    a = xxh32(seed, SEED_A) | 1,   b = xxh32(seed, SEED_B)          (seed as 4 little-endian bytes)
    H_seed(x) = floor(((a·x + b) mod 2^32) · g / 2^32)                (x = the item's 32-bit key)

where the item's key is ``x = xxh32(v)`` for an integer item v (a bijection on uint32, so distinct
items never share a key) or ``xxh32(bytes)`` for a string prefix. For a random seed, u = a·x + b
is uniform and u' = u + a·(x' − x) is (almost exactly) independent of u, so two distinct items
collide with probability 1/g, which is what OLH's estimator assumes. The server tests
``H_seed(x) == y`` for a whole block of reports × items in four numpy passes
(multiply, add, compare, count) instead of one xxhash call per (report, item).
"""

from __future__ import annotations

import numpy as np
import xxhash

P1 = 0x9E3779B1
P2 = 0x85EBCA77
P3 = 0xC2B2AE3D
P4 = 0x27D4EB2F
P5 = 0x165667B1
MASK32 = 0xFFFFFFFF
SEED_A = 0x5EED0A
SEED_B = 0x5EED0B


def xxh32_int(value: int, seed: int = 0) -> int:
    """xxh32 of ``value`` as 4 little-endian bytes (the xxhash library)."""
    return xxhash.xxh32_intdigest(int(value).to_bytes(4, "little"), seed=seed)


def xxh32_bytes(data: bytes, seed: int = 0) -> int:
    """xxh32 of a byte string (the xxhash library)."""
    return xxhash.xxh32_intdigest(data, seed=seed)


def xxh32_u32(values: np.ndarray, seed: int | np.ndarray = 0) -> np.ndarray:
    """Vectorized xxh32 of uint32 ``values`` (4 little-endian bytes each); equals ``xxh32_int``.

    For a 4-byte input: h = seed + P5 + 4; h += v·P3; h = rotl(h, 17)·P4; then the avalanche
    h ^= h>>15; h *= P2; h ^= h>>13; h *= P3; h ^= h>>16 (all mod 2^32).
    """
    v = np.asarray(values, dtype=np.uint32)
    s = np.asarray(seed, dtype=np.uint64)
    h = ((s + np.uint64(P5 + 4)) & np.uint64(MASK32)).astype(np.uint32)
    with np.errstate(over="ignore"):
        h = h + v * np.uint32(P3)
        h = ((h << np.uint32(17)) | (h >> np.uint32(15))) * np.uint32(P4)
        h ^= h >> np.uint32(15)
        h *= np.uint32(P2)
        h ^= h >> np.uint32(13)
        h *= np.uint32(P3)
        h ^= h >> np.uint32(16)
    return h


def item_keys(domain_size: int) -> np.ndarray:
    """OLH keys x_v = xxh32(v) for every item v in [0, d), as uint32."""
    return xxh32_u32(np.arange(domain_size, dtype=np.uint32))


def seed_params(seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized (a, b) of the OLH hash for an array of uint32 seeds."""
    s = np.asarray(seeds, dtype=np.uint32)
    return xxh32_u32(s, SEED_A) | np.uint32(1), xxh32_u32(s, SEED_B)


def olh_hash(seed: int, key: int, g: int) -> int:
    """H_seed(key) in [0, g): the scalar form used on the device."""
    a = xxh32_int(seed, SEED_A) | 1
    b = xxh32_int(seed, SEED_B)
    return (((a * key + b) & MASK32) * g) >> 32


def olh_hash_batch(seeds: np.ndarray, keys: np.ndarray, g: int) -> np.ndarray:
    """Vectorized H_seed_i(key_i) for paired arrays (the encoder of simulations)."""
    a, b = seed_params(seeds)
    with np.errstate(over="ignore"):
        u = a * np.asarray(keys, dtype=np.uint32) + b
    return ((u.astype(np.uint64) * np.uint64(g)) >> np.uint64(32)).astype(np.uint32)


def olh_match_params(
    seeds: np.ndarray, ys: np.ndarray, g: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-report (a, b', w) such that H_seed(x) == y  ⇔  (a·x + b') mod 2^32 < w.

    H = y ⇔ lo ≤ u < hi with lo = ceil(y·2^32/g), hi = ceil((y+1)·2^32/g); shifting by lo
    turns the interval test into one unsigned comparison: b' = b − lo, w = hi − lo.
    """
    a, b = seed_params(seeds)
    y = np.asarray(ys, dtype=np.uint64)
    two32 = np.uint64(1 << 32)
    gg = np.uint64(g)
    lo = (y * two32 + gg - np.uint64(1)) // gg
    hi = ((y + np.uint64(1)) * two32 + gg - np.uint64(1)) // gg
    with np.errstate(over="ignore"):
        b_shift = (b.astype(np.uint64) - lo) & np.uint64(MASK32)
    return a, b_shift.astype(np.uint32), (hi - lo).astype(np.uint32)


def olh_support_counts(
    a: np.ndarray, b_shift: np.ndarray, w: np.ndarray, keys: np.ndarray, block: int = 256
) -> np.ndarray:
    """C[j] = #{i : H_seed_i(keys[j]) == y_i}, from ``olh_match_params``; int64 of len(keys).

    Blocks of ``block`` reports keep the (block × len(keys)) uint32 scratch in cache; the row
    sum of the boolean matrix runs as uint64 adds over 8 byte-lanes (≤ 255 rows per block).
    """
    keys = np.asarray(keys, dtype=np.uint32)
    m = keys.size
    out = np.zeros(m, dtype=np.int64)
    block = min(block, 255)
    pad = (-m) % 8
    buf = np.empty((block, m), dtype=np.uint32)
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
