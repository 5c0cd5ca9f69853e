"""OLH support counts in one compiled pass: C_v = #{i : H_seed_i(x_v) = y_i}.

Per report, the hash parameters of ``ldptel.mechanisms.hashing`` from its 32-bit seed,
a = (xxh32(s, A_HI)·2^32 + xxh32(s, A_LO)) | 1 and b = xxh32(s, B_HI)·2^32 + xxh32(s, B_LO), and
the match test as one unsigned comparison (``hashing.olh_match_params``):
H_seed(x) = y  ⇔  (a·x + b − lo·2^32) mod 2^64 < (hi − lo)·2^32, lo = ⌈y·2^32/g⌉,
hi = ⌈(y + 1)·2^32/g⌉. Then every item key against four reports at a time, over tiles of
``TILE`` keys that stay in cache. Counts are exact integers: identical to the numpy path.
"""

from __future__ import annotations

import numpy as np

from ldptel.mechanisms.hashing import P2, P3, P4, P5, SEED_A_HI, SEED_A_LO, SEED_B_HI, SEED_B_LO
from ldptel.mechanisms.kernels import parallel
from ldptel.mechanisms.kernels.compiled import kernel

TILE = 2048  # keys per tile: 16 KiB of keys and 16 KiB of counts
MIN_CHUNK = 1 << 22  # (report, key) pairs per thread, at least


@kernel
def _xxh32(v, seed):  # pragma: no cover - compiled
    """xxh32 of a uint32 as 4 little-endian bytes, in uint64 arithmetic masked to 32 bits."""
    m = np.uint64(0xFFFFFFFF)
    h = (np.uint64(seed) + np.uint64(P5 + 4)) & m
    h = (h + v * np.uint64(P3)) & m
    h = ((h << np.uint64(17)) | (h >> np.uint64(15))) & m
    h = (h * np.uint64(P4)) & m
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(P2)) & m
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(P3)) & m
    h ^= h >> np.uint64(16)
    return h


@kernel
def _params(seeds, ys, g, a, b, w):  # pragma: no cover - compiled
    """a, b' = b − lo·2^32 and w = (hi − lo)·2^32 of every report."""
    gg = np.uint64(g)
    two32 = np.uint64(1 << 32)
    one = np.uint64(1)
    for i in range(seeds.size):
        s = np.uint64(seeds[i])
        a[i] = (_xxh32(s, SEED_A_HI) << np.uint64(32)) | _xxh32(s, SEED_A_LO) | one
        y = np.uint64(ys[i])
        lo = (y * two32 + gg - one) // gg
        hi = ((y + one) * two32 + gg - one) // gg
        b[i] = ((_xxh32(s, SEED_B_HI) << np.uint64(32)) | _xxh32(s, SEED_B_LO)) - (lo << np.uint64(32))
        w[i] = (hi - lo) << np.uint64(32)


@kernel
def _count(a, b, w, keys, out):  # pragma: no cover - compiled
    """out[v] += #{i : (a_i·keys[v] + b_i) mod 2^64 < w_i}, four reports per pass over a tile."""
    n, m = a.size, keys.size
    tile = np.zeros(TILE, dtype=np.int64)
    for t0 in range(0, m, TILE):
        t1 = min(m, t0 + TILE)
        x = keys[t0:t1]
        c = tile[: t1 - t0]
        c[:] = 0
        i = 0
        while i + 4 <= n:
            a0, a1, a2, a3 = a[i], a[i + 1], a[i + 2], a[i + 3]
            b0, b1, b2, b3 = b[i], b[i + 1], b[i + 2], b[i + 3]
            w0, w1, w2, w3 = w[i], w[i + 1], w[i + 2], w[i + 3]
            for v in range(x.size):
                xv = x[v]
                c[v] += (np.int64(a0 * xv + b0 < w0) + np.int64(a1 * xv + b1 < w1)
                         + np.int64(a2 * xv + b2 < w2) + np.int64(a3 * xv + b3 < w3))
            i += 4
        while i < n:
            ai, bi, wi = a[i], b[i], w[i]
            for v in range(x.size):
                c[v] += np.int64(ai * x[v] + bi < wi)
            i += 1
        out[t0:t1] += c


@kernel
def _support(seeds, ys, g, keys, out):  # pragma: no cover - compiled
    n = seeds.size
    a = np.empty(n, dtype=np.uint64)
    b = np.empty(n, dtype=np.uint64)
    w = np.empty(n, dtype=np.uint64)
    _params(seeds, ys, g, a, b, w)
    _count(a, b, w, keys, out)


def match_params(seeds: np.ndarray, ys: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The per-report uint64 (a, b', w) of the match test, as the kernel computes them."""
    seeds = np.ascontiguousarray(seeds, dtype=np.uint32)
    ys = np.ascontiguousarray(np.asarray(ys).astype(np.uint64, copy=False))
    a, b, w = (np.empty(seeds.size, dtype=np.uint64) for _ in range(3))
    _params(seeds, ys, int(g), a, b, w)
    return a, b, w


def olh_support(seeds: np.ndarray, ys: np.ndarray, g: int, keys: np.ndarray) -> np.ndarray:
    """C_v = #{i : H_seed_i(keys[v]) = ys[i]} (int64, len(keys)) for uint32 ``seeds``, hashed
    values ``ys`` (taken mod 2^64 as the numpy path does) and the items' 32-bit ``keys`` (as
    uint32, or already widened to uint64: ``OLH.keys64``, no copy per call)."""
    seeds = np.ascontiguousarray(seeds, dtype=np.uint32)
    ys = np.ascontiguousarray(np.asarray(ys).astype(np.uint64, copy=False))
    x = keys if keys.dtype == np.uint64 else np.asarray(keys, dtype=np.uint32).astype(np.uint64)
    x = np.ascontiguousarray(x)
    if seeds.size != ys.size:
        raise ValueError(f"{seeds.size} seeds but {ys.size} values")
    bounds = parallel.chunks(seeds.size, x.size, MIN_CHUNK)

    def part(lo: int, hi: int) -> np.ndarray:
        out = np.zeros(x.size, dtype=np.int64)
        _support(seeds[lo:hi], ys[lo:hi], int(g), x, out)
        return out

    parts = parallel.run(part, bounds)
    return parts[0] if len(parts) == 1 else np.sum(parts, axis=0)
