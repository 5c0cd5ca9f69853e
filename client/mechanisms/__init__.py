"""The frequency oracles, one module each, and ``create_mechanism``."""

from __future__ import annotations

from typing import Any

from ldptel.client.mechanisms.base import Mechanism, PureMechanism
from ldptel.client.mechanisms.chooser import local_oracle, recommend_oracle
from ldptel.client.mechanisms.grr import GRR
from ldptel.client.mechanisms.hadamard import Hadamard
from ldptel.client.mechanisms.numeric import Duchi, Hybrid, NumericMechanism, Piecewise
from ldptel.client.mechanisms.olh import OLH
from ldptel.client.mechanisms.onebitmean import OneBitMean
from ldptel.client.mechanisms.rappor import RAPPOR, RAPPOR_KEYS
from ldptel.client.mechanisms.unary import OUE, SUE

MECHANISMS: dict[str, type[Mechanism]] = {
    m.name: m for m in (GRR, SUE, OUE, OLH, Hadamard, RAPPOR)
}
RAPPOR_PARAMS = (*RAPPOR_KEYS, "secret")
NUMERIC_MECHANISMS: dict[str, type[NumericMechanism]] = {
    m.name: m for m in (Piecewise, Duchi, Hybrid, OneBitMean)
}


def create_mechanism(oracle: str, **params: Any) -> Mechanism:
    """Build a mechanism by name: ``grr | sue | oue | olh | hadamard`` take ``epsilon`` and
    ``domain_size``; ``rappor`` takes ``bloom_bits, hashes, cohorts, f, p, q`` and
    ``candidates`` (and optionally a device ``secret``). Bad arguments raise ``ValueError``
    naming the argument."""
    if not isinstance(oracle, str) or oracle not in MECHANISMS:
        raise ValueError(f"oracle must be one of {sorted(MECHANISMS)}, got {oracle!r}")
    allowed = RAPPOR_PARAMS if oracle == "rappor" else ("epsilon", "domain_size")
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"unknown argument {unknown[0]!r} for {oracle} (takes {', '.join(allowed)})")
    required = allowed[:6] if oracle == "rappor" else allowed
    missing = [k for k in required if k not in params]
    if missing:
        raise ValueError(f"missing argument {missing[0]!r} for {oracle}")
    return MECHANISMS[oracle](**params)


__all__ = [
    "GRR", "OLH", "OUE", "RAPPOR", "SUE", "Duchi", "Hadamard", "Hybrid", "MECHANISMS", "Mechanism",
    "NUMERIC_MECHANISMS", "NumericMechanism", "OneBitMean", "Piecewise", "PureMechanism",
    "create_mechanism", "local_oracle", "recommend_oracle",
]
