"""A campaign's public config → its mechanism: the one builder for the server
(``Campaign.mechanism``) and the SDK (``TelemetryClient.mechanism``).

The config is the dict ``GET /v1/campaigns`` returns (``Campaign.public()``):

- ``kind = "frequency"``: ``oracle`` and ``epsilon, domain_size``, or for ``oracle = "rappor"``
  the ``RAPPOR_KEYS``; ``oracle = "histogram"`` (``privacy_mode = "shuffled-fakes"`` without
  local randomization) takes ``domain_size`` only;
- ``kind = "heavy_hitters"``: ``epsilon, max_length[, levels, width, pool_size, pool_seed]``;
- ``kind = "range"``: ``epsilon, domain_size[, method ("haar" | "hierarchical"), branching]``;
- any kind but RAPPOR and numeric: ``memoize = true`` with ``epsilon_inf`` builds the memoized
  variant (``mechanisms.longitudinal``, ``mechanisms.longitudinal_kinds``; ``epsilon`` is then ε₁).
- ``kind = "numeric"``: ``epsilon, lower, upper, mechanism`` (``NUMERIC_MECHANISMS``) and, for
  ``1bitmean``, ``memoize, buckets`` (1BitMean's own memoization, without ``epsilon_inf``).
- range and numeric campaigns in a shuffled privacy mode: an index mechanism over the domain or a
  grid (``mechanisms.shuffled_kinds``).
- the device-level kinds (issue 28; ``DEVICE_LEVEL_KINDS``: one report per device and window,
  aggregated on the device) build the mechanism of the kind whose estimates they publish
  (``ESTIMATE_KINDS``): ``unique_devices`` is GRR over two values (``UNIQUE_LABELS``: did the
  event happen at least once in the window), ``per_device_histogram`` a frequency oracle over the
  device's most common value, ``per_device_count`` a numeric mechanism over the device's count of
  events clipped to [0, ``upper``].

``secret`` is the device's secret for the campaign; RAPPOR (cohort, memoized permanent
response), heavy hitters (the device's level and seed-pool index), memoized 1BitMean (its α and
memoized bits) and every memoized campaign use one (``uses_device_secret``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ldptel.mechanisms import NUMERIC_MECHANISMS, create_mechanism
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.heavy_hitters import HeavyHitters
from ldptel.mechanisms.histogram import Histogram
from ldptel.mechanisms.longitudinal_kinds import LHeavyHitters, LRangeHaar, LRangeHierarchical
from ldptel.mechanisms.numeric import NumericMechanism, default_numeric_mechanism
from ldptel.mechanisms.onebitmean import DEFAULT_BUCKETS, OneBitMean
from ldptel.mechanisms.range_haar import RangeHaar
from ldptel.mechanisms.range_hierarchical import RangeHierarchical
from ldptel.mechanisms.rappor import RAPPOR_KEYS
from ldptel.mechanisms.shuffled_kinds import index_mechanism, is_index_campaign

DEVICE_LEVEL_KINDS = ("unique_devices", "per_device_histogram", "per_device_count")
CAMPAIGN_KINDS = ("frequency", "heavy_hitters", "range", "numeric", *DEVICE_LEVEL_KINDS)
# the kind of a campaign's published estimates (its documents, export endpoints and pages)
ESTIMATE_KINDS = {"unique_devices": "frequency", "per_device_histogram": "frequency",
                  "per_device_count": "numeric"}
UNIQUE_LABELS = ["none", "at_least_once"]  # a unique_devices report: 1 = the event happened


def estimate_kind(kind: str) -> str:
    """The kind whose estimates a campaign of ``kind`` publishes (``ESTIMATE_KINDS``)."""
    return ESTIMATE_KINDS.get(kind, kind)
RANGE_METHODS = ("haar", "hierarchical")


def uses_device_secret(cfg: Mapping[str, Any]) -> bool:
    """True for RAPPOR, heavy-hitter and memoized 1BitMean campaigns: their reports are tied to a
    device secret that must outlive restarts."""
    kind = cfg.get("kind", "frequency")
    if kind == "numeric":
        return cfg.get("mechanism") == "1bitmean" and cfg.get("memoize", True) is True
    return (kind == "heavy_hitters" or bool(cfg.get("memoize"))
            or (kind == "frequency" and cfg.get("oracle") == "rappor"))


def memo_args(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``{"epsilon_inf": ε∞}`` for a memoized campaign (``memoize = true``), else ``{}`` (numeric
    campaigns: 1BitMean memoizes on its own, ``numeric_mechanism``)."""
    if cfg.get("kind") == "numeric" or not cfg.get("memoize"):
        return {}
    return {"epsilon_inf": cfg["epsilon_inf"]}


