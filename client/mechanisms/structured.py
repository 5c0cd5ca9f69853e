"""Building the heavy-hitter and range mechanisms from a campaign's public config (the dict
``GET /v1/campaigns`` returns, or ``Campaign`` fields): one place for the server's
``Campaign.mechanism()`` and the SDK."""

from __future__ import annotations

from typing import Any

from ldptel.client.mechanisms.base import Mechanism
from ldptel.client.mechanisms.heavy_hitters import HeavyHitters
from ldptel.client.mechanisms.range_haar import RangeHaar
from ldptel.client.mechanisms.range_hierarchical import RangeHierarchical

STRUCTURED_KINDS = ("heavy_hitters", "range")


def structured_mechanism(kind: str, cfg: dict[str, Any], secret: bytes | None = None) -> Mechanism:
    """``kind = "heavy_hitters"``: ``epsilon, max_length[, levels, width]`` (``secret`` fixes the
    device's level); ``kind = "range"``: ``epsilon, domain_size[, method, branching]``."""
    if kind == "heavy_hitters":
        return HeavyHitters(cfg["epsilon"], cfg["max_length"], levels=cfg.get("levels"),
                            width=cfg.get("width", 64), secret=secret)
    if kind == "range":
        method = cfg.get("method", "haar")
        if method == "haar":
            if cfg.get("branching") is not None:
                raise ValueError("branching applies only to method = 'hierarchical'")
            return RangeHaar(cfg["epsilon"], cfg["domain_size"])
        if method == "hierarchical":
            return RangeHierarchical(cfg["epsilon"], cfg["domain_size"], cfg.get("branching"))
        raise ValueError(f"method must be 'haar' or 'hierarchical', got {method!r}")
    raise ValueError(f"kind must be one of {', '.join(STRUCTURED_KINDS)}, got {kind!r}")
