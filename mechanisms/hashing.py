"""Hash functions shared by the SDK (scalar, the ``xxhash`` library) and the aggregator
(vectorized numpy). Both sides must agree bit for bit; ``tests/test_hashing.py`` checks it.

OLH hash family (multiply-add-shift, Dietzfelbinger 1996). A report's 32-bit ``seed`` selects

    a = (xxh32(seed, A_HI)·2^32 + xxh32(seed, A_LO)) | 1,  b = xxh32(seed, B_HI)·2^32 + xxh32(seed, B_LO)
    H_seed(x) = floor(⌊((a·x + b) mod 2^64) / 2^32⌋ · g / 2^32)      (seed as 4 little-endian bytes)

where the item's key is ``x = xxh32(v)`` for an integer item v (a bijection on uint32, so distinct
items never share a key) or ``xxh32(bytes)`` for a string prefix. The high 32 bits of
(a·x + b) mod 2^64 form a 2-independent family over 32-bit keys, so two distinct items collide
with probability 1/g (to within 2^-32), as OLH's estimator assumes, whatever their keys'
difference (a 32-bit multiply would never collide keys that differ by a multiple of 2^30).
The aggregator tests ``H_seed(x) == y`` for every (report, item) in one compiled pass
(``ldptel.mechanisms.kernels.olh``: one multiply, add and unsigned compare per pair).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import xxhash

P1 = 0x9E3779B1
P2 = 0x85EBCA77
P3 = 0xC2B2AE3D
P4 = 0x27D4EB2F
P5 = 0x165667B1
MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
SEED_A_HI, SEED_A_LO, SEED_B_HI, SEED_B_LO = 0x5EED0A1, 0x5EED0A0, 0x5EED0B1, 0x5EED0B0


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
        h = rotl32(h + v * np.uint32(P3), 17) * np.uint32(P4)
    return avalanche32(h)


def avalanche32(h: np.ndarray) -> np.ndarray:
    """xxh32's final mix: h ^= h>>15; h *= P2; h ^= h>>13; h *= P3; h ^= h>>16 (mod 2^32)."""
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint32(15))
        h *= np.uint32(P2)
        h ^= h >> np.uint32(13)
        h *= np.uint32(P3)
        h ^= h >> np.uint32(16)
    return h


