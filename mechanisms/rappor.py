"""RAPPOR (Erlingsson, Pihur, Korolova 2014).

A device belongs to one of m cohorts for life. Its string is hashed into a k-bit Bloom filter B
with h hash functions of its cohort (bit xxh32(s, seed = cohort·h + i) mod k, i < h). Permanent
randomized response, memoized per value: B'_b = 1 w.p. f/2, 0 w.p. f/2, else B_b; the
randomness comes from HMAC-SHA256(device secret, value), so the memo needs no stored table.
Instantaneous randomized response on every report: S_b = 1 w.p. q if B'_b = 1, w.p. p if 0.

P(S_b = 1 | B_b = 1) = q* = ½f(p+q) + (1−f)q,   P(S_b = 1 | B_b = 0) = p* = ½f(p+q) + (1−f)p.
One report: ε₁ = h·ln(q*(1−p*)/(p*(1−q*))); a lifetime of reports of one value:
ε∞ = 2h·ln((1−f/2)/(f/2)).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldptel.mechanisms import hashing
from ldptel.mechanisms.base import MAX_EPSILON, MIN_EPSILON, Mechanism, check_int
from ldptel.mechanisms.checks import (
    bit_rows,
    check_bit_rows,
    check_lengths,
    out_of_range,
    reject_first,
)
from ldptel.mechanisms.device_secret import derive, derive_index, device_secret
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.errors import bad_argument
from ldptel.mechanisms.poisoning import rappor_weight_bounds
from ldptel.mechanisms.randomness import bernoulli_packed, resolve
from ldptel.proto import RapporPayload, ReportBatch

RAPPOR_KEYS = ("bloom_bits", "hashes", "cohorts", "f", "p", "q", "candidates")  # public parameters
# Decoding costs grow as candidates³ (one |S|×|S| factorization; about 1 s at 2,048): a campaign's
# ``max_candidates`` (default below) caps its list, and no mechanism takes more than the bound.
MAX_CANDIDATES_DEFAULT = 4096
MAX_CANDIDATES = 16384
MAX_EPSILON_INF = 100.0  # RAPPOR's lifetime ε: beyond, no privacy is left to speak of (and f ≈ 0 made it inf)
MIN_BIT_SCALE = 1e-6  # (1 − f)(q − p): below, its square in the bit variances leaves float64's range


def _check_prob(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise bad_argument(f"{name} must be a probability, got {type(value).__name__}", name)
    v = float(value)
    if not 0.0 <= v <= 1.0:
        raise bad_argument(f"{name} must be in [0, 1], got {value!r}", name)
    return v


class RAPPOR(Mechanism):
    name = "rappor"
    payload = "rappor"

    def __init__(
        self,
        bloom_bits: int,
        hashes: int,
        cohorts: int,
        f: float,
        p: float,
        q: float,
        candidates: Sequence[str] = (),
        secret: bytes | None = None,
    ) -> None:
        self.bloom_bits = check_int(bloom_bits, "bloom_bits", 1, 4096)
        self.hashes = check_int(hashes, "hashes", 1, self.bloom_bits)
        self.cohorts = check_int(cohorts, "cohorts", 1, 1 << 16)
        self.f = _check_prob(f, "f")
        self.p = _check_prob(p, "p")
        self.q = _check_prob(q, "q")
        if not 0.0 < self.f < 1.0:
            raise bad_argument(f"f must be in (0, 1) (f = 0 gives no longitudinal privacy), got {f!r}", "f")
        if not self.q > self.p:
            raise bad_argument(f"q must be greater than p, got p={p!r}, q={q!r}", "q")
        if self.p_star <= 0.0 or self.q_star >= 1.0:
            raise bad_argument("p and q must give 0 < p* and q* < 1 (else ε₁ is infinite)", "p")
        if not MIN_EPSILON <= self.epsilon_one <= MAX_EPSILON:
            raise bad_argument(f"p, q, f, hashes give ε₁ = {self.epsilon_one:.3g}, outside "
                               f"[{MIN_EPSILON:g}, {MAX_EPSILON:g}]", None)
        if not self.epsilon_inf <= MAX_EPSILON_INF:  # f → 0: (1 − f/2)/(f/2) overflows to inf
            raise bad_argument(f"f must give ε∞ = 2h·ln((1 − f/2)/(f/2)) <= {MAX_EPSILON_INF:g}, "
                              f"got f = {f!r}", "f")
        if self.bit_scale < MIN_BIT_SCALE:  # the bit estimates divide by it, their variance by its square
            raise bad_argument(f"f, p, q give (1 − f)(q − p) = {self.bit_scale:.3g}, below "
                               f"{MIN_BIT_SCALE:g}: the estimates would divide by (almost) zero", None)
        if isinstance(candidates, (str, bytes)) or not all(isinstance(c, str) for c in candidates):
            raise bad_argument("candidates must be a list of strings", "candidates")
        if len(set(candidates)) != len(candidates):
            raise bad_argument("candidates must be distinct", "candidates")
        if len(candidates) > MAX_CANDIDATES:
            raise bad_argument(f"candidates has {len(candidates)} entries, more than {MAX_CANDIDATES} (the "
                              "decoder's bound: its cost grows as the cube of the candidates)", "candidates")
        self.candidates = list(candidates)
        self.secret = device_secret(secret)
        self.epsilon = self.epsilon_one
        self.domain_size = len(self.candidates)
        self._bloom_cache: dict[str, np.ndarray] = {}
        self._design: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def secret(self) -> bytes:
        """The device secret; setting it resets what is derived from it (cohort, memo)."""
        return self._secret

    @secret.setter
    def secret(self, value: bytes) -> None:
        self._secret = value
        self._prr_memo: dict[tuple[str, int], np.ndarray] = {}
        self._cohort: int | None = None

    # --- privacy and rates ----------------------------------------------------------------
    @property
    def q_star(self) -> float:
        return 0.5 * self.f * (self.p + self.q) + (1 - self.f) * self.q

    @property
    def p_star(self) -> float:
        return 0.5 * self.f * (self.p + self.q) + (1 - self.f) * self.p

    @property
    def epsilon_one(self) -> float:
        qs, ps = self.q_star, self.p_star
        return self.hashes * math.log(qs * (1 - ps) / (ps * (1 - qs)))

    @property
    def epsilon_inf(self) -> float:
        half = self.f / 2
        if half == 0.0:  # f a subnormal float: f/2 underflows to 0, and ε∞ is infinite
            return math.inf
        return 2 * self.hashes * math.log((1 - half) / half)

    @property
    def bit_scale(self) -> float:
        """(1 − f)(q − p): the difference q* − p* that the bit-count estimate divides by."""
        return (1 - self.f) * (self.q - self.p)

    def variance_star(self) -> float:
        """Not a closed form for RAPPOR: the regression's std errors are the reference."""
        return float("nan")

    def count_variance(self, counts: np.ndarray, n: int) -> np.ndarray:
        raise NotImplementedError("RAPPOR std errors come from the regression fit")

    # --- Bloom filter -----------------------------------------------------------------------
    def bloom_positions(self, value: str, cohort: int) -> list[int]:
        data = value.encode("utf-8")
        base = cohort * self.hashes
        return [hashing.xxh32_bytes(data, base + i) % self.bloom_bits for i in range(self.hashes)]

    def bloom_table(self, value: str) -> np.ndarray:
        """(cohorts, k) boolean Bloom filters of ``value`` in every cohort (cached)."""
        table = self._bloom_cache.get(value)
        if table is None:
            table = np.zeros((self.cohorts, self.bloom_bits), dtype=bool)
            for c in range(self.cohorts):
                table[c, self.bloom_positions(value, c)] = True
            if len(self._bloom_cache) < 100_000:
                self._bloom_cache[value] = table
        return table

    def design_entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The set entries of the design X[c, b, j] (candidate j sets bit b in cohort c) as int64
        arrays (cohort, bit, candidate), sorted by cohort then bit (computed once)."""
        if not self.candidates:
            raise ValueError("candidates are needed to decode RAPPOR")
        if self._design is None:
            tables = np.stack([self.bloom_table(s) for s in self.candidates])  # (C, cohorts, k)
            cand, cohort, bit = np.nonzero(tables)
            order = np.lexsort((cand, bit, cohort))
            self._design = (cohort[order], bit[order], cand[order])
        return self._design

    def design_matrix(self) -> np.ndarray:
        """X[c, b, j] = 1 iff candidate j sets bit b in cohort c (dense; for tests)."""
        X = np.zeros((self.cohorts, self.bloom_bits, len(self.candidates)), dtype=bool)
        X[self.design_entries()] = True
        return X

    # --- device side ------------------------------------------------------------------------
    def device_cohort(self) -> int:
        return derive_index(self.secret, b"ldptel/rappor/cohort", self.cohorts)

    def permanent_bits(self, value: str, cohort: int) -> np.ndarray:
        """B' for ``value``: a deterministic function of (secret, value), so it is memoized
        without a stored table (kept in memory for speed; recomputing gives the same bits)."""
        memo = self._prr_memo.get((value, cohort))
        if memo is not None:
            return memo
        key = derive(self.secret, b"ldptel/rappor/prr\0" + value.encode())
        stream = hashlib.shake_256(key).digest(4 * self.bloom_bits)
        u = np.frombuffer(stream, dtype="<u4").astype(np.float64) / 2**32
        bloom = self.bloom_table(value)[cohort]
        bits = np.where(u < self.f / 2, True, np.where(u < self.f, False, bloom))
        if len(self._prr_memo) < 10_000:
            self._prr_memo[(value, cohort)] = bits
        return bits

    def check_strings(self, values: Any) -> list[str]:
        if isinstance(values, str):
            raise ValueError("values must be a sequence of strings")
        out = list(values)
        for v in out:
            if not isinstance(v, str):
                raise ValueError(f"value must be a string, got {type(v).__name__}")
        return out

    def encode(self, value: Any, campaign: str = "", draws: Draws = SYSTEM_DRAWS) -> ReportBatch:
        """One report of this device (cohort and permanent bits from its secret); the
        instantaneous response takes k uniforms from ``draws.bytes(8k)`` (each 8 little-endian
        bytes as a uint64 u, the uniform (u >> 11)·2^-53, as ``OsRandom.random``)."""
        if not isinstance(value, str):
            raise ValueError(f"value must be a string, got {type(value).__name__}")
        if self._cohort is None:
            self._cohort = self.device_cohort()
        cohort = self._cohort
        prr = self.permanent_bits(value, cohort)
        raw = np.frombuffer(draws.bytes(8 * self.bloom_bits), dtype="<u8")
        u = (raw >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        bits = u < np.where(prr, self.q, self.p)
        cols = {"cohorts": np.array([cohort], dtype=np.uint32),
                "bits": np.packbits(bits[None, :], axis=1)}
        return self.pack(cols, 1, campaign)

    def encode_batch(self, values: Any, rng: np.random.Generator | None = None,
                     campaign: str = "", batch_id: bytes | None = None) -> ReportBatch:
        """Simulation: every value is a distinct device (own cohort, own permanent bits)."""
        strings = self.check_strings(values)
        return self.pack(self.randomize(strings, resolve(rng)), len(strings), campaign, batch_id)

    def randomize(self, values: np.ndarray | Sequence[str], rng) -> dict[str, Any]:
        """Simulation of devices that report once: given its Bloom bit B, a reported bit is
        Bernoulli(q*) if B = 1 else Bernoulli(p*), independently across bits — the same
        distribution as permanent then instantaneous RR, drawn bit-sliced in one stage."""
        n, k = len(values), self.bloom_bits
        row = (k + 7) // 8
        cohorts = rng.integers(0, self.cohorts, n).astype(np.int64)
        if n == 0:
            return {"cohorts": cohorts.astype(np.uint32), "bits": np.zeros((0, row), np.uint8)}
        uniq, inverse = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
        tables = np.packbits(np.stack([self.bloom_table(str(s)) for s in uniq]), axis=2)
        bloom = tables[inverse, cohorts]  # (n, row) packed Bloom filters
        ones = bernoulli_packed(rng, self.q_star, n, k)
        zeros = bernoulli_packed(rng, self.p_star, n, k)
        return {"cohorts": cohorts.astype(np.uint32), "bits": (bloom & ones) | (~bloom & zeros)}

    def payload_message(self, columns: dict[str, Any]) -> RapporPayload:
        return RapporPayload(cohorts=columns["cohorts"].tolist(),
                             bits=np.ascontiguousarray(columns["bits"]).tobytes())

    def columns(self, batch: ReportBatch) -> dict[str, Any]:
        return {
            "cohorts": np.asarray(batch.rappor.cohorts, dtype=np.int64),
            "bits": bit_rows(batch.rappor.bits, batch.count, self.bloom_bits),
        }

    def weight_bounds(self) -> tuple[int, int]:
        """Accepted number of set bits per report: W = Binomial(m, q*) + Binomial(k − m, p*) for
        an honest device whose value sets m ∈ [1, h] Bloom bits, rejected outside [lo, hi] with
        probability < 1e-9 (``poisoning.rappor_weight_bounds``)."""
        if getattr(self, "_weight_bounds", None) is None:
            self._weight_bounds = rappor_weight_bounds(self.bloom_bits, self.hashes,
                                                       self.p_star, self.q_star)
        return self._weight_bounds

    def validate_columns(self, columns: dict[str, Any], count: int) -> None:
        """``count`` cohorts in [0, cohorts) and rows of ceil(k/8) bytes (as ``columns`` returns
        them) with zero padding and a plausible number of set bits."""
        check_lengths(columns, count, ["cohorts", "bits"])
        reject_first([out_of_range(columns["cohorts"], self.cohorts, "cohort"),
                      *check_bit_rows(columns["bits"], self.bloom_bits, self.weight_bounds())])

    def public_params(self) -> dict[str, Any]:
        return {
            "oracle": self.name, "bloom_bits": self.bloom_bits, "hashes": self.hashes,
            "cohorts": self.cohorts, "f": self.f, "p": self.p, "q": self.q,
            "epsilon": self.epsilon_one, "epsilon_inf": self.epsilon_inf,
        }

    def __repr__(self) -> str:
        return (f"RAPPOR(bloom_bits={self.bloom_bits}, hashes={self.hashes}, "
                f"cohorts={self.cohorts}, f={self.f}, p={self.p}, q={self.q})")
