"""The estimates of a frequency campaign (counts per item) and of a numeric one (a mean)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ldptel.mechanisms.base import Z95
from ldptel.mechanisms.postprocess import norm_sub


@dataclass
class FrequencyEstimate:
    """Counts (number of devices) per item: raw unbiased estimates with std errors and 95%
    normal CIs, plus the Norm-Sub consistent counts (non-negative, summing to n)."""

    n: int
    counts: np.ndarray
    std_error: np.ndarray
    labels: list[Any] | None = None
    normalized: np.ndarray = None  # type: ignore[assignment]  # None: computed in __post_init__

    def __post_init__(self) -> None:
        self.counts = np.asarray(self.counts, dtype=np.float64)
        self.std_error = np.asarray(self.std_error, dtype=np.float64)
        if self.normalized is None:
            self.normalized = norm_sub(self.counts, self.n)

    @property
    def ci_low(self) -> np.ndarray:
        return self.counts - Z95 * self.std_error

    @property
    def ci_high(self) -> np.ndarray:
        return self.counts + Z95 * self.std_error

    def items(self) -> list[dict[str, Any]]:
        """Rows as in the export API: value, estimate, std_error, ci_low, ci_high,
        estimate_normalized."""
        labels = self.labels if self.labels is not None else range(self.counts.size)
        lo, hi = self.ci_low, self.ci_high
        return [
            {
                "value": label,
                "estimate": float(self.counts[i]),
                "std_error": float(self.std_error[i]),
                "ci_low": float(lo[i]),
                "ci_high": float(hi[i]),
                "estimate_normalized": float(self.normalized[i]),
            }
            for i, label in enumerate(labels)
        ]


@dataclass
class MeanEstimate:
    """The mean over N reports with its std error and 95% normal CI, and the sum over devices:
    sum = mean·N with std error N·std_error (N is known exactly)."""

    n: int
    mean: float
    std_error: float

    def row(self, scale: float = 1.0) -> dict[str, float]:
        """estimate, std_error, ci_low, ci_high of ``scale``·mean."""
        est, se = scale * self.mean, scale * self.std_error
        return {"estimate": est, "std_error": se, "ci_low": est - Z95 * se, "ci_high": est + Z95 * se}

    def document(self) -> dict[str, dict[str, float]]:
        """``{"mean": row, "sum": row}`` as published."""
        return {"mean": self.row(), "sum": self.row(float(self.n))}
