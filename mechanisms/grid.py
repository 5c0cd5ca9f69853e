"""Numeric campaigns in a shuffled privacy mode: a value rounded at random to a grid of index
points, then sent as an index (``privacy_mode = "shuffled-fakes"``: the index as it is, or through
GRR; ``"shuffled"``: GRR, OUE or SUE at the planned ε₀).

The grid: K points g_i = lower + i·h, i = 0…K − 1, h = (upper − lower)/(K − 1). A value x is
clipped to [lower, upper]; with i = ⌊(x − lower)/h⌋ and t = (x − g_i)/h ∈ [0, 1) the device sends
index i + 1 with probability t, else i (randomized rounding). So

    E[g_r] = (1 − t)·g_i + t·g_{i+1} = x               (no bias: the mean and sum are unbiased)
    Var[g_r] = h²·t(1 − t) ≤ h²/4                     (the rounding's added variance per report)

Privacy: the index the device sends is a randomized function of x whose output law is a mixture,
over the rounded index, of the index mechanism's laws; the hockey-stick divergence is jointly
convex, so every bound that holds for two neighbouring datasets of indices (the fake-message
analysis, the amplification bounds, ε₀-LDP of the index mechanism) holds for two of values.

The classes are the index mechanisms themselves (same ``name``, rows, decoders and wire format)
with ``encode`` / ``encode_batch`` taking real values; ``grid_mechanism`` builds one. The estimate
(mean and sum with their std errors): ``ldptel.mechanisms.index_stats``.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.grr import GRR
from ldptel.mechanisms.histogram import Histogram
from ldptel.mechanisms.numeric import check_bounds
from ldptel.mechanisms.randomness import resolve
from ldptel.mechanisms.unary import OUE, SUE
from ldptel.proto import ReportBatch

MIN_GRID_POINTS = 2
MAX_GRID_POINTS = 4096
DEFAULT_GRID_POINTS = 32


class GridRounding:
    """The rounding of the module docstring, mixed into an index mechanism over [0, K)."""

    domain_size: int
    lower: float
    upper: float

    def set_grid(self, lower: float, upper: float) -> None:
        self.lower, self.upper = check_bounds(lower, upper)
        if not MIN_GRID_POINTS <= self.domain_size <= MAX_GRID_POINTS:
            raise ValueError(f"grid_points must be in [{MIN_GRID_POINTS}, {MAX_GRID_POINTS}], "
                             f"got {self.domain_size}")

    @property
    def step(self) -> float:
        """h, the distance between two grid points."""
        return (self.upper - self.lower) / (self.domain_size - 1)

    def grid(self) -> np.ndarray:
        """The K grid points g_i."""
        return self.lower + self.step * np.arange(self.domain_size, dtype=np.float64)

    def clipped(self, values: np.ndarray) -> int:
        """How many of ``values`` lie outside [lower, upper] (clipped before rounding)."""
        v = np.asarray(values, dtype=np.float64)
        return int(np.count_nonzero((v < self.lower) | (v > self.upper)))

    def check_reals(self, values: Any) -> np.ndarray:
        """Finite real numbers as float64, else ``ValueError`` naming ``value``."""
        arr = np.asarray(values)
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.number) or arr.size == 0):
            raise ValueError(f"value must be a finite number, got {arr.dtype}")
        arr = arr.astype(np.float64).reshape(-1)
        if arr.size and not np.all(np.isfinite(arr)):
            raise ValueError(f"value must be a finite number, got {arr[~np.isfinite(arr)][0]}")
        return arr

    def round_indices(self, values: Any, uniforms: np.ndarray) -> np.ndarray:
        """Each value's grid index, rounded up w.p. t (module docstring), from one uniform each."""
        x = np.clip(self.check_reals(values), self.lower, self.upper)
        pos = (x - self.lower) / self.step
        below = np.minimum(np.floor(pos), self.domain_size - 1)
        up = np.asarray(uniforms) < pos - below  # (never past the last point: pos ≤ K − 1 up to rounding)
        return cast("np.ndarray", np.minimum(below + up, self.domain_size - 1).astype(np.int64))

    def encode(self, value: Any, campaign: str = "", draws: Draws = SYSTEM_DRAWS) -> ReportBatch:
        """One value: rounded with one ``draws.uniform()``, then the index mechanism's encode."""
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not math.isfinite(float(value)):
            raise ValueError(f"value must be a finite number, got {value!r}")
        index = int(self.round_indices([value], np.array([draws.uniform()]))[0])
        return cast("ReportBatch", super().encode(index, campaign, draws))  # type: ignore[misc]

    def encode_batch(self, values: Any, rng: np.random.Generator | None = None, campaign: str = "",
                     batch_id: bytes | None = None) -> ReportBatch:
        """Many values: rounded (one uniform each), then the index mechanism's vectorized encode."""
        x = self.check_reals(values)
        indices = self.round_indices(x, np.asarray(resolve(rng).random(x.size), dtype=np.float64))
        return cast("ReportBatch", super().encode_batch(indices, rng, campaign, batch_id))  # type: ignore[misc]

    def public_params(self) -> dict[str, Any]:
        return {**super().public_params(), "lower": self.lower, "upper": self.upper}  # type: ignore[misc]


class GridHistogram(GridRounding, Histogram):
    def __init__(self, domain_size: int, lower: float, upper: float) -> None:
        Histogram.__init__(self, domain_size)
        self.set_grid(lower, upper)


class GridGRR(GridRounding, GRR):
    def __init__(self, epsilon: float, domain_size: int, lower: float, upper: float) -> None:
        GRR.__init__(self, epsilon, domain_size)
        self.set_grid(lower, upper)


class GridOUE(GridRounding, OUE):
    def __init__(self, epsilon: float, domain_size: int, lower: float, upper: float) -> None:
        OUE.__init__(self, epsilon, domain_size)
        self.set_grid(lower, upper)


class GridSUE(GridRounding, SUE):
    def __init__(self, epsilon: float, domain_size: int, lower: float, upper: float) -> None:
        SUE.__init__(self, epsilon, domain_size)
        self.set_grid(lower, upper)


GRID_ORACLES: dict[str, type[Mechanism]] = {"grr": GridGRR, "oue": GridOUE, "sue": GridSUE}


def grid_mechanism(oracle: str, epsilon: float | None, points: int, lower: float, upper: float) -> Mechanism:
    """The index mechanism ``oracle`` (``histogram``: no local randomization) over ``points`` grid
    points of [lower, upper], with the rounding of the module docstring."""
    if oracle == "histogram":
        return GridHistogram(points, lower, upper)
    if oracle not in GRID_ORACLES:
        raise ValueError(f"oracle for a grid must be histogram, {', '.join(GRID_ORACLES)}; got {oracle!r}")
    if epsilon is None:
        raise ValueError(f"oracle {oracle!r} needs an epsilon")
    return GRID_ORACLES[oracle](epsilon, points, lower, upper)  # type: ignore[call-arg]


__all__ = ["DEFAULT_GRID_POINTS", "GRID_ORACLES", "MAX_GRID_POINTS", "MIN_GRID_POINTS", "GridGRR",
           "GridHistogram", "GridOUE", "GridRounding", "GridSUE", "grid_mechanism"]
