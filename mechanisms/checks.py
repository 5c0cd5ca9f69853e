"""Collector-side checks of a batch, one vocabulary for every mechanism (vectorized numpy).

A batch is rejected as a whole, with ``InvalidReport(index, reason)`` naming the *lowest* index
of a bad report, in three stages:

1. wire bytes (a mechanism's ``columns``): a bytes field holding one packed bit row per report
   (``bit_rows``) or one bit per report packed over the batch (``packed_bits``) has the byte
   count of ``count`` reports and zero padding;
2. column lengths (``check_lengths``, first in every ``validate_columns``): each column the
   mechanism uses holds ``count`` entries, each column it does not use none;
3. values (``reject_first``): ranges per mechanism and, for bit rows, zero padding and a plausible
   number of set bits (``check_bit_rows``; the bounds come from ``poisoning``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import numpy as np

from ldptel.mechanisms.errors import ImplausibleReport, InvalidReport

# (mask of bad reports, reason(index)[, exception class]): one check of ``reject_first``
Check = tuple[np.ndarray, Callable[[int], str]] | tuple[np.ndarray, Callable[[int], str], type]


def bit_rows(data: bytes, count: int, bits: int, name: str = "bits") -> np.ndarray:
    """The (count, ceil(bits/8)) uint8 rows of a bytes field holding one packed row per report
    (``np.packbits`` per row); a byte count other than ``count`` rows names the first report
    whose row is incomplete (or the first extra one)."""
    row = (bits + 7) // 8
    if len(data) != count * row:
        raise InvalidReport(min(len(data) // row, count),
                            f"{name} must hold {count} rows of {row} bytes, got {len(data)} bytes")
    return np.frombuffer(data, dtype=np.uint8).reshape(count, row)


def packed_bits(data: bytes, count: int, name: str = "signs") -> np.ndarray:
    """The ``count`` booleans of a bytes field holding one bit per report, packed over the batch
    (``np.packbits``): ceil(count/8) bytes whose padding bits after the last report are zero."""
    need = (count + 7) // 8
    if len(data) != need:
        raise InvalidReport(min(8 * len(data), count),
                            f"{name} must hold {need} bytes for {count} reports, got {len(data)}")
    pad = (-count) % 8
    if pad and data[-1] & ((1 << pad) - 1):
        raise InvalidReport(count - 1, f"{name} padding bits after report {count - 1} must be zero")
    return np.unpackbits(np.frombuffer(data, dtype=np.uint8), count=count).astype(bool)


def check_lengths(columns: Mapping[str, Any], count: int, names: Iterable[str],
                  empty: Mapping[str, str] | None = None) -> None:
    """Every column in ``names`` holds ``count`` entries and every column in ``empty`` (name →
    why) none; else ``InvalidReport`` at the lowest index where a column ends early, runs past
    ``count``, or (0) holds entries it must not."""
    problems = [(min(len(columns[n]), count), f"{n} has {len(columns[n])} entries but count = {count}")
                for n in names if len(columns[n]) != count]
    problems += [(0, f"{n} must be empty: {why}") for n, why in (empty or {}).items()
                 if len(columns.get(n, ()))]
    if problems:
        raise InvalidReport(*min(problems, key=lambda p: p[0]))


def reject_first(checks: Iterable[Check]) -> None:
    """Raise ``InvalidReport`` (or the check's own subclass) for the lowest index flagged by any
    check ``(mask, reason(index))`` or ``(mask, reason(index), exception class)``."""
    best = None
    for mask, reason, *cls in checks:
        idx = np.flatnonzero(mask)
        if idx.size and (best is None or idx[0] < best[0]):
            best = (int(idx[0]), reason, cls[0] if cls else InvalidReport)
    if best is not None:
        index, reason, exc = best
        raise exc(index, reason(index))


def rejected(checks: Iterable[Check], count: int) -> np.ndarray:
    """The mask of the reports any of ``checks`` flags (what ``reject_first`` would refuse one by
    one if each report came in a batch of its own)."""
    bad = np.zeros(count, dtype=bool)
    for mask, *_ in checks:
        bad |= mask
    return bad


def out_of_range(values: np.ndarray, limit: np.ndarray | int, what: str,
                 limit_name: str | None = None) -> Check:
    """The check 0 ≤ value < limit (``limit`` per report, or one for all), with the reason
    ``"{what} {value} is not in [0, {limit_name or limit})"``."""
    bad = (values < 0) | (values >= limit)

    def reason(i: int) -> str:
        return f"{what} {values[i]} is not in [0, {limit_name or np.broadcast_to(limit, bad.shape)[i]})"

    return bad, reason


def per_level(levels: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """Each report's limit ``limits[level]`` (0, so that everything is out of range, for a report
    whose level is itself out of range)."""
    ok = (levels >= 0) & (levels < limits.size)
    return np.where(ok, limits[np.where(ok, levels, 0)], 0)


def padding_mask(rows: np.ndarray, bits: int) -> np.ndarray:
    """Rows (n, ceil(bits/8)) uint8 whose zero padding (the low 8·ceil(bits/8) − bits bits of the
    last byte, np.packbits big-endian order) is not zero."""
    pad = (-bits) % 8
    if pad == 0 or rows.shape[0] == 0:
        return np.zeros(rows.shape[0], dtype=bool)
    return cast("np.ndarray", (rows[:, -1] & np.uint8((1 << pad) - 1)) != 0)


def row_weights(rows: np.ndarray) -> np.ndarray:
    """Number of set bits of each packed row (int64)."""
    return cast("np.ndarray", np.bitwise_count(rows).sum(axis=1, dtype=np.int64))


def check_bit_rows(rows: np.ndarray, bits: int, bounds: tuple[int, int]) -> list[Check]:
    """Checks (for ``reject_first``) of packed bit rows (as ``bit_rows`` returns them): zero
    padding, and a number of set bits within the honest ``bounds`` (else ``ImplausibleReport``)."""
    weights = row_weights(rows)
    w_lo, w_hi = bounds
    return [
        (padding_mask(rows, bits), lambda i: f"padding bits after bit {bits} must be zero"),
        ((weights < w_lo) | (weights > w_hi),
         lambda i: f"{weights[i]} of {bits} bits set is implausible for an honest device "
                   f"(accepted: {w_lo}..{w_hi})", ImplausibleReport),
    ]
