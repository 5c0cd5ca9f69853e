"""The frequency oracles, one module each, and ``create_mechanism``."""

from __future__ import annotations

from typing import Any

from ldptel.mechanisms.base import Mechanism, PureMechanism
from ldptel.mechanisms.chooser import local_oracle, recommend_oracle
from ldptel.mechanisms.errors import ImplausibleReport, InvalidReport, LdptelError
from ldptel.mechanisms.estimates import FrequencyEstimate, MeanEstimate
from ldptel.mechanisms.grr import GRR
from ldptel.mechanisms.hadamard import Hadamard
from ldptel.mechanisms.longitudinal import MEMOIZED
from ldptel.mechanisms.numeric import Duchi, Hybrid, NumericMechanism, Piecewise
from ldptel.mechanisms.olh import OLH
from ldptel.mechanisms.onebitmean import OneBitMean
from ldptel.mechanisms.rappor import RAPPOR, RAPPOR_KEYS
from ldptel.mechanisms.unary import OUE, SUE

MECHANISMS: dict[str, type[Mechanism]] = {
    m.name: m for m in (GRR, SUE, OUE, OLH, Hadamard, RAPPOR)
}
RAPPOR_PARAMS = (*RAPPOR_KEYS, "secret")
NUMERIC_MECHANISMS: dict[str, type[NumericMechanism]] = {
    m.name: m for m in (Piecewise, Duchi, Hybrid, OneBitMean)
}


def create_mechanism(oracle: str, **params: Any) -> Mechanism:
    """Build a mechanism by name: ``grr | sue | oue | olh | hadamard`` take ``epsilon`` and
    ``domain_size``, and optionally ``memoize=True`` with ``epsilon_inf`` (the memoized variant,
    ``longitudinal``; then ``epsilon`` is the per-report ε₁) and a device ``secret``; ``rappor``
    takes ``bloom_bits, hashes, cohorts, f, p, q`` and ``candidates`` (and optionally a device
    ``secret``). Bad arguments raise ``ValueError`` naming the argument."""
    if not isinstance(oracle, str) or oracle not in MECHANISMS:
        raise ValueError(f"oracle must be one of {sorted(MECHANISMS)}, got {oracle!r}")
    if oracle != "rappor" and (params.get("memoize") is not None or "epsilon_inf" in params):
        return create_memoized(oracle, **params)
    allowed = RAPPOR_PARAMS if oracle == "rappor" else ("epsilon", "domain_size")
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"unknown argument {unknown[0]!r} for {oracle} (takes {', '.join(allowed)})")
    required = allowed[:6] if oracle == "rappor" else allowed
    missing = [k for k in required if k not in params]
    if missing:
        raise ValueError(f"missing argument {missing[0]!r} for {oracle}")
    return MECHANISMS[oracle](**params)


def create_memoized(oracle: str, memoize: Any = None, **params: Any) -> Mechanism:
    """``create_mechanism`` with ``memoize`` / ``epsilon_inf`` given: ``memoize=False`` is the
    plain oracle (``epsilon_inf`` must then be absent), ``memoize=True`` needs ``epsilon_inf``."""
    if memoize is not None and not isinstance(memoize, bool):
        raise ValueError(f"memoize must be true or false, got {memoize!r}")
    if not memoize:
        if "epsilon_inf" in params:
            raise ValueError("epsilon_inf applies only with memoize=True")
        return create_mechanism(oracle, **params)
    allowed = ("epsilon", "domain_size", "epsilon_inf", "secret")
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"unknown argument {unknown[0]!r} for memoized {oracle} "
                         f"(takes {', '.join(allowed)})")
    missing = [k for k in allowed[:2] if k not in params]  # the mechanism names a missing ε∞
    if missing:
        raise ValueError(f"missing argument {missing[0]!r} for memoized {oracle}")
    return MEMOIZED[oracle](**params)


__all__ = [
    "GRR", "OLH", "OUE", "RAPPOR", "SUE", "Duchi", "FrequencyEstimate", "Hadamard", "Hybrid",
    "ImplausibleReport", "InvalidReport", "LdptelError", "MECHANISMS", "MeanEstimate", "Mechanism",
    "NUMERIC_MECHANISMS", "NumericMechanism", "OneBitMean", "Piecewise", "PureMechanism",
    "create_mechanism", "create_memoized", "local_oracle", "recommend_oracle",
]
