"""A mechanism's report columns ↔ fixed-width rows: the plaintext of one sealed message
(``ldptel.sealing``) is one report as one row of ``row_dtype(mech)``, a numpy structured dtype of
fixed ``itemsize``, so a release's decrypted plaintexts, concatenated, become its columns with one
``np.frombuffer`` (``from_rows``), with no per-report Python beyond the decryption.

Layouts (little-endian): GRR and the histogram index ``values`` u4; OLH ``seeds`` u4, ``values``
u4; Hadamard ``indices`` u4, ``signs`` u1 (0/1); SUE/OUE ``bits`` ⌈d/8⌉ bytes (the row as
``np.packbits``); RAPPOR ``cohorts`` u4, ``bits`` ⌈k/8⌉ bytes; heavy hitters (``shuffled``: today's
local report at ε₀) ``levels`` u4, ``seed_indices`` u4, ``values`` u4 (12 bytes).
Every row of one campaign version has the same width, so every ciphertext has the same length
(``sealing.ciphertext_length``) and a fake message cannot be told from a real one by its size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.checks import rejected

ROW_ORACLES = ("grr", "histogram", "olh", "hadamard", "sue", "oue", "rappor", "heavy_hitters")


def row_dtype(mech: Mechanism) -> np.dtype:
    """The structured dtype of one report of ``mech`` (module docstring); ``ValueError`` for a
    mechanism without a row layout."""
    name = mech.name
    if name in ("grr", "histogram"):
        return np.dtype([("values", "<u4")])
    if name == "olh":
        return np.dtype([("seeds", "<u4"), ("values", "<u4")])
    if name == "hadamard":
        return np.dtype([("indices", "<u4"), ("signs", "u1")])
    if name in ("sue", "oue"):
        return np.dtype([("bits", "u1", ((mech.domain_size + 7) // 8,))])
    if name == "rappor":
        return np.dtype([("cohorts", "<u4"), ("bits", "u1", ((mech.bloom_bits + 7) // 8,))])  # type: ignore[attr-defined]
    if name == "heavy_hitters":
        return np.dtype([("levels", "<u4"), ("seed_indices", "<u4"), ("values", "<u4")])
    raise ValueError(f"no row layout for mechanism {name!r} (rows exist for {', '.join(ROW_ORACLES)})")


def to_rows(mech: Mechanism, columns: dict[str, Any], count: int) -> np.ndarray:
    """``count`` reports given as ``mech``'s columns → a structured array of ``row_dtype``."""
    dtype = row_dtype(mech)
    rows = np.zeros(count, dtype=dtype)
    for field in dtype.names or ():
        rows[field] = np.asarray(columns[field]).astype(dtype[field].base, copy=False).reshape(
            rows[field].shape)
    return rows


def row_bytes(rows: np.ndarray) -> list[bytes]:
    """Each row's bytes (the plaintext of one message)."""
    flat = rows.view(np.uint8).reshape(len(rows), rows.dtype.itemsize)
    return [r.tobytes() for r in flat]


def from_rows(mech: Mechanism, data: bytes | np.ndarray) -> tuple[dict[str, Any], int]:
    """Concatenated rows → (``mech``'s columns, report count), as ``mech.columns`` gives them
    (indices int64, OLH seeds uint32, Hadamard signs bool, bit rows uint8). ``ValueError`` when
    ``data`` is not a whole number of rows."""
    dtype = row_dtype(mech)
    buf = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    if buf.size % dtype.itemsize:
        raise ValueError(f"{buf.size} bytes are not whole rows of {dtype.itemsize} bytes")
    rows = buf.view(dtype)
    n = len(rows)
    cols: dict[str, Any] = {}
    for field in dtype.names or ():
        col = rows[field]
        if field == "seeds":
            cols[field] = col.astype(np.uint32)
        elif field == "signs":
            cols[field] = col.astype(bool)
        elif field == "bits":
            cols[field] = np.ascontiguousarray(col)
        else:
            cols[field] = col.astype(np.int64)
    return cols, n


def valid_rows(mech: Mechanism, columns: dict[str, Any], count: int) -> np.ndarray:
    """A boolean mask of the rows ``mech.validate_columns`` accepts (all of them in one vectorized
    call when every row is valid). When some are not (a device that sent a bad row inside its
    ciphertext: a poisoner's unpadded report) the mechanism's per-report checks
    (``report_checks``) give the mask at once, confirmed by one ``validate_columns`` of the rows
    kept; row by row only for a mechanism without them."""
    ok = np.ones(count, dtype=bool)
    try:
        mech.validate_columns(columns, count)
        return ok
    except Exception:  # noqa: BLE001 - InvalidReport: find every bad row
        pass
    try:
        keep = ~rejected(mech.report_checks(columns), count)
        mech.validate_columns(select(columns, keep), int(keep.sum()))
        return keep
    except Exception:  # noqa: BLE001 - no per-report checks, or a stage they do not cover
        pass
    for i in range(count):
        one = {k: v[i:i + 1] for k, v in columns.items()}
        try:
            mech.validate_columns(one, 1)
        except Exception:  # noqa: BLE001
            ok[i] = False
    return ok


def select(columns: dict[str, Any], mask: np.ndarray) -> dict[str, Any]:
    """The columns' rows where ``mask`` is true."""
    return {k: v[mask] for k, v in columns.items()}


__all__ = ["ROW_ORACLES", "from_rows", "row_bytes", "row_dtype", "select", "to_rows", "valid_rows"]
