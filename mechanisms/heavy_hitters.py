"""Heavy hitters over strings: a prefix tree walked level by level (PEM / TreeHistogram family),
OLH per level at the full ε with a public pool of hash seeds per level (domain reduction as in
Apple's "Learning with privacy at scale", 2017, and Wang et al.'s local hashing, 2017), devices
split across levels (not ε).

Encoding. A value is a ``str`` whose UTF-8 encoding has at most L = ``max_length`` bytes and no
NUL byte; it is zero-padded to L bytes, the T = 8L-bit string s̄ (bits in ``np.packbits`` order,
MSB first). NUL is the terminator: since no value contains it, padding is injective ("a" ↦
``61 00 …``; "a\\0" is not a value and the SDK rejects it), and a prefix holding a complete zero
byte determines the whole string (all later bits are zero). Levels j = 1..J cut T into prefix
lengths b_j = ceil(j·T/J) bits (at most 16 new bits per level). prefix_j(s) is the first b_j bits
as ceil(b_j/8) bytes with the bits past b_j zeroed; its OLH key is x = xxh32(prefix bytes,
seed = b_j) (the bit length in the seed keeps the levels' key spaces apart).

Seed pool. Level j has K = ``pool_size`` public seeds s_{j,k} = xxh32(j·K + k, seed =
``pool_seed``) (``pool_seeds``). A device holds one level j and one pool index k for life (two
independent HMAC-SHA256 derivations from its device secret, ``device_slot``; ``encode_batch``
draws both uniformly per simulated device, so repeated reports of a device never spread over
levels or seeds) and reports (j, k, y): y = H_{s_jk}(x) w.p. p = e^ε/(e^ε + g − 1), else uniform
among the g − 1 others — OLH with a seed that carries no information about the value. The hash
range g is the power of two ≤ ``MAX_G`` minimising Var* = q(1−q)/(p − q)² (``pool_hash_range``;
within 2% of OLH's optimum round(e^ε) + 1 for 1 ≤ ε ≤ 5.5, e.g. g = 64 at ε = 4), so the server
reads H as the top log2(g) bits of the 64-bit multiply-add (``hashing.pool_support``).

Estimator and variance. The aggregator keeps, per level, the K × g table T_j[k, y] of report
counts (state independent of N; merged by addition). A prefix u has the support
C_j(u) = Σ_k T_j[k, H_{s_jk}(key(u))] (K lookups), and with q = 1/g
Ĉ_j(u) = (C_j(u) − n_j q)/(p − q) is unbiased for the level's count c of u. Over the
randomization, the devices' pool indices and the pool itself (hash values of distinct keys
uniform and independent):

    Var[Ĉ_j(u)] = (c p(1−p) + (n_j − c) q(1−q))/(p − q)²  +  P2_j(u)/(g − 1),
    P2_j(u) = Σ_k Σ_{v ≠ u} n_{kv}(n_{kv} − 1),   E[P2_j(u)] = Σ_{v ≠ u} n_v(n_v − 1)/K,

n_{kv} the level-j devices of pool index k holding prefix v. The first term is OLH's with a fresh
seed per report (a non-holder matches u w.p. q). The second is the pool's collision term: two
devices that share seed k and a prefix v ≠ u match u together when H_k(v) = H_k(u), so their
match indicators are correlated: Cov = (p − q')²·(1/g)(1 − 1/g) = (p − q)²/(g − 1), with
q' = (1 − p)/(g − 1) and p − q' = (p − q)·g/(g − 1); devices of different seeds or prefixes are
uncorrelated. Relative to the OLH term it is ≈ n_j·Σ_v f_v²/(K(g − 1)·Var*): it grows with the
reports per level and the concentration Σ f², and shrinks as 1/K. K = ``DEFAULT_POOL`` = 2048 at
g = 64, ε = 4 makes it 0.22 of the OLH term at N = 1 M (16 levels, Zipf(1.1) over 10 000
strings: Σ f² = 0.034; std error +10%), 0.04 at N = 200 k, while the decode costs K lookups per
candidate (≈ 2 ns each on one core) and the state J·K·g int32 is 8 MiB. Doubling K halves the
collision term and doubles the decode time.

Decode budget. The walk evaluates at most M = 2^{b_1} + Σ_{j≥2} width·2^{b_j − b_{j−1}}
candidates (``walk_candidates``), K lookups each. The default K is ``DEFAULT_POOL`` halved until
K·M ≤ ``DECODE_BUDGET`` = 2^29 lookups (≈ 1 s on one core; the default layout, 16 one-byte
levels × 64 × 256 candidates, keeps K = 2048: K·M = 5.0·10^8; ``bench/heavy_hitters.py``
measures 0.35–0.7 s from 1 M to 100 M reports) and J·K·g ≤ ``MAX_STATE_CELLS``. A layout with
many new bits per level gets a smaller pool (8 levels of 16 bits, width 8: M = 3.7·10^6, K = 128)
and so a larger collision term, ≈ n_j·Σ_v f_v²/(K(g − 1)·Var*) of the OLH term, which the std
error carries (``pool_variance``): estimates stay honest, only wider at large N. An explicit
``pool_size`` may cost up to ``MAX_DECODE_LOOKUPS`` = 2^31 (K·M ≤ 2^31, ≈ 4 s), else the config
is refused naming pool_size.

``count_variance`` is the first term, ``pool_variance`` the second; the decoder
(``ldptel.aggregator.decoders.heavy_hitters``) estimates P2 from the table and walks the tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ldptel.mechanisms import hashing
from ldptel.mechanisms.base import check_epsilon, check_int
from ldptel.mechanisms.checks import check_lengths, out_of_range, reject_first
from ldptel.mechanisms.device_secret import derive_index, device_secret
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.errors import InvalidReport
from ldptel.mechanisms.grr import perturb_categorical, perturb_one
from ldptel.mechanisms.olh import LocalHashing, keep_probability
from ldptel.mechanisms.randomness import resolve
from ldptel.proto import HeavyHitterPayload, ReportBatch

MAX_LEVEL_BITS = 16  # new bits per level: the walk evaluates width · 2^bits candidates
MAX_G = 256  # hash range cap (the optimum g ≈ e^ε + 1 passes it only for ε > 5.5)
DEFAULT_POOL = 2048  # K: seeds per level (collision term ∝ 1/K, decode cost ∝ K)
MAX_POOL = 1 << 16
MAX_STATE_CELLS = 1 << 23  # J·K·g int32 counts per window: 32 MiB
DECODE_BUDGET = 1 << 29  # the default K keeps K·walk_candidates within this (≈ 1 s on one core)
MAX_DECODE_LOOKUPS = 1 << 31  # an explicit pool_size may cost at most this many lookups
COLUMNS = ("levels", "seed_indices", "values")


def pool_hash_range(epsilon: float) -> int:
    """g: the power of two in [2, ``MAX_G``] with the smallest Var* = q(1−q)/(p − q)², q = 1/g."""
    def var_star(g: int) -> float:
        return (1 / g) * (1 - 1 / g) / (keep_probability(epsilon, g) - 1 / g) ** 2

    return min((1 << t for t in range(1, MAX_G.bit_length())), key=var_star)


def walk_candidates(max_length: int, levels: int, width: int) -> int:
    """M = 2^{b_1} + Σ_{j≥2} width·2^{b_j − b_{j−1}}: the most candidates one decode's walk
    evaluates (each costs K lookups)."""
    new = np.diff(level_bits(8 * max_length, levels), prepend=0)
    return int(2 ** int(new[0]) + width * sum(2 ** int(b) for b in new[1:]))


def default_pool_size(levels: int, g: int, candidates: int) -> int:
    """K = ``DEFAULT_POOL``, halved until the state J·K·g fits ``MAX_STATE_CELLS`` and the decode
    K·``candidates`` fits ``DECODE_BUDGET`` (``walk_candidates``; module docstring)."""
    k = DEFAULT_POOL
    while k > 1 and (levels * k * g > MAX_STATE_CELLS or k * candidates > DECODE_BUDGET):
        k //= 2
    return k


def check_pool_size(value: Any, levels: int, g: int, candidates: int) -> int:
    """1 ≤ K ≤ 2^16 with J·K·g ≤ ``MAX_STATE_CELLS`` and K·``candidates`` ≤
    ``MAX_DECODE_LOOKUPS``, else ``ValueError`` naming pool_size."""
    k = check_int(value, "pool_size", 1, MAX_POOL)
    if levels * k * g > MAX_STATE_CELLS:
        raise ValueError(f"pool_size = {k} makes levels·pool_size·g = {levels}·{k}·{g} counts per "
                         f"window, over {MAX_STATE_CELLS} (32 MiB): lower pool_size or levels")
    if k * candidates > MAX_DECODE_LOOKUPS:
        raise ValueError(f"pool_size = {k} makes a decode evaluate up to {candidates} candidates × "
                         f"{k} seeds = {k * candidates} lookups, over {MAX_DECODE_LOOKUPS}: lower "
                         f"pool_size, width, or the bits per level (more levels)")
    return k


def pool_seeds(pool_seed: int, levels: int, pool_size: int) -> np.ndarray:
    """The (J, K) uint32 public seeds s_{j,k} = xxh32(j·K + k, seed = ``pool_seed``)."""
    slots = np.arange(levels * pool_size, dtype=np.uint32)
    return hashing.xxh32_u32(slots, pool_seed).reshape(levels, pool_size)

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
    ``width`` (candidates kept per level, default 64), ``pool_size`` (K public seeds per level,
    default ``default_pool_size``), ``pool_seed`` (the uint32 the pool is derived from, default
    0), ``secret`` (the device secret that fixes this device's level and pool index; random if
    omitted)."""

    name = "heavy_hitters"
    payload = "heavy_hitters"

    def __init__(self, epsilon: float, max_length: int, levels: int | None = None, width: int = 64,
                 secret: bytes | None = None, pool_size: int | None = None,
                 pool_seed: int = 0) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.max_length = check_int(max_length, "max_length", 1, 64)
        self.total_bits = 8 * self.max_length
        lo = -(-self.total_bits // MAX_LEVEL_BITS)
        self.levels = check_int(self.max_length if levels is None else levels, "levels", lo,
                                self.total_bits)
        self.width = check_int(width, "width", 1, 4096)
        self.secret = device_secret(secret)
        self.g = pool_hash_range(self.epsilon)
        cands = walk_candidates(self.max_length, self.levels, self.width)
        self.pool_size = check_pool_size(
            default_pool_size(self.levels, self.g, cands) if pool_size is None else pool_size,
            self.levels, self.g, cands)
        self.pool_seed = check_int(pool_seed, "pool_seed", 0, 0xFFFFFFFF)
        self.bits = level_bits(self.total_bits, self.levels)
        self.domain_size = 0  # strings: no enumerable domain
        self._slot: tuple[int, int] | None = None
        self._pool: np.ndarray | None = None

    # --- math -----------------------------------------------------------------------------
    def pool_variance(self, pairs: np.ndarray | float) -> np.ndarray:
        """The collision term P2/(g − 1) of Var[Ĉ_j(u)], given P2 = the same-seed device pairs
        holding one prefix other than u (module docstring)."""
        return np.asarray(pairs, dtype=np.float64) / (self.g - 1)

    @property
    def pool(self) -> np.ndarray:
        """The (J, K) uint32 seeds s_{j,k} (computed once)."""
        if self._pool is None:
            self._pool = pool_seeds(self.pool_seed, self.levels, self.pool_size)
        return self._pool

    def new_bits(self, level: int) -> int:
        """Bits added at ``level`` (0-based): b_1 for the first level, else b_j − b_{j−1}."""
        return int(self.bits[level] - (self.bits[level - 1] if level else 0))

    # --- strings ----------------------------------------------------------------------------
    def check_string(self, value: Any) -> bytes:
        """UTF-8 bytes of a valid value, else ``ValueError`` naming ``value``."""
        if not isinstance(value, str):
            raise ValueError(f"value must be a string, got {type(value).__name__}")
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: not Unicode text, no UTF-8 bytes
            raise ValueError(f"value is not valid Unicode: a lone surrogate at position {exc.start}"
                             ) from None
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
        return self.device_slot()[0]

    def device_slot(self) -> tuple[int, int]:
        """This device's (level, pool index), fixed for life by its secret (two HMAC labels)."""
        if self._slot is None:
            self._slot = (derive_index(self.secret, b"ldptel/heavy_hitters/level", self.levels),
                          derive_index(self.secret, b"ldptel/heavy_hitters/pool", self.pool_size))
        return self._slot

    # --- encoding -------------------------------------------------------------------------
    def encode(self, value: Any, campaign: str = "", draws: Draws = SYSTEM_DRAWS) -> ReportBatch:
        """One report of this device: its own level and pool seed, the scalar xxhash path, OS
        randomness (``draws``)."""
        data = self.check_string(value).ljust(self.max_length, b"\0")
        level, index = self.device_slot()
        b = int(self.bits[level])
        pref = bytearray(data[: (b + 7) // 8])
        if b % 8:
            pref[-1] &= (0xFF << (8 - b % 8)) & 0xFF
        seed = hashing.xxh32_int(level * self.pool_size + index, self.pool_seed)  # = pool[level, index]
        y = hashing.olh_hash(seed, hashing.xxh32_bytes(bytes(pref), seed=b), self.g)
        cols = {"levels": [level], "seed_indices": [index], "values": [perturb_one(y, self.g, self.p, draws)]}
        return self.pack(cols, 1, campaign)

    def encode_batch(self, values: Any, rng: np.random.Generator | None = None,
                     campaign: str = "", batch_id: bytes | None = None) -> ReportBatch:
        """Simulation: every value is a distinct device with a uniformly drawn level and pool
        index."""
        rows, inverse = self.string_rows(values)
        return self.pack(self.randomize_rows(rows, inverse, resolve(rng)), inverse.size, campaign,
                         batch_id)

    def randomize_rows(self, rows: np.ndarray, inverse: np.ndarray, rng) -> dict[str, Any]:
        n = inverse.size
        levels = rng.integers(0, self.levels, n).astype(np.int64)
        index = rng.integers(0, self.pool_size, n).astype(np.int64)
        keys = np.empty(n, dtype=np.uint32)
        for j in range(self.levels):  # per level (≤ 8·max_length), not per report
            sel = np.flatnonzero(levels == j)
            if sel.size:
                keys[sel] = self.keys(rows, j)[inverse[sel]]
        y = hashing.olh_hash_batch(self.pool[levels, index], keys, self.g).astype(np.int64)
        return {"levels": levels.astype(np.uint32), "seed_indices": index.astype(np.uint32),
                "values": perturb_categorical(y, self.g, self.p, rng)}

    def randomize(self, values: np.ndarray | Sequence[str], rng) -> dict[str, Any]:
        rows, inverse = self.string_rows(values)
        return self.randomize_rows(rows, inverse, rng)

    def payload_message(self, columns: dict[str, Any]) -> HeavyHitterPayload:
        return HeavyHitterPayload(**{k: np.asarray(columns[k]).tolist() for k in COLUMNS})

    def columns(self, batch: ReportBatch) -> dict[str, Any]:
        p = batch.heavy_hitters
        return {k: np.asarray(getattr(p, k), dtype=np.int64) for k in COLUMNS}

    def validate_columns(self, columns: dict[str, Any], count: int) -> None:
        """Every column has ``count`` entries, level < J, seed index < K, y < g (the lowest bad
        report is named)."""
        if count and len(columns["seed_indices"]) == 0 and len(columns["levels"]) == count:
            raise InvalidReport(0, "seed_indices is missing: heavy-hitter reports carry a seed-pool "
                                   "index (an SDK that sends 32-bit seeds is too old)")
        check_lengths(columns, count, COLUMNS)
        reject_first([
            out_of_range(columns["levels"], self.levels, "level", f"levels = {self.levels}"),
            out_of_range(columns["seed_indices"], self.pool_size, "seed index",
                         f"pool_size = {self.pool_size}"),
            out_of_range(columns["values"], self.g, "value", f"g = {self.g}")])

    def public_params(self) -> dict[str, Any]:
        return {"oracle": "olh", "epsilon": self.epsilon, "max_length": self.max_length,
                "levels": self.levels, "width": self.width, "g": self.g,
                "pool_size": self.pool_size, "pool_seed": self.pool_seed}

    def __repr__(self) -> str:
        return (f"HeavyHitters(epsilon={self.epsilon!r}, max_length={self.max_length}, "
                f"levels={self.levels}, width={self.width}, pool_size={self.pool_size}, "
                f"pool_seed={self.pool_seed})")

