"""Ones per bit column of row-packed reports, per group: out[g, b] = #{i : group_i = g, bit b of
row i set} (rows as ``np.packbits`` writes them: bit b is bit 7 − b mod 8 of byte ⌊b/8⌋).

Bit-sliced over 64-bit words (8 bytes of a row): for t = 0..7, lanes_t += (word >> (7 − t)) &
0x0101010101010101 adds bit t of each of the 8 bytes into that byte's 8-bit lane, so one
shift, mask and add counts 8 columns; a group's lanes are flushed into its int64 counts every 255
of its rows (a lane holds at most 255). OUE/SUE pass no groups (one group); RAPPOR passes the
cohorts.
"""

from __future__ import annotations

import numpy as np

from ldptel.mechanisms.kernels import parallel
from ldptel.mechanisms.kernels.compiled import kernel

MIN_CHUNK = 1 << 22  # bytes per thread, at least
LOW_BITS = 0x0101010101010101


@kernel
def _flush(lanes, out):  # pragma: no cover - compiled
    """out[8·(8w + e) + t] += byte e of lanes[t, w]; lanes zeroed."""
    for t in range(8):
        for w in range(lanes.shape[1]):
            x = lanes[t, w]
            for e in range(8):
                out[64 * w + 8 * e + t] += np.int64((x >> np.uint64(8 * e)) & np.uint64(0xFF))
            lanes[t, w] = 0


@kernel
def _ones(words, groups, out):  # pragma: no cover - compiled
    """Counts into out (G, 64·W) from (n, W) uint64 words; groups (n,) int64 or empty (all 0).
    Returns the first row whose group is out of range, or −1."""
    n, W = words.shape
    G = out.shape[0]
    lanes = np.zeros((G, 8, W), dtype=np.uint64)
    filled = np.zeros(G, dtype=np.int64)
    mask = np.uint64(LOW_BITS)
    grouped = groups.size > 0
    for r in range(n):
        g = groups[r] if grouped else 0
        if g < 0 or g >= G:
            return r
        row = words[r]
        lg = lanes[g]
        for t in range(8):
            s = np.uint64(7 - t)
            lt = lg[t]
            for w in range(W):
                lt[w] += (row[w] >> s) & mask
        filled[g] += 1
        if filled[g] == 255:
            _flush(lg, out[g])
            filled[g] = 0
    for g in range(G):
        if filled[g]:
            _flush(lanes[g], out[g])
    return -1


def as_words(packed: np.ndarray) -> np.ndarray:
    """(n, ⌈row/8⌉) uint64 view of (n, row) uint8 rows (a zero-padded copy when row is not a
    multiple of 8 or the buffer is not aligned)."""
    packed = np.asarray(packed, dtype=np.uint8)
    n, row = packed.shape
    if row % 8 == 0 and packed.flags.c_contiguous and packed.ctypes.data % 8 == 0:
        return packed.view(np.uint64)
    buf = np.zeros((n, -(-row // 8) * 8), dtype=np.uint8)
    buf[:, :row] = packed
    return buf.view(np.uint64)


def column_ones(packed: np.ndarray, width: int, groups: np.ndarray | None = None,
                n_groups: int = 1) -> np.ndarray:
    """Ones per column of (n, ⌈width/8⌉) packed rows → int64 (n_groups, width) with ``groups``
    (row → group in [0, n_groups)), or (width,) without. A group out of range raises ValueError."""
    words = as_words(packed)
    g = (np.zeros(0, dtype=np.int64) if groups is None
         else np.ascontiguousarray(groups, dtype=np.int64))
    if groups is not None and g.size != words.shape[0]:
        raise ValueError(f"{words.shape[0]} rows but {g.size} groups")
    bounds = parallel.chunks(words.shape[0], 8 * words.shape[1], MIN_CHUNK)

    def part(lo: int, hi: int) -> np.ndarray:
        out = np.zeros((n_groups, 64 * words.shape[1]), dtype=np.int64)
        bad = _ones(words[lo:hi], g[lo:hi] if g.size else g, out)
        if bad >= 0:
            raise ValueError(f"group {int(g[lo + bad])} of row {lo + bad} is not in [0, {n_groups})")
        return out

    parts = parallel.run(part, bounds)
    total = parts[0] if len(parts) == 1 else np.sum(parts, axis=0)
    return total[:, :width] if groups is not None else total[0, :width]
