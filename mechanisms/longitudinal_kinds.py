"""Memoized heavy hitters and range mechanisms (the chain's math: ``memoize``). As in
``longitudinal``, each keeps its plain counterpart's wire shape and decoder: one report has the
plain mechanism's p*, q* (or keep probability) at ε₁.

- ``LHeavyHitters``: the level and pool index are fixed per device (the same HMAC labels as
  ``HeavyHitters.device_slot``); memo key = y = H_{s_jk}(prefix_j(v)) in [g]; PRR at ε∞ over [g]
  per (secret, y), IRR to ε₁: a device reveals ε∞ per distinct value, g·ε∞ over its life.
- ``LRangeHaar``: the level ℓ and Hadamard index j are fixed per device; memo key = the ±1
  coefficient sign, k = 2 (lifetime 2·ε∞).
- ``LRangeHierarchical``: the level is fixed per device (and its OLH seed when that level uses
  OLH); memo key = the node (GRR level, k = d_ℓ) or its hash (OLH level, k = g), each level with
  its own chain; keys are laid end to end over the levels (``key_offsets``) so one integer names
  (level, key). Lifetime: max_ℓ min(d_ℓ, k_ℓ)·ε∞.
"""

from __future__ import annotations

import bisect
from typing import Any, cast

import numpy as np

from ldptel.mechanisms import hashing
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.hadamard import hadamard_entry
from ldptel.mechanisms.heavy_hitters import HeavyHitters
from ldptel.mechanisms.memoize import (
    Chain,
    Memoized,
    MemoizedSign,
    derived_indices,
)
from ldptel.mechanisms.olh import OLH
from ldptel.mechanisms.range_haar import RangeHaar
from ldptel.mechanisms.range_hierarchical import RangeHierarchical

HH_LEVEL, HH_POOL = b"ldptel/heavy_hitters/level", b"ldptel/heavy_hitters/pool"


