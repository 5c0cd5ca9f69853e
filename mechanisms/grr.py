"""Direct encoding / generalized randomized response (GRR).

Report the true value w.p. p = e^ε/(e^ε + d − 1), else one of the d − 1 others uniformly
(each w.p. q = 1/(e^ε + d − 1)). Var* = (e^ε + d − 2)/(e^ε − 1)².
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldptel.mechanisms.base import PureMechanism
from ldptel.mechanisms.checks import check_lengths, out_of_range, reject_first
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.proto import GrrPayload, ReportBatch


def perturb_one(value: int, size: int, p_keep: float, draws: Draws = SYSTEM_DRAWS) -> int:
    """Scalar ``perturb_categorical`` with OS randomness (``draws``): a uniform u, the value kept
    iff u < ``p_keep``, else ``below(size − 1)`` picks among the others."""
    if draws.uniform() < p_keep:
        return value
    other = draws.below(size - 1)
    return other + (other >= value)


def perturb_categorical(values: np.ndarray, size: int, p_keep: float, rng) -> np.ndarray:
    """Keep each value in [0, size) w.p. ``p_keep``, else replace it by a uniform other value."""
    keep = rng.random(values.size) < p_keep
    other = rng.integers(0, size - 1, values.size)
    other = other + (other >= values)  # uniform over [0, size) without the true value
    return np.where(keep, values, other).astype(np.uint32)


class IndexColumns:
    """The wire columns of a report that is one index in [0, d) (``GrrPayload.values``): GRR's and
    the plain histogram's (``histogram.Histogram``)."""

    domain_size: int

    def payload_message(self, columns: dict[str, Any]) -> GrrPayload:
        return GrrPayload(values=np.asarray(columns["values"]).tolist())

    def columns(self, batch: ReportBatch) -> dict[str, Any]:
        return {"values": np.asarray(batch.grr.values, dtype=np.int64)}

    def validate_columns(self, columns: dict[str, Any], count: int) -> None:
        """``count`` values, each in [0, d)."""
        check_lengths(columns, count, ["values"])
        reject_first(self.report_checks(columns))

    def report_checks(self, columns: dict[str, Any]) -> list[Any]:
        return [out_of_range(columns["values"], self.domain_size, "value")]


class GRR(IndexColumns, PureMechanism):
    name = "grr"
    payload = "grr"

    @property
    def p(self) -> float:
        e = math.exp(self.epsilon)
        return e / (e + self.domain_size - 1)

    @property
    def q(self) -> float:
        return 1.0 / (math.exp(self.epsilon) + self.domain_size - 1)

    def randomize(self, values: np.ndarray, rng) -> dict[str, Any]:
        return {"values": perturb_categorical(values, self.domain_size, self.p, rng)}

    def randomize_one(self, value: int, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        return {"values": [perturb_one(value, self.domain_size, self.p, draws)]}

