"""``version=all``: one frequency estimate from the versions of a campaign that share a domain.

Version v contributes n_v reports and unbiased count estimates Ĉ_v(i) (its published document)
with exact std errors s_v(i), from a mechanism whose data-free per-report variance is Var*_v
(``Mechanism.variance_star``: it depends on ε_v and the domain only). Each version estimates the
frequency f(i) = Ĉ_v(i) / n_v; the versions are weighted by the inverse of that estimate's
data-free variance, w_v = n_v / Var*_v, and the result is scaled to all N = Σ n_v reports:

    Ĉ(i) = N · Σ_v w_v Ĉ_v(i)/n_v / Σ_v w_v  =  N · Σ_v Ĉ_v(i)/Var*_v  /  Σ_v n_v/Var*_v
    Var Ĉ(i) = N² · Σ_v s_v(i)² / Var*_v²  /  (Σ_v n_v/Var*_v)²

The weights never depend on the reported values (only on ε_v, the domain and n_v), so when the
versions' reporters share the distribution f, E Ĉ(i) = N·f(i): the combination is unbiased, and
the variance above is exact (the versions' reports are independent; each s_v(i)² is the
version's exact count variance at its estimated counts, as every published std error).
Weights from the plug-in std errors instead would correlate with the estimates and bias them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldptel.mechanisms.estimates import FrequencyEstimate


@dataclass
class VersionPart:
    """What one version contributes: its report count, count estimates, their std errors, and
    its mechanism's ``variance_star``."""

    n: int
    counts: np.ndarray
    std_error: np.ndarray
    variance_star: float


def inverse_variance(parts: Sequence[VersionPart], labels: list[Any] | None = None) -> FrequencyEstimate:
    """The combination of the module docstring (at least one part; every part the same length)."""
    if not parts:
        raise ValueError("nothing to combine")
    total = sum(p.n for p in parts)
    weight = sum(p.n / p.variance_star for p in parts)
    scaled = np.array([np.asarray(p.counts, dtype=np.float64) / p.variance_star for p in parts])
    errors = np.array([np.asarray(p.std_error, dtype=np.float64) / p.variance_star for p in parts])
    counts = total * scaled.sum(axis=0) / weight
    std_error = total * np.sqrt((errors ** 2).sum(axis=0)) / weight
    return FrequencyEstimate(n=total, counts=counts, std_error=std_error, labels=labels)
