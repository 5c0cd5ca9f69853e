"""The decoder of ``privacy_mode = "shuffled-fakes"``: a histogram of every decrypted message —
the n devices' indices (as they are, or through GRR at ``local_epsilon``) and F fake indices,
uniform over the d buckets.

State: ``support`` (messages per bucket), ``n`` (devices: the releases' real reports) and
``messages`` (M, every message decoded), so F = M − n is known exactly. Given F the fakes of a
bucket are Binomial(F, 1/d), so

    Ĉ_v = (C_v − F/d − n·q)/(p − q)          (histogram: p = 1, q = 0)

is unbiased, with Var[Ĉ_v] = (c_v·p(1−p) + (n − c_v)·q(1−q) + F/d·(1 − 1/d))/(p − q)², evaluated at
Ĉ_v (linear in c_v, as the pure protocols'): for the histogram √(F/d·(1 − 1/d)) ≈ √μ per count,
whatever n (μ = λ·n/d fakes per bucket).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.mechanisms.base import PureMechanism
from ldptel.mechanisms.estimates import FrequencyEstimate


class FakesAccumulator(Accumulator):
    mechanism_name = "fakes"
    mech: PureMechanism

    def empty(self) -> dict[str, np.ndarray]:
        return {"support": np.zeros(self.mech.domain_size, dtype=np.int64),
                "messages": np.zeros(1, dtype=np.int64)}

    def add_columns(self, columns: dict[str, Any], count: int) -> None:
        """``count`` messages (devices are added by ``add_release``)."""
        self.state["support"] += np.bincount(columns["values"], minlength=self.mech.domain_size)
        self.state["messages"][0] += count

    def add_release(self, columns: dict[str, Any], messages: int, devices: int) -> None:
        """One release: its decoded messages and its real reports."""
        self.add_columns(columns, messages)
        self.state["n"][0] += devices

    def fingerprint(self) -> str:
        return "fakes:" + super().fingerprint()

    def estimate(self) -> FrequencyEstimate:
        n, d = self.n, self.mech.domain_size
        fakes = max(int(self.state["messages"][0]) - n, 0)
        p, q = self.mech.p, self.mech.q
        per_bucket = fakes / d
        counts = (self.state["support"] - per_bucket - n * q) / (p - q)
        var = (counts * p * (1 - p) + (n - counts) * q * (1 - q) + per_bucket * (1 - 1 / d)) / (p - q) ** 2
        return FrequencyEstimate(n=n, counts=counts, std_error=np.sqrt(np.maximum(var, 0.0)))


__all__ = ["FakesAccumulator"]
