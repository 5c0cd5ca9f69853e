"""The floors of ``bench/table.py``: the most direct compiled code (numba, one thread) for what a
decoder computes, written here and not in the package, so the package's kernels are measured
against something they do not share.

- ``olh_fused``: for every report, the OLH hash parameters (a, b) from its seed with the same
  xxh32-based family as ``ldptel.mechanisms.hashing`` (H_seed(x) = ⌊hi32((a·x + b) mod 2^64)·g /
  2^32⌋), then H_seed(x_v) == y for every item v, counted — one loop over (report, item), the test
  written as the one unsigned comparison (a·x + b − lo·2^32) mod 2^64 < (hi − lo)·2^32 with
  lo = ⌈y·2^32/g⌉, hi = ⌈(y + 1)·2^32/g⌉ (a multiply, an add and a compare per pair).
- ``byte_lut``: ones per column of a row-packed bit matrix through a 256-entry table mapping a byte
  to eight one-byte lanes of a uint64, the lanes flushed every 255 rows.
- ``signed_histogram``: A[j] += ±1 for every (j, sign) report.
- ``bincount_signed``: numpy's integer bincount of 2j + b, then A = ones − zeros (the best numpy
  can do for the same histogram; printed for reference).
"""

from __future__ import annotations

import numpy as np
from numba import njit

P1, P2, P3, P4, P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
M32 = 0xFFFFFFFF


@njit(cache=True)
def _xxh32_u32(v: int, seed: int) -> int:
    """xxh32 of a uint32 as 4 little-endian bytes (the scalar algorithm, in uint64 arithmetic)."""
    m = np.uint64(M32)
    h = (np.uint64(seed) + np.uint64(P5 + 4)) & m
    h = (h + np.uint64(v) * np.uint64(P3)) & m
    h = ((h << np.uint64(17)) | (h >> np.uint64(15))) & m
    h = (h * np.uint64(P4)) & m
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(P2)) & m
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(P3)) & m
    h ^= h >> np.uint64(16)
    return h


@njit(cache=True)
def olh_fused(seeds: np.ndarray, ys: np.ndarray, g: int, keys: np.ndarray) -> np.ndarray:
    """C[v] = #{i : H_seed_i(keys[v]) == y_i}: per report the hash parameters, then every item."""
    out = np.zeros(keys.size, dtype=np.int64)
    gg = np.uint64(g)
    for i in range(seeds.size):
        s = np.uint64(seeds[i])
        a = (_xxh32_u32(s, 0x5EED0A1) << np.uint64(32)) | _xxh32_u32(s, 0x5EED0A0) | np.uint64(1)
        b = (_xxh32_u32(s, 0x5EED0B1) << np.uint64(32)) | _xxh32_u32(s, 0x5EED0B0)
        y = np.uint64(ys[i])
        lo = (y * np.uint64(1 << 32) + gg - np.uint64(1)) // gg
        hi = ((y + np.uint64(1)) * np.uint64(1 << 32) + gg - np.uint64(1)) // gg
        b -= lo << np.uint64(32)
        w = (hi - lo) << np.uint64(32)
        for v in range(keys.size):
            out[v] += a * keys[v] + b < w
    return out


@njit(cache=True)
def _byte_lanes() -> np.ndarray:
    t = np.zeros(256, dtype=np.uint64)
    for b in range(256):
        x = np.uint64(0)
        for bit in range(8):
            x |= np.uint64((b >> (7 - bit)) & 1) << np.uint64(8 * bit)
        t[b] = x
    return t


LANES = _byte_lanes()


@njit(cache=True)
def byte_lut(packed: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """Ones per bit column of (n, row) uint8 rows (np.packbits order) → int64[8·row]."""
    n, row = packed.shape
    out = np.zeros(8 * row, dtype=np.int64)
    acc = np.zeros(row, dtype=np.uint64)
    for start in range(0, n, 255):
        acc[:] = 0
        for r in range(start, min(n, start + 255)):
            for j in range(row):
                acc[j] += lanes[packed[r, j]]
        for j in range(row):
            x = acc[j]
            for bit in range(8):
                out[8 * j + bit] += (x >> np.uint64(8 * bit)) & np.uint64(0xFF)
    return out


@njit(cache=True)
def signed_histogram(indices: np.ndarray, signs: np.ndarray, size: int) -> np.ndarray:
    """A[j] = Σ_{i: j_i = j} (+1 if sign_i else −1)."""
    out = np.zeros(size, dtype=np.int64)
    for i in range(indices.size):
        out[indices[i]] += 1 if signs[i] else -1
    return out


def bincount_signed(indices: np.ndarray, signs: np.ndarray, size: int) -> np.ndarray:
    """The same histogram with numpy: bincount of 2j + b, ones − zeros."""
    c = np.bincount(2 * indices + signs, minlength=2 * size).reshape(size, 2)
    return c[:, 1] - c[:, 0]
