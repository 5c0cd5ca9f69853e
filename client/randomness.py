"""Randomness sources. Production: the OS (``os.urandom``). Tests and simulations pass a seeded
``numpy.random.Generator``; nothing on the collector side can select one.

Both expose the subset of the numpy ``Generator`` API the randomizers use:
``random(size)`` (uniform [0, 1) doubles) and ``integers(low, high, size)``.
"""

from __future__ import annotations

import os

import numpy as np


class OsRandom:
    """Uniforms and integers drawn from ``os.urandom`` (no userspace PRNG state)."""

    def random(self, size: int | tuple[int, ...] | None = None) -> np.ndarray | float:
        n = int(np.prod(size)) if size is not None else 1
        raw = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
        out = (raw >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        return float(out[0]) if size is None else out.reshape(size)

    def integers(
        self, low: int, high: int | None = None, size: int | tuple[int, ...] | None = None,
        dtype: type = np.int64,
    ) -> np.ndarray | int:
        if high is None:
            low, high = 0, low
        span = high - low
        if span <= 0:
            raise ValueError("high must be greater than low")
        n = int(np.prod(size)) if size is not None else 1
        raw = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
        # modulo bias ≤ span / 2^64, far below anything measurable
        out = (raw % np.uint64(span)).astype(np.int64) + low
        return int(out[0]) if size is None else out.reshape(size).astype(dtype)


OS_RANDOM = OsRandom()


def resolve(rng: np.random.Generator | None) -> np.random.Generator | OsRandom:
    """``rng`` if given (tests, simulations), else the OS source."""
    return OS_RANDOM if rng is None else rng


def bernoulli(rng: np.random.Generator | OsRandom, prob: float | np.ndarray, size) -> np.ndarray:
    """Boolean array, each True with probability ``prob`` (broadcast to ``size``)."""
    return rng.random(size) < prob
