"""Range and numeric campaigns in a shuffled privacy mode: their mechanism is an index mechanism
over a histogram, not the local range or numeric mechanisms (docs/privacy.md).

- ``kind = "range"``: the device's value in [0, ``domain_size``) is the index;
- ``kind = "numeric"``: the value is rounded at random to one of ``domain_size`` grid points of
  [``lower``, ``upper``] (``ldptel.mechanisms.grid``: unbiased, rounding variance ≤ h²/4), whose
  number is the index;

and the index goes out as it is (``oracle = "histogram"``, ``shuffled-fakes``), through GRR
(``local_epsilon`` of ``shuffled-fakes``, or ε₀ of ``shuffled``), or as OUE or SUE (``shuffled``),
the same rows, decoders and fake messages as a frequency campaign over the index domain. Range,
quantile and CDF queries, the mean and the sum are computed from its debiased histogram with the
variances of ``ldptel.mechanisms.index_stats``. The public config marks such a campaign with
``method = "histogram"`` (range) or ``mechanism = "grid"`` (numeric), which an SDK without this
module refuses (an unknown method or mechanism) rather than send local range or numeric reports.

A heavy-hitter campaign in ``shuffled`` keeps its own mechanism (today's local report at ε₀):
nothing here but its name as the planner's oracle, ``HEAVY_HITTERS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.grid import grid_mechanism
from ldptel.mechanisms.grr import GRR
from ldptel.mechanisms.histogram import Histogram
from ldptel.mechanisms.unary import OUE, SUE

INDEX_KINDS = ("range", "numeric")
INDEX_ORACLES = ("grr", "oue", "sue")  # shuffled (planned ε₀); shuffled-fakes: histogram or grr
RANGE_METHOD = "histogram"  # a range campaign's ``method`` in a shuffled mode
GRID_MECHANISM = "grid"  # a numeric campaign's ``mechanism`` in a shuffled mode
# a heavy-hitter campaign in ``shuffled`` (issue 39): its kind, and the planner's oracle for its
# reports (the pool-OLH of ``ldptel.mechanisms.heavy_hitters`` at ε₀, levels inside the report)
HEAVY_HITTERS = "heavy_hitters"


def is_index_campaign(cfg: Mapping[str, Any]) -> bool:
    """True for a range or numeric campaign config in a shuffled privacy mode."""
    return cfg.get("privacy_mode", "local") != "local" and cfg.get("kind", "frequency") in INDEX_KINDS


def index_mechanism(cfg: Mapping[str, Any]) -> Mechanism:
    """The mechanism of such a config (module docstring); ``ValueError`` naming a bad oracle."""
    oracle, eps, d = cfg.get("oracle"), cfg.get("epsilon"), cfg["domain_size"]
    if cfg.get("kind") == "numeric":
        if cfg.get("mechanism") != GRID_MECHANISM:
            raise ValueError(f"mechanism of a shuffled numeric campaign must be {GRID_MECHANISM!r}")
        return grid_mechanism(str(oracle), eps, d, cfg["lower"], cfg["upper"])
    if cfg.get("method") != RANGE_METHOD:
        raise ValueError(f"method of a shuffled range campaign must be {RANGE_METHOD!r}")
    if oracle == "histogram":
        return Histogram(d)
    classes: dict[str, type[Mechanism]] = {"grr": GRR, "oue": OUE, "sue": SUE}
    if oracle not in classes:
        raise ValueError(f"oracle of a shuffled range campaign must be histogram or one of "
                         f"{', '.join(INDEX_ORACLES)}, got {oracle!r}")
    if eps is None:
        raise ValueError(f"oracle {oracle!r} needs an epsilon")
    return classes[str(oracle)](eps, d)


__all__ = ["GRID_MECHANISM", "HEAVY_HITTERS", "INDEX_KINDS", "INDEX_ORACLES", "RANGE_METHOD",
           "index_mechanism", "is_index_campaign"]
