"""Heavy hitters over strings: a prefix tree walked level by level (PEM / TreeHistogram family),
OLH per level at the full ε, devices split across levels (not ε).

Encoding. A value is a ``str`` whose UTF-8 encoding has at most L = ``max_length`` bytes and no
NUL byte; it is zero-padded to L bytes, the T = 8L-bit string s̄ (bits in ``np.packbits`` order,
MSB first). NUL is the terminator: since no value contains it, padding is injective ("a" ↦
``61 00 …``; "a\\0" is not a value and the SDK rejects it), and a prefix holding a complete zero
byte determines the whole string (all later bits are zero). Levels j = 1..J cut T into prefix
lengths b_j = ceil(j·T/J) bits (at most 16 new bits per level). prefix_j(s) is the first b_j bits
as ceil(b_j/8) bytes with the bits past b_j zeroed; its OLH key is x = xxh32(prefix bytes,
seed = b_j) (the bit length in the seed keeps the levels' key spaces apart).

Device. Assigned to one level for life (uniform over J; ``encode`` derives it from the instance's
device secret with HMAC-SHA256, ``encode_batch`` draws one per simulated device) and reports
(level, seed, y): y = H_seed(x) w.p. p = e^ε/(e^ε + g − 1), else uniform among the g − 1 others,
g = round(e^ε) + 1. A level-j report supports a prefix u iff H_seed(key(u)) = y, w.p. p for the
true prefix and q = 1/g for any other, so from the n_j level-j reports
Ĉ_j(u) = (C_j(u) − n_j q)/(p − q) is unbiased for the level's count of prefix u, with
Var = (c p(1−p) + (n_j − c) q(1−q))/(p − q)²  (null: n_j·Var*, Var* = q(1−q)/(p−q)²).
The decoder (``ldptel.aggregator.decoders.heavy_hitters``) walks the tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ldptel.client import hashing
from ldptel.client.device_secret import derive_index, device_secret
from ldptel.client.mechanisms.base import check_epsilon, check_int
from ldptel.client.mechanisms.checks import check_lengths, out_of_range, reject_first
from ldptel.client.mechanisms.grr import perturb_categorical, perturb_one
from ldptel.client.mechanisms.olh import LocalHashing, olh_g
from ldptel.client.randomness import SYSTEM_RANDOM, resolve
from ldptel.proto import HeavyHitterPayload, ReportBatch

MAX_LEVEL_BITS = 16  # new bits per level: the walk evaluates width · 2^bits candidates

def level_bits(total_bits: int, levels: int) -> np.ndarray:
    """Prefix lengths b_j = ceil(j·T/J), j = 1..J (int64)."""
    j = np.arange(1, levels + 1, dtype=np.int64)
    return -((-j * total_bits) // levels)


def prefix_rows(rows: np.ndarray, bits: int) -> np.ndarray:
    """The first ``bits`` bits of each padded row, as ceil(bits/8) bytes, later bits zeroed."""
    nb = (bits + 7) // 8
    out = np.array(rows[:, :nb], dtype=np.uint8, copy=True)
    if bits % 8:
        out[:, -1] &= np.uint8((0xFF << (8 - bits % 8)) & 0xFF)
    return out


class HeavyHitters(LocalHashing):
    """Prefix-tree heavy hitters. ``epsilon`` (0 < ε ≤ 10), ``max_length`` (bytes, 1..64),
    ``levels`` (default ``max_length``: one byte per level; at most 16 new bits per level),
    ``width`` (candidates kept per level, default 64), ``secret`` (the device secret that fixes
    this device's level; random if omitted)."""

    name = "heavy_hitters"
    payload = "heavy_hitters"

    def __init__(self, epsilon: float, max_length: int, levels: int | None = None, width: int = 64,
                 secret: bytes | None = None) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.max_length = check_int(max_length, "max_length", 1, 64)
        self.total_bits = 8 * self.max_length
        lo = -(-self.total_bits // MAX_LEVEL_BITS)
        self.levels = check_int(self.max_length if levels is None else levels, "levels", lo,
                                self.total_bits)
        self.width = check_int(width, "width", 1, 4096)
        self.secret = device_secret(secret)
        self.g = olh_g(self.epsilon)
        self.bits = level_bits(self.total_bits, self.levels)
        self.domain_size = 0  # strings: no enumerable domain
        self._level: int | None = None

    # --- math -----------------------------------------------------------------------------
    def new_bits(self, level: int) -> int:
        """Bits added at ``level`` (0-based): b_1 for the first level, else b_j − b_{j−1}."""
        return int(self.bits[level] - (self.bits[level - 1] if level else 0))

    # --- strings ----------------------------------------------------------------------------
    def check_string(self, value: Any) -> bytes:
        """UTF-8 bytes of a valid value, else ``ValueError`` naming ``value``."""
        if not isinstance(value, str):
            raise ValueError(f"value must be a string, got {type(value).__name__}")
        data = value.encode("utf-8")
        if len(data) > self.max_length:
            raise ValueError(f"value is {len(data)} bytes in UTF-8, longer than max_length = "
                             f"{self.max_length}: {value[:40]!r}")
        if b"\0" in data:
            raise ValueError("value must not contain NUL characters (NUL is the padding terminator)")
        return data

    def string_rows(self, values: np.ndarray | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Distinct values as an (u, L) zero-padded uint8 matrix, and each value's row index.

        The Python work is per distinct value (validation, UTF-8); per-report work is numpy."""
        if isinstance(values, (str, bytes)):
            raise ValueError("values must be a sequence of strings")
        arr = np.asarray(list(values), dtype=object)
        if arr.size == 0:
            return np.zeros((0, self.max_length), np.uint8), np.zeros(0, np.int64)
        for v in arr:  # type check first: np.unique needs comparable objects
            if not isinstance(v, str):
                raise ValueError(f"value must be a string, got {type(v).__name__}")
        uniq, inverse = np.unique(arr, return_inverse=True)
        padded = b"".join(self.check_string(s).ljust(self.max_length, b"\0") for s in uniq)
        rows = np.frombuffer(padded, dtype=np.uint8).reshape(uniq.size, self.max_length)
        return rows, inverse.astype(np.int64)

    def decode_row(self, row: np.ndarray) -> str:
        """The string of a padded row (trailing NULs stripped; invalid UTF-8 escaped)."""
        return bytes(row).rstrip(b"\0").decode("utf-8", errors="backslashreplace")

    def keys(self, rows: np.ndarray, level: int) -> np.ndarray:
        """OLH keys of the level-``level`` (0-based) prefixes of padded ``rows``."""
        b = int(self.bits[level])
        return hashing.xxh32_rows(prefix_rows(rows, b), seed=b)

    def device_level(self) -> int:
        """This device's level (0-based), fixed for life by its secret."""
        return derive_index(self.secret, b"ldptel/heavy_hitters/level", self.levels)

    # --- encoding -------------------------------------------------------------------------
    def encode(self, value: Any, campaign: str = "") -> ReportBatch:
        """One report of this device: its own level, the scalar xxhash path, OS randomness."""
        data = self.check_string(value).ljust(self.max_length, b"\0")
        if self._level is None:
            self._level = self.device_level()
        level = self._level
        b = int(self.bits[level])
        pref = bytearray(data[: (b + 7) // 8])
        if b % 8:
            pref[-1] &= (0xFF << (8 - b % 8)) & 0xFF
        seed = SYSTEM_RANDOM.getrandbits(32)
        y = hashing.olh_hash(seed, hashing.xxh32_bytes(bytes(pref), seed=b), self.g)
        cols = {"levels": [level], "seeds": [seed], "values": [perturb_one(y, self.g, self.p)]}
        return self.pack(cols, 1, campaign)

    def encode_batch(self, values: Any, rng: np.random.Generator | None = None,
                     campaign: str = "", batch_id: bytes | None = None) -> ReportBatch:
        """Simulation: every value is a distinct device with a uniformly drawn level."""
        rows, inverse = self.string_rows(values)
        return self.pack(self.randomize_rows(rows, inverse, resolve(rng)), inverse.size, campaign,
                         batch_id)

    def randomize_rows(self, rows: np.ndarray, inverse: np.ndarray, rng) -> dict:
        n = inverse.size
        levels = rng.integers(0, self.levels, n).astype(np.int64)
        seeds = rng.integers(0, 2**32, n).astype(np.uint32)
        keys = np.empty(n, dtype=np.uint32)
        for j in range(self.levels):  # per level (≤ 8·max_length), not per report
            sel = np.flatnonzero(levels == j)
            if sel.size:
                keys[sel] = self.keys(rows, j)[inverse[sel]]
        y = hashing.olh_hash_batch(seeds, keys, self.g).astype(np.int64)
        return {"levels": levels.astype(np.uint32), "seeds": seeds,
                "values": perturb_categorical(y, self.g, self.p, rng)}

    def randomize(self, values: np.ndarray | Sequence[str], rng) -> dict:
        rows, inverse = self.string_rows(values)
        return self.randomize_rows(rows, inverse, rng)

    def payload_message(self, columns: dict) -> HeavyHitterPayload:
        return HeavyHitterPayload(levels=np.asarray(columns["levels"]).tolist(),
                                  seeds=np.asarray(columns["seeds"]).tolist(),
                                  values=np.asarray(columns["values"]).tolist())

    def columns(self, batch: ReportBatch) -> dict:
        p = batch.heavy_hitters
        return {"levels": np.asarray(p.levels, dtype=np.int64),
                "seeds": np.asarray(p.seeds, dtype=np.uint32),
                "values": np.asarray(p.values, dtype=np.int64)}

    def validate_columns(self, columns: dict, count: int) -> None:
        """Every column has ``count`` entries, level < J, y < g."""
        check_lengths(columns, count, ("levels", "seeds", "values"))
        reject_first([out_of_range(columns["levels"], self.levels, "level", f"levels = {self.levels}"),
                      out_of_range(columns["values"], self.g, "value", f"g = {self.g}")])

    def public_params(self) -> dict:
        return {"oracle": "olh", "epsilon": self.epsilon, "max_length": self.max_length,
                "levels": self.levels, "width": self.width, "g": self.g}

    def __repr__(self) -> str:
        return (f"HeavyHitters(epsilon={self.epsilon!r}, max_length={self.max_length}, "
                f"levels={self.levels}, width={self.width})")

