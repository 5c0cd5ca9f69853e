"""The fake messages of ``privacy_mode = "shuffled-fakes"``, drawn on the device: a Poisson(λ)
number per real report (``poisson_counts``), each a uniform index over [0, d) (``fake_indices``),
with OS randomness in production (``ldptel.mechanisms.randomness``; a seeded generator in tests).

``poisson_counts`` is exact inversion: one uniform per report, located in the Poisson(λ) cdf
tabulated up to where its tail is below 10⁻¹⁸ (``np.searchsorted``), so it needs only uniforms —
which the OS source gives — and costs O(n log k); a rate over ``MAX_TABLE_RATE`` is drawn as a sum
of k tabulated Poisson(λ/k) (Poisson additivity: the same distribution). The model and its privacy analysis:
``ldptel.privacy.fake_messages``.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np

from ldptel.mechanisms.randomness import OsRandom

TAIL = 1e-18
MAX_TABLE_RATE = 500.0  # e^{−λ} is a normal float up to λ ≈ 708


def poisson_cdf(lam: float) -> np.ndarray:
    """P(X ≤ k), k = 0, 1, …, up to the first k with P(X > k) < ``TAIL`` (λ ≤ ``MAX_TABLE_RATE``)."""
    if not 0 <= lam <= MAX_TABLE_RATE:
        raise ValueError(f"a Poisson rate in [0, {MAX_TABLE_RATE:g}] is tabulated, got {lam!r}")
    terms = [math.exp(-lam)]
    total = terms[0]
    k = 0
    while 1.0 - total > TAIL and k < 10_000 + 20 * lam:
        k += 1
        terms.append(terms[-1] * lam / k)
        total += terms[-1]
    return np.cumsum(np.array(terms))


def poisson_counts(rng: np.random.Generator | OsRandom, lam: float, n: int) -> np.ndarray:
    """``n`` independent Poisson(``lam``) counts (module docstring)."""
    if lam == 0 or n == 0:
        return np.zeros(n, dtype=np.int64)
    if lam > MAX_TABLE_RATE:  # e^{−λ} underflows: a sum of k Poisson(λ/k), each tabulated
        k = math.ceil(lam / MAX_TABLE_RATE)
        return cast("np.ndarray", poisson_counts(rng, lam / k, n * k).reshape(n, k).sum(axis=1))
    cdf = poisson_cdf(lam)
    u = np.asarray(rng.random(n), dtype=np.float64)
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1).astype(np.int64)


def max_fakes(lam: float, reports: int = 1) -> int:
    """The most fake messages an honest envelope of ``reports`` real reports carries at rate λ:
    ⌈λr + 8√(λr) + 16⌉ (a Poisson(λr) count exceeds it with probability below 10⁻¹²), and 0 at
    λ = 0 (``fake_source = "shuffler"``: a device sends its value only). The one definition: the
    collector refuses an envelope with more (400 ``invalid_batch``, field ``messages``) and the SDKs
    never draw more (a draw above it is cut to it; the JS SDK's ``maxFakes`` is checked equal
    against ``testvectors/``)."""
    m = max(float(lam), 0.0) * reports
    if m == 0:
        return 0
    return int(math.ceil(m + 8 * math.sqrt(m) + 16))


def envelope_message_limit(fake_rate: float, reports: int) -> int:
    """The most messages the collector takes in an envelope of ``reports`` real reports:
    ``reports`` + ``max_fakes(fake_rate, reports)``."""
    return reports + max_fakes(fake_rate, reports)


def fake_indices(rng: np.random.Generator | OsRandom, count: int, domain_size: int) -> np.ndarray:
    """``count`` indices uniform over [0, d)."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(rng.integers(0, domain_size, size=count), dtype=np.int64)


__all__ = ["envelope_message_limit", "fake_indices", "max_fakes", "poisson_cdf", "poisson_counts"]
