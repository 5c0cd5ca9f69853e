"""Randomness sources. Production: the OS (``os.urandom``). Tests and simulations pass a seeded
``numpy.random.Generator``; nothing on the collector side can select one.

Both expose the subset of the numpy ``Generator`` API the randomizers use:
``random(size)`` (uniform [0, 1) doubles) and ``integers(low, high, size)``.
"""

from __future__ import annotations

import os
import random

import numpy as np

SYSTEM_RANDOM = random.SystemRandom()  # scalar OS randomness for one-report encodes


class OsRandom:
    """Uniforms and integers drawn from ``os.urandom`` (no userspace PRNG state)."""

    def random(self, size: int | tuple[int, ...] | None = None) -> np.ndarray | float:
        n = int(np.prod(size)) if size is not None else 1
        raw = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
        out = (raw >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        return float(out[0]) if size is None else out.reshape(size)

    def integers(
        self, low: int | np.ndarray, high: int | np.ndarray | None = None,
        size: int | tuple[int, ...] | None = None, dtype: type = np.int64,
    ) -> np.ndarray | int:
        """Uniform integers in ``[low, high)``; ``low`` and ``high`` may be arrays that broadcast
        against ``size`` (as ``numpy.random.Generator.integers`` takes them)."""
        if high is None:
            low, high = 0, low
        lo, hi = np.asarray(low, dtype=np.int64), np.asarray(high, dtype=np.int64)
        span = hi - lo
        if np.any(span <= 0):
            raise ValueError("high must be greater than low")
        wanted = () if size is None else (size,) if isinstance(size, int | np.integer) else tuple(size)
        shape = np.broadcast_shapes(span.shape, wanted)
        n = int(np.prod(shape))
        raw = np.frombuffer(os.urandom(8 * n), dtype=np.uint64).reshape(shape)
        # modulo bias ≤ span / 2^64, far below anything measurable
        out = (raw % span.astype(np.uint64)).astype(np.int64) + lo
        if size is None and not shape:
            return int(out)
        return out.astype(dtype)

    def bytes(self, length: int) -> bytes:
        return os.urandom(length)


OS_RANDOM = OsRandom()


def resolve(rng: np.random.Generator | None) -> np.random.Generator | OsRandom:
    """``rng`` if given (tests, simulations), else the OS source."""
    if rng is None:
        return OS_RANDOM
    if not isinstance(rng, (np.random.Generator, OsRandom)):
        raise ValueError(f"rng must be a numpy.random.Generator (or None for OS randomness), "
                         f"got {type(rng).__name__}")
    return rng


def random_bytes(rng: np.random.Generator | OsRandom, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform uint8 array of ``shape``."""
    if isinstance(rng, np.random.Generator):
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    return np.frombuffer(rng.bytes(int(np.prod(shape))), dtype=np.uint8).reshape(shape)


def permutation(rng: np.random.Generator | OsRandom, n: int) -> np.ndarray:
    """A uniform random permutation of ``range(n)`` (int64), vectorized.

    A seeded ``Generator`` (tests) uses its own ``permutation``. The OS source sorts n
    independent uniform 64-bit keys drawn from ``os.urandom``: every order of distinct keys is
    equally likely, so the permutation is uniform given no tie; a tie has probability
    ≤ n²/2^65 (≈ 3·10⁻¹⁰ for n = 10⁵), and a stable sort then keeps the tied pair's order.
    """
    if isinstance(rng, np.random.Generator):
        return rng.permutation(n).astype(np.int64)
    return np.argsort(_random_words(rng, n), kind="stable").astype(np.int64)


def bernoulli(rng: np.random.Generator | OsRandom, prob: float | np.ndarray,
              shape: tuple[int, ...]) -> np.ndarray:
    """Boolean array of ``shape``, each entry True with probability ``prob`` (a scalar or an
    array broadcast to ``shape``), exactly up to float64.

    One random byte r per entry: with t = 256·prob, T = ⌊t⌋, the entry is r < T, and on a tie
    r = T (probability 1/256) a uniform double decides with probability t − T; so
    P = T/256 + (t − T)/256 = prob. A byte per entry instead of a double: ~3× faster for the
    d-bit rows of unary encoding and RAPPOR.
    """
    r = random_bytes(rng, shape)
    scaled = np.broadcast_to(np.asarray(prob, dtype=np.float64) * 256.0, shape)
    threshold = np.floor(scaled)
    out = r < threshold
    tie = np.flatnonzero(r == threshold)
    if tie.size:
        frac = (scaled - threshold).reshape(-1)[tie]
        out.reshape(-1)[tie] = rng.random(tie.size) < frac
    return out


def _random_words(rng: np.random.Generator | OsRandom, size: int) -> np.ndarray:
    """``size`` uniform uint64 words."""
    if isinstance(rng, np.random.Generator):
        return rng.bit_generator.random_raw(size)
    return np.frombuffer(rng.bytes(8 * size), dtype=np.uint64)


def _bernoulli_words(rng: np.random.Generator | OsRandom, prob: float, words: int) -> np.ndarray:
    """``words`` uint64 words whose 64·words bits are i.i.d. Bernoulli(prob), bit-sliced.

    Each lane compares an 8-bit uniform U (one bit from each of 8 random words, MSB first)
    with T = ⌊256·prob⌋ using word-wide boolean ops: bit = [U < T], and lanes with U = T
    (probability 1/256) are resolved recursively with probability 256·prob − T, so
    P(bit) = T/256 + (256·prob − T)/256 = prob exactly (to float64).
    """
    scaled = prob * 256.0
    threshold = int(scaled)
    if threshold >= 256:
        return np.full(words, np.uint64(0xFFFFFFFFFFFFFFFF))
    lt = np.zeros(words, dtype=np.uint64)
    eq = np.full(words, np.uint64(0xFFFFFFFFFFFFFFFF))
    r = _random_words(rng, 8 * words).reshape(8, words)
    for i in range(8):
        if (threshold >> (7 - i)) & 1:
            lt |= eq & ~r[i]
            eq &= r[i]
        else:
            eq &= ~r[i]
    frac = scaled - threshold
    if frac > 0:
        tied = np.flatnonzero(eq)
        if tied.size:
            lt[tied] |= eq[tied] & _bernoulli_words(rng, frac, tied.size)
    return lt


def bernoulli_packed(rng: np.random.Generator | OsRandom, prob: float, rows: int,
                     width: int) -> np.ndarray:
    """A (rows, ceil(width/8)) uint8 matrix of i.i.d. Bernoulli(prob) bits in ``np.packbits``
    row layout, padding bits zero: ~8× fewer numpy element operations than ``bernoulli``."""
    row_bytes = (width + 7) // 8
    total = rows * row_bytes
    words = _bernoulli_words(rng, prob, (total + 7) // 8)
    out = words.view(np.uint8)[:total].reshape(rows, row_bytes).copy()
    if width % 8:
        out[:, -1] &= np.uint8((0xFF << (8 - width % 8)) & 0xFF)
    return out


def set_packed_bits(packed: np.ndarray, columns: np.ndarray, bits: np.ndarray) -> None:
    """In ``packed`` (np.packbits rows), set row i's bit ``columns[i]`` to ``bits[i]``."""
    rows = np.arange(packed.shape[0])
    byte = columns // 8
    mask = (0x80 >> (columns % 8)).astype(np.uint8)
    cur = packed[rows, byte]
    packed[rows, byte] = np.where(bits, cur | mask, cur & ~mask)
