"""Numeric decoder (every ``NumericMechanism``): the sufficient statistics Σy and Σy² of the
reports' unbiased values y (t units, ``mech.unbiased_unit``) merge by addition; the estimate is
``mech.mean_estimate``: the mean ȳ mapped back to the value's units, its variance s²/N."""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.mechanisms.estimates import MeanEstimate
from ldptel.mechanisms.numeric import NumericMechanism


class NumericAccumulator(Accumulator):
    mechanism_name = "numeric"
    mech: NumericMechanism

    def empty(self) -> dict[str, np.ndarray]:
        return {"sum": np.zeros(1), "sum_sq": np.zeros(1)}

    def add_columns(self, columns: dict[str, Any], count: int) -> None:
        y = self.mech.unbiased_unit(columns)
        self.state["sum"][0] += y.sum()
        self.state["sum_sq"][0] += np.square(y).sum()  # not np.dot: BLAS threads cost ms per call

    def estimate(self) -> MeanEstimate:
        n = self.n
        mean, variance = self.mech.mean_estimate(n, float(self.state["sum"][0]),
                                                 float(self.state["sum_sq"][0]))
        return MeanEstimate(n=n, mean=mean, std_error=float(np.sqrt(variance)))