class LHeavyHitters(Memoized, HeavyHitters):
    """Memoized prefix-tree heavy hitters (``HeavyHitters``' parameters plus ``epsilon_inf``)."""

    def __init__(self, epsilon: float, max_length: int, levels: int | None = None, width: int = 64,
                 secret: bytes | None = None, pool_size: int | None = None, pool_seed: int = 0,
                 epsilon_inf: Any = None) -> None:
        super().__init__(epsilon, max_length, levels=levels, width=width, secret=secret,
                         pool_size=pool_size, pool_seed=pool_seed)
        self.init_memo(epsilon_inf, self.secret, self.g, b"ldptel/memo/hh\0")

    @property
    def p(self) -> float:
        return self.chain.p_star

    def prepare(self, values: Any) -> np.ndarray:
        """The zero-padded (n, L) rows of the values."""
        rows, inverse = self.string_rows(values)
        return cast("np.ndarray", rows[inverse])

    def check_value(self, value: Any) -> bytes:
        return self.check_string(value).ljust(self.max_length, b"\0")

    def device_parts(self, secrets: list[bytes]) -> dict[str, np.ndarray]:
        return {"levels": derived_indices(secrets, HH_LEVEL, self.levels),
                "seed_indices": derived_indices(secrets, HH_POOL, self.pool_size)}

    def draw_device_parts(self, n: int, rng) -> dict[str, np.ndarray]:
        return {"levels": rng.integers(0, self.levels, n).astype(np.int64),
                "seed_indices": rng.integers(0, self.pool_size, n).astype(np.int64)}

    def memo_keys(self, rows: np.ndarray, parts: dict[str, Any]) -> np.ndarray:
        levels = parts["levels"]
        keys = np.empty(rows.shape[0], dtype=np.uint32)
        for j in range(self.levels):  # per level, not per report
            sel = np.flatnonzero(levels == j)
            if sel.size:
                keys[sel] = self.keys(rows[sel], j)
        seeds = self.pool[levels, parts["seed_indices"]]
        return hashing.olh_hash_batch(seeds, keys, self.g).astype(np.int64)

    def key_one(self, data: bytes, parts: dict[str, int]) -> int:
        level, index = parts["levels"], parts["seed_indices"]
        b = int(self.bits[level])
        pref = bytearray(data[: (b + 7) // 8])
        if b % 8:
            pref[-1] &= (0xFF << (8 - b % 8)) & 0xFF
        seed = int(self.pool[level, index])
        return hashing.olh_hash(seed, hashing.xxh32_bytes(bytes(pref), seed=b), self.g)

    def report_columns(self, rows: np.ndarray, parts: dict[str, Any], irr: np.ndarray) -> dict[str, Any]:
        return {"levels": parts["levels"].astype(np.uint32),
                "seed_indices": parts["seed_indices"].astype(np.uint32), "values": irr}

    def columns_one(self, parts: dict[str, Any], irr: int) -> dict[str, Any]:
        return {"levels": [parts["levels"]], "seed_indices": [parts["seed_indices"]],
                "values": [irr]}


class LRangeHaar(MemoizedSign, RangeHaar):
    """Memoized Haar range mechanism: (level, index) fixed per device, PRR on the sign."""

    label = b"ldptel/memo/range-haar\0"

    def device_parts(self, secrets: list[bytes]) -> dict[str, np.ndarray]:
        levels = derived_indices(secrets, b"ldptel/memo/range-level", self.h)
        index = [derived_indices([s], b"ldptel/memo/range-index", int(self.K[lev]))[0]
                 for s, lev in zip(secrets, levels, strict=True)]
        return {"levels": levels, "indices": np.asarray(index, dtype=np.int64)}

    def draw_device_parts(self, n: int, rng) -> dict[str, np.ndarray]:
        levels = rng.integers(0, self.h, n).astype(np.int64)
        index = np.floor(rng.random(n) * self.K[levels]).astype(np.int64) if n else levels
        return {"levels": levels, "indices": index}

    def memo_keys(self, values: np.ndarray, parts: dict[str, Any]) -> np.ndarray:
        lev = parts["levels"] + 1
        sigma = 1 - 2 * ((values >> (lev - 1)) & 1)
        signs = sigma * hadamard_entry(parts["indices"], values >> lev)
        return cast("np.ndarray", (signs > 0).astype(np.int64))

    def key_one(self, value: int, parts: dict[str, int]) -> int:
        lev = parts["levels"] + 1
        positive = ((value >> (lev - 1)) & 1) == 0
        return int(positive == (((value >> lev) & parts["indices"]).bit_count() % 2 == 0))

    def report_columns(self, values: np.ndarray, parts: dict[str, Any], irr: Any) -> dict[str, Any]:
        return {"levels": parts["levels"].astype(np.uint32),
                "indices": parts["indices"].astype(np.uint32), "signs": irr == 1}

    def columns_one(self, parts: dict[str, Any], irr: int) -> dict[str, Any]:
        return {"levels": [parts["levels"]], "indices": [parts["indices"]], "signs": [irr == 1]}


class LRangeHierarchical(Memoized, RangeHierarchical):
    """Memoized hierarchical ranges: level fixed per device, a chain per level."""

    def __init__(self, epsilon: float, domain_size: int, branching: int | None = None,
                 epsilon_inf: Any = None, secret: bytes | None = None) -> None:
        super().__init__(epsilon, domain_size, branching)
        sizes = [o.g if isinstance(o, OLH) else o.domain_size for o in self.oracles]
        self.key_offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        self.init_memo(epsilon_inf, secret, int(self.key_offsets[-1]))
        self.chains = [Chain(self.epsilon, self.epsilon_inf, k, b"ldptel/memo/range-tree\0%d\0" % i)
                       for i, k in enumerate(sizes)]
        self.offset_list = self.key_offsets.tolist()

    @property
    def epsilon_lifetime(self) -> float:
        """max_ℓ min(d_ℓ, k_ℓ)·ε∞ (a device reports at one level for life)."""
        return max(min(c.k, n) for c, n in zip(self.chains, self.nodes, strict=True)) * self.epsilon_inf

    def device_parts(self, secrets: list[bytes]) -> dict[str, np.ndarray]:
        seeds = derived_indices(secrets, b"ldptel/memo/range-seed", 1 << 32)
        return {"levels": derived_indices(secrets, b"ldptel/memo/range-level", self.H),
                "seeds": seeds if self.uses_olh else np.zeros(len(secrets), np.int64)}

    def draw_device_parts(self, n: int, rng) -> dict[str, np.ndarray]:
        return {"levels": rng.integers(0, self.H, n).astype(np.int64),
                "seeds": rng.integers(0, 2**32, n).astype(np.int64)}

    def local_keys(self, nodes: np.ndarray, seeds: np.ndarray, level: int) -> np.ndarray:
        o = self.oracles[level]
        if isinstance(o, OLH):
            keys = hashing.xxh32_u32(nodes.astype(np.uint32))
            return hashing.olh_hash_batch(seeds.astype(np.uint32), keys, o.g).astype(np.int64)
        return nodes

    def memo_keys(self, values: np.ndarray, parts: dict[str, Any]) -> np.ndarray:
        lev = parts["levels"]
        out = np.empty(values.size, dtype=np.int64)
        for ell in range(self.H):  # per level, not per report
            sel = np.flatnonzero(lev == ell)
            out[sel] = self.key_offsets[ell] + self.local_keys(
                values[sel] // self.widths[ell], parts["seeds"][sel], ell)
        return out

    def key_one(self, value: int, parts: dict[str, int]) -> int:
        ell = parts["levels"]
        node, o = value // self.widths[ell], self.oracles[ell]
        if isinstance(o, OLH):
            node = hashing.olh_hash(parts["seeds"], hashing.xxh32_int(node), o.g)
        return int(self.key_offsets[ell]) + node

    def split(self, key: int) -> tuple[int, int]:
        """(level, key within the level) of a global memo key."""
        ell = bisect.bisect_right(self.offset_list, key) - 1
        return ell, key - self.offset_list[ell]

    def permanent(self, secret: bytes, key: int) -> int:
        ell, local = self.split(key)
        return cast("int", self.offset_list[ell] + self.chains[ell].permanent(secret, local))

    def permanent_random(self, keys: np.ndarray, rng) -> np.ndarray:
        return self.per_level(keys, rng, lambda c, k, g: c.permanent_random(k, g), offset=True)

    def instant(self, prr: np.ndarray, rng) -> np.ndarray:
        return self.per_level(prr, rng, lambda c, k, g: c.instant(k, g), offset=False)

    def per_level(self, keys: np.ndarray, rng, step, offset: bool) -> np.ndarray:
        """``step(chain, local keys, rng)`` per level; global keys back if ``offset``."""
        keys = np.asarray(keys, dtype=np.int64)
        lev = np.searchsorted(self.key_offsets, keys, side="right") - 1
        out = np.empty(keys.size, dtype=np.int64)
        for ell, chain in enumerate(self.chains):
            sel = np.flatnonzero(lev == ell)
            if sel.size:
                base = self.key_offsets[ell]
                out[sel] = step(chain, keys[sel] - base, rng) + (base if offset else 0)
        return out

    def instant_one(self, prr: int, draws: Draws = SYSTEM_DRAWS) -> int:
        ell, local = self.split(prr)
        return self.chains[ell].instant_one(local, draws)

    def report_columns(self, values: np.ndarray, parts: dict[str, Any], irr: np.ndarray) -> dict[str, Any]:
        seeds = parts["seeds"] if self.uses_olh else parts["seeds"][:0]
        return {"levels": parts["levels"].astype(np.uint32), "values": irr.astype(np.uint32),
                "seeds": seeds.astype(np.uint32)}

    def columns_one(self, parts: dict[str, Any], irr: int) -> dict[str, Any]:
        return {"levels": [parts["levels"]], "values": [irr],
                "seeds": [parts["seeds"]] if self.uses_olh else []}


__all__ = ["LHeavyHitters", "LRangeHaar", "LRangeHierarchical"]
