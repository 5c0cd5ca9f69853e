"""The choice of a local frequency oracle for a domain (Wang et al. 2017): GRR when
d < 3e^ε + 2, where its variance (e^ε + d − 2)/(e^ε − 1)² is the lower one, else OLH."""

from __future__ import annotations

import math

from ldptel.mechanisms.grr import GRR
from ldptel.mechanisms.olh import OLH


def recommend_oracle(epsilon: float, domain_size: int) -> str:
    """``"grr"`` when d < 3e^ε + 2, else ``"olh"``."""
    return "grr" if domain_size < 3 * math.exp(epsilon) + 2 else "olh"


def local_oracle(epsilon: float, domain_size: int) -> GRR | OLH:
    """The recommended oracle (``recommend_oracle``) over [0, ``domain_size``)."""
    if recommend_oracle(epsilon, domain_size) == "grr":
        return GRR(epsilon, domain_size)
    return OLH(epsilon, domain_size)
