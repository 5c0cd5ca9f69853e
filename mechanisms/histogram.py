"""The ``shuffled-fakes`` mode's index "mechanism": the device's true index in [0, d), not
randomized (``Histogram``), or passed through GRR at ``local_epsilon`` (``ldptel.mechanisms.grr``).

``Histogram`` has no local guarantee (ε = ∞: p = 1, q = 0, Ĉ_v = C_v exactly); its privacy is
central only — encryption to the analyzer, the shuffler and the Poisson fake messages
(``ldptel.privacy.fake_messages``, docs/privacy.md). The SDK sends it only when the app allows
unrandomized reports (``TelemetryClient(accept_unrandomized=True)``). Same wire shape as GRR.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldptel.mechanisms.base import PureMechanism, check_int
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Draws
from ldptel.mechanisms.grr import IndexColumns


class Histogram(IndexColumns, PureMechanism):
    """The identity over [0, d): one index per report (see the module docstring)."""

    name = "histogram"
    payload = "grr"

    def __init__(self, domain_size: int) -> None:  # no ε: nothing is randomized
        self.epsilon = math.inf
        self.domain_size = check_int(domain_size, "domain_size", 2, 1 << 31)

    @property
    def p(self) -> float:
        return 1.0

    @property
    def q(self) -> float:
        return 0.0

    def variance_star(self) -> float:
        return 0.0

    def randomize(self, values: np.ndarray, rng) -> dict[str, Any]:
        return {"values": np.asarray(values, dtype=np.uint32)}

    def randomize_one(self, value: int, draws: Draws = SYSTEM_DRAWS) -> dict[str, Any]:
        return {"values": [int(value)]}  # nothing drawn


    def public_params(self) -> dict[str, Any]:
        return {"oracle": self.name, "domain_size": self.domain_size}


__all__ = ["Histogram"]