def rotl32(x: np.ndarray, r: int) -> np.ndarray:
    """32-bit rotate left of a uint32 array."""
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def xxh32_rows(rows: np.ndarray, seed: int = 0) -> np.ndarray:
    """Vectorized xxh32 of every row of an (n, k) uint8 matrix (k bytes each, same k for all
    rows); equals ``xxhash.xxh32_intdigest(row.tobytes(), seed)``. Stripes of 16 bytes go through
    the four accumulators v_i ← rotl(v_i + lane·P2, 13)·P1, then 4-byte words h ← rotl(h +
    w·P3, 17)·P4, bytes h ← rotl(h + b·P5, 11)·P1, and the avalanche (all mod 2^32)."""
    rows = np.ascontiguousarray(rows, dtype=np.uint8)
    n, k = rows.shape
    seed32 = np.uint32(seed & MASK32)
    full = k // 4
    words = rows[:, : 4 * full].view("<u4").astype(np.uint32) if full else np.zeros((n, 0), np.uint32)
    with np.errstate(over="ignore"):
        pos = 0
        if k >= 16:
            v = [np.full(n, s, dtype=np.uint32) for s in (
                (int(seed32) + P1 + P2) & MASK32, (int(seed32) + P2) & MASK32,
                int(seed32), (int(seed32) - P1) & MASK32)]
            while pos + 4 <= (k // 16) * 4:
                for i in range(4):
                    v[i] = rotl32(v[i] + words[:, pos + i] * np.uint32(P2), 13) * np.uint32(P1)
                pos += 4
            h = rotl32(v[0], 1) + rotl32(v[1], 7) + rotl32(v[2], 12) + rotl32(v[3], 18)
        else:
            h = np.full(n, (int(seed32) + P5) & MASK32, dtype=np.uint32)
        h = h + np.uint32(k)
        while pos < full:
            h = rotl32(h + words[:, pos] * np.uint32(P3), 17) * np.uint32(P4)
            pos += 1
        for b in range(4 * full, k):
            h = rotl32(h + rows[:, b].astype(np.uint32) * np.uint32(P5), 11) * np.uint32(P1)
    return avalanche32(h)


def item_keys(domain_size: int) -> np.ndarray:
    """OLH keys x_v = xxh32(v) for every item v in [0, d), as uint32."""
    return xxh32_u32(np.arange(domain_size, dtype=np.uint32))


def _join(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    return (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)


def seed_params(seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized 64-bit (a, b) of the OLH hash for an array of uint32 seeds."""
    s = np.asarray(seeds, dtype=np.uint32)
    a = _join(xxh32_u32(s, SEED_A_HI), xxh32_u32(s, SEED_A_LO)) | np.uint64(1)
    return a, _join(xxh32_u32(s, SEED_B_HI), xxh32_u32(s, SEED_B_LO))


def olh_hash(seed: int, key: int, g: int) -> int:
    """H_seed(key) in [0, g): the scalar form used on the device."""
    a = (xxh32_int(seed, SEED_A_HI) << 32 | xxh32_int(seed, SEED_A_LO)) | 1
    b = xxh32_int(seed, SEED_B_HI) << 32 | xxh32_int(seed, SEED_B_LO)
    return ((((a * key + b) & MASK64) >> 32) * g) >> 32


def olh_hash_batch(seeds: np.ndarray, keys: np.ndarray, g: int) -> np.ndarray:
    """Vectorized H_seed_i(key_i) for paired arrays (the encoder of simulations)."""
    a, b = seed_params(seeds)
    with np.errstate(over="ignore"):
        u = a * np.asarray(keys, dtype=np.uint32).astype(np.uint64) + b
    return cast("np.ndarray", (((u >> np.uint64(32)) * np.uint64(g)) >> np.uint64(32)).astype(np.uint32))


def pool_support(a: np.ndarray, b: np.ndarray, table: np.ndarray, keys: np.ndarray,
                 cells: int = 1 << 16) -> np.ndarray:
    """C[m] = Σ_k table[k, H_k(keys[m])] for a pool of K seeds (their ``seed_params`` ``a``,
    ``b``) and a (K, g) table of report counts, g = 2^t a power of two: then
    H_k(x) = ((hi32 of u)·g) >> 32 = u >> (64 − t), u = (a_k·x + b_k) mod 2^64, so each lookup is
    a multiply, an add, a shift and a gather (K per key, whatever the number of reports).
    Blocks of seeds × keys of about ``cells`` entries keep the scratch in cache; int64 of
    len(keys)."""
    K, g = table.shape
    t = g.bit_length() - 1
    if g != 1 << t:
        raise ValueError(f"pool_support needs a power-of-two g, got {g}")
    x = np.asarray(keys, dtype=np.uint32).astype(np.uint64)
    out = np.zeros(x.size, dtype=np.int64)
    if x.size == 0 or K == 0:
        return out
    flat = np.ascontiguousarray(table).reshape(-1)
    step = max(1, cells // x.size)
    shift = np.uint64(64 - t)
    row = np.arange(K, dtype=np.uint64) << np.uint64(t)
    scratch = np.empty((min(step, K), x.size), dtype=np.uint64)
    for s in range(0, K, step):
        e = min(K, s + step)
        u = scratch[: e - s]
        with np.errstate(over="ignore"):
            np.multiply(a[s:e, None], x[None, :], out=u)
            u += b[s:e, None]
        u >>= shift
        u += row[s:e, None]
        # indices are < K·g by construction: "wrap" skips the bounds check of "raise"
        out += flat.take(u.view(np.int64), mode="wrap").sum(axis=0, dtype=np.int64)
    return out
