"""A campaign's privacy claim: what one device reveals to whoever sees its reports.

The same figures go to three places: the ``privacy`` object of ``GET /v1/campaigns`` and of every
export document (``privacy_claim``), the campaign page's words, and the device's own ledger
(``ldptel.client.ledger``, which charges ``report_cost`` per report). They are computed from the
campaign's public config and the mechanism built from it, never taken from the server's say-so.

- ``epsilon_report``: ε₁ of one report (``mech.epsilon``); None when the report is not
  randomized on the device (``privacy_mode = "shuffled-fakes"`` without ``local_epsilon``: its
  guarantee is central only).
- ``epsilon_inf``: for a memoized campaign (RAPPOR's permanent randomized response, or
  ``memoize = true``), the most all reports of one value reveal together, however many there
  are; ``None`` when every report is fresh randomness.
- ``epsilon_lifetime``: the bound over a device's whole life when its value may change
  (``mech.epsilon_lifetime``: d·ε∞, or g·ε∞ for LOLOHA); ``None`` when there is none: fresh
  reports compose, R reports reveal R·ε₁ (at most ``reports_per_window``·ε₁ per window), and a
  RAPPOR device that reports k distinct strings reveals k·ε∞.
- ``memoize``, ``reports_per_window``: as configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ldptel.mechanisms.base import Mechanism


def memoized(cfg: Mapping[str, Any]) -> bool:
    """True when a device's reports of one value share a permanent randomized response: RAPPOR
    always, any other oracle or kind with ``memoize = true``."""
    return bool(cfg.get("memoize", False)) or cfg.get("oracle") == "rappor"


@dataclass(frozen=True)
class Cost:
    """What one report costs a device. Fresh (not memoized): ``epsilon`` every time. Memoized:
    ``epsilon`` (= ε∞) once per distinct value, the values charged together never exceeding
    ``lifetime`` (None: no such bound)."""

    epsilon: float
    memoized: bool
    lifetime: float | None = None


def report_cost(cfg: Mapping[str, Any], mech: Mechanism) -> Cost:
    """The ``Cost`` of one report of the campaign ``cfg`` built as ``mech``."""
    claim = privacy_claim(cfg, mech)
    if claim["memoize"] and claim["epsilon_inf"] is not None:
        return Cost(claim["epsilon_inf"], True, claim["epsilon_lifetime"])
    # an unrandomized index (shuffled-fakes) has no local ε to charge: the ledger counts the report
    return Cost(claim["epsilon_report"] or 0.0, False)


def privacy_claim(cfg: Mapping[str, Any], mech: Mechanism) -> dict[str, Any]:
    """The ``privacy`` object (see the module docstring) of the public config ``cfg``, whose
    mechanism is ``mech`` (``builder.build_mechanism(cfg)``)."""
    memo = memoized(cfg)
    eps_inf = getattr(mech, "epsilon_inf", None) if memo else None
    lifetime = getattr(mech, "epsilon_lifetime", None) if memo else None
    eps = float(mech.epsilon)
    return {
        "epsilon_report": eps if eps != float("inf") else None,
        "epsilon_inf": None if eps_inf is None else float(eps_inf),
        "epsilon_lifetime": None if lifetime is None else float(lifetime),
        "memoize": memo,
        "reports_per_window": int(cfg.get("reports_per_window", 1)),
    }


__all__ = ["Cost", "memoized", "privacy_claim", "report_cost"]