def build_mechanism(cfg: Mapping[str, Any], secret: bytes | None = None) -> Mechanism:
    """The mechanism of a public campaign config (see the module docstring); a bad kind, oracle
    or parameter raises ``ValueError`` naming it, a missing key ``KeyError``."""
    kind = cfg.get("kind", "frequency")
    if is_index_campaign(cfg):  # range / numeric in a shuffled privacy mode: an index histogram
        return index_mechanism(cfg)
    if kind == "unique_devices":  # randomized response on one bit, whatever the config says
        return create_mechanism("grr", epsilon=cfg["epsilon"], domain_size=2)
    if kind in DEVICE_LEVEL_KINDS and (cfg.get("memoize") or cfg.get("mechanism") == "1bitmean"):
        raise ValueError(f"{kind} campaigns send one fresh report per window (no memoize, no 1bitmean)")
    kind = estimate_kind(kind)
    memo = memo_args(cfg)
    if kind == "heavy_hitters":
        return (LHeavyHitters if memo else HeavyHitters)(
            cfg["epsilon"], cfg["max_length"], levels=cfg.get("levels"), width=cfg.get("width", 64),
            secret=secret, pool_size=cfg.get("pool_size"), pool_seed=cfg.get("pool_seed", 0), **memo)
    if kind == "range":
        return range_mechanism(cfg, secret)
    if kind == "numeric":
        return numeric_mechanism(cfg, secret)
    if kind != "frequency":
        raise ValueError(f"kind must be one of {', '.join(CAMPAIGN_KINDS)}, got {kind!r}")
    oracle: Any = cfg.get("oracle")  # create_mechanism names a bad one
    if oracle == "histogram":  # shuffled-fakes without local randomization: the index as it is
        return Histogram(cfg["domain_size"])
    if oracle == "rappor":
        return create_mechanism("rappor", **{k: cfg[k] for k in RAPPOR_KEYS}, secret=secret)
    if memo:
        return create_mechanism(oracle, epsilon=cfg["epsilon"], domain_size=cfg["domain_size"],
                                memoize=True, secret=secret, **memo)
    return create_mechanism(oracle, epsilon=cfg["epsilon"], domain_size=cfg["domain_size"])


def value_index(cfg: Mapping[str, Any], value: Any) -> Any:
    """A categorical label → its index in ``cfg["domain"]``; integers (and RAPPOR / heavy-hitter
    strings) pass through; a label outside the domain raises ``ValueError`` naming the campaign."""
    labels = cfg.get("domain")
    if labels is not None and isinstance(value, str):
        try:
            return labels.index(value)
        except ValueError:
            raise ValueError(f"value {value!r} is not in the domain of {cfg['name']!r}") from None
    return value


def range_mechanism(cfg: Mapping[str, Any],
                    secret: bytes | None = None) -> RangeHaar | RangeHierarchical:
    """``method = "haar"`` (default) or ``"hierarchical"`` (optionally with ``branching``);
    memoized with ``memoize = true`` (``secret``: the device's)."""
    method = cfg.get("method", "haar")
    memo = memo_args(cfg)
    if memo:
        memo["secret"] = secret
    if method == "haar":
        if cfg.get("branching") is not None:
            raise ValueError("branching applies only to method = 'hierarchical'")
        return (LRangeHaar if memo else RangeHaar)(cfg["epsilon"], cfg["domain_size"], **memo)
    if method == "hierarchical":
        return (LRangeHierarchical if memo else RangeHierarchical)(
            cfg["epsilon"], cfg["domain_size"], cfg.get("branching"), **memo)
    raise ValueError(f"method must be 'haar' or 'hierarchical', got {method!r}")


def numeric_mechanism(cfg: Mapping[str, Any], secret: bytes | None = None) -> NumericMechanism:
    """``mechanism`` (default: ``default_numeric_mechanism(epsilon)``) over [``lower``, ``upper``];
    ``1bitmean`` also takes ``memoize`` (default true) and ``buckets``."""
    name = cfg.get("mechanism") or default_numeric_mechanism(cfg["epsilon"])
    if name not in NUMERIC_MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(NUMERIC_MECHANISMS)}, got {name!r}")
    if name == "1bitmean":
        return OneBitMean(cfg["epsilon"], cfg["lower"], cfg["upper"], memoize=cfg.get("memoize", True),
                          buckets=cfg.get("buckets", DEFAULT_BUCKETS), secret=secret)
    for key in ("memoize", "buckets"):
        if cfg.get(key) is not None:
            raise ValueError(f"{key} applies only to mechanism = '1bitmean'")
    return NUMERIC_MECHANISMS[name](cfg["epsilon"], cfg["lower"], cfg["upper"])


__all__ = ["CAMPAIGN_KINDS", "DEVICE_LEVEL_KINDS", "ESTIMATE_KINDS", "RANGE_METHODS", "RAPPOR_KEYS",
           "UNIQUE_LABELS", "build_mechanism", "estimate_kind", "memo_args", "numeric_mechanism",
           "range_mechanism", "uses_device_secret", "value_index"]


def privacy_loss(mech: Mechanism) -> tuple[str, float]:
    """(name, value) of the largest ε a device can spend on one campaign: for RAPPOR and every
    memoized mechanism the larger of its per-report ε₁ and its lifetime ε∞ per value (RAPPOR's
    2h·ln((1 − f/2)/(f/2))): the memoized permanent response bounds what any number of reports
    of one value reveal; for every other mechanism the per-report ε."""
    lifetime = getattr(mech, "epsilon_inf", None)
    if lifetime is not None and lifetime > mech.epsilon:
        return "lifetime ε∞", float(lifetime)
    return "per-report ε", float(mech.epsilon)
