"""Composition of a device's releases: a privacy-loss-distribution (PLD) accountant.

What is composed. Each release is described by a ``PrivacyCurve``: a certified upper bound δ(ε),
ε ≥ 0, on the hockey-stick divergence of a *symmetric dominating pair* of that release (a pair of
distributions of which the release, for every pair of neighbouring datasets, is post-processing):
the ``ShuffleBound`` pairs for shuffled ε₀-LDP reports (``ldptel.privacy.amplification``),
the exact two-bucket Poisson pair for fake messages (``ldptel.privacy.fake_messages``). Not the
(ε, δ) point alone: composing T points adds T·δ at least, where the curve composes to far less.

Why it is sound. A curve that bounds a pair's hockey-stick divergence at every ε (and, the pair
being symmetric, the reverse one too) makes that pair post-processing of any pair with the bound
as its curve (Blackwell; Zhu, Dong, Wang, AISTATS 2022), and post-processing commutes with
composition, so composing the bounds bounds the composition. ``curve_pld`` evaluates δ at a grid
ε_1 < … < ε_k of losses in [−E, E] (δ(−ε) = 1 − e^{−ε} + e^{−ε}·δ(ε) for a symmetric pair), replaces
the values by their lower convex hull in x = e^ε (still ≥ the true curve, which is convex in x,
and now exactly convex) and builds the pessimistic "connect-the-dots" PLD on those points
(Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, PETS 2022; ``dp_accounting``'s
``create_pmf_pessimistic_connect_dots``): its curve is the chord interpolation, above the true
curve everywhere; mass beyond E goes to +∞ (δ(E) ≤ 10⁻¹⁶, or the pair's own mass at +∞ where δ(ε)
levels off, e.g. e^{−μ} of fake messages: ``_support_end``). ``cumulative_epsilon`` composes the
releases' PLDs with ``dp_accounting`` (``PrivacyLossDistribution.compose``, FFT-based,
pessimistic) and reads off ε at the total δ.

Composition of adaptive releases over windows is covered (each window's randomness is fresh);
memoized reports are not (``ldptel.privacy.central``'s "Scope").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

DISCRETIZATION = 1e-3  # the PLD lattice: every support point is a multiple of it
POINTS = 120  # curve evaluations on [0, E] (the negative side follows by symmetry)
DELTA_FLOOR = 1e-16  # E is where the curve falls below this (or the pair's largest loss)
PLATEAU = 1e-3  # … or where doubling ε lowers δ by less than this fraction (mass at +∞)
MAX_SUPPORT = 64.0  # … and at most this (δ(E) goes to +∞)
# The most releases of one curve composed: self-composition grows the PLD's support with the count
# (measured on the fake-message and GRR curves: 10⁴ ~20 MB and ~0.2 s beyond the curve, 10⁵
# ~60 MB, 10⁶ ~0.5 GB and 6 s); a year of hourly windows is 8,760
MAX_RELEASES = 10_000


@dataclass(frozen=True)
class PrivacyCurve:
    """A certified upper bound ``delta(ε)`` (ε ≥ 0) of a symmetric dominating pair whose privacy
    loss never exceeds ``max_loss`` (math.inf when unbounded); ``name`` says which analysis."""

    delta: Callable[[float], float]
    max_loss: float
    name: str


def _support_end(curve: PrivacyCurve) -> float:
    """E: the pair's largest loss, or the first ε (doubling from 0.01) with δ(ε) ≤ DELTA_FLOOR, or
    where δ stops falling (from ε = 1 on, a doubling lowers it by less than ``PLATEAU``: the pair's
    mass at infinite loss, e.g. e^{−μ} of fake messages, where no bucket got a fake), at most
    ``MAX_SUPPORT``. Whatever δ(E) is left goes to the PLD's mass at +∞ (pessimistic, so sound)."""
    end, here = 0.01, curve.delta(0.01)
    while end < curve.max_loss and here > DELTA_FLOOR and end < MAX_SUPPORT:
        nxt = curve.delta(2 * end)
        if end >= 1 and nxt >= here * (1 - PLATEAU):
            break
        end, here = 2 * end, nxt
    return min(end, curve.max_loss)


def _lower_convex_hull(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The lower convex hull of the points (x sorted) evaluated at x."""
    hull: list[int] = []
    for i in range(x.size):
        while len(hull) >= 2:
            i0, i1 = hull[-2], hull[-1]
            if (y[i1] - y[i0]) * (x[i] - x[i0]) >= (y[i] - y[i0]) * (x[i1] - x[i0]):
                hull.pop()  # i1 is on or above the chord from i0 to i
            else:
                break
        hull.append(i)
    return cast("np.ndarray", np.interp(x, x[hull], y[hull]))


def curve_points(curve: PrivacyCurve) -> tuple[np.ndarray, np.ndarray]:
    """The lattice indices of the grid ε_1 < … < ε_k and the convexified δ values (module docstring)."""
    end = _support_end(curve)
    top = max(1, math.ceil(end / DISCRETIZATION))
    positive = np.unique(np.linspace(0, top, POINTS + 1).round().astype(np.int64))
    eps = positive * DISCRETIZATION
    dpos = np.array([min(1.0, max(0.0, curve.delta(float(e)))) for e in eps])
    if eps[-1] >= curve.max_loss:
        dpos[-1] = 0.0
    # symmetric pair: δ(−ε) = 1 − e^{−ε} + e^{−ε}·δ(ε)
    dneg = -np.expm1(-eps[1:]) + np.exp(-eps[1:]) * dpos[1:]
    index = np.concatenate([-positive[1:][::-1], positive])
    delta = np.concatenate([dneg[::-1], dpos])
    x = np.exp(index * DISCRETIZATION)
    convex = np.minimum(_lower_convex_hull(x, delta), delta)
    return index, np.minimum.accumulate(np.clip(convex, 0.0, 1.0))


def curve_pld(curve: PrivacyCurve) -> Any:
    """The pessimistic connect-the-dots ``dp_accounting`` PLD of ``curve`` (module docstring)."""
    from dp_accounting.pld import pld_pmf, privacy_loss_distribution  # imported here: slow start-up

    index, delta = curve_points(curve)
    pmf = pld_pmf.create_pmf_pessimistic_connect_dots(DISCRETIZATION, index, delta)
    return privacy_loss_distribution.PrivacyLossDistribution(pmf)


def cumulative_epsilon(releases: Sequence[tuple[PrivacyCurve, int]], delta: float) -> float:
    """ε at total δ of the composition of ``count`` releases of each curve (a device reporting
    in every window of each campaign it reports to). inf if no ε reaches δ."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    total = None
    for curve, count in releases:
        if count < 1:
            raise ValueError(f"a release count must be ≥ 1, got {count!r}")
        if count > MAX_RELEASES:
            raise ValueError(f"a release count must be ≤ {MAX_RELEASES:,} (MAX_RELEASES), got {count:,}")
        pld = curve_pld(curve)
        pld = pld.self_compose(count) if count > 1 else pld
        total = pld if total is None else total.compose(pld)
    if total is None:
        return 0.0
    return float(total.get_epsilon_for_delta(delta))


__all__ = ["DISCRETIZATION", "MAX_RELEASES", "PrivacyCurve", "cumulative_epsilon", "curve_pld",
           "curve_points"]
