"""Range and numeric campaigns in a shuffled privacy mode, as configured (``ldptel.campaigns.modes``
parses the mode; this module the kinds' own keys; the mechanism: ``ldptel.mechanisms.shuffled_kinds``).

- ``kind = "range"``: ``domain_size`` (at most ``MAX_FREQUENCY_DOMAIN``: the index histogram is a
  frequency histogram over the domain, with its state and documents); ``method`` absent or
  ``"histogram"`` (no Haar or hierarchical tree: ranges, quantiles and the CDF come from the
  debiased histogram), no ``branching``;
- ``kind = "numeric"``: ``lower``, ``upper`` and ``grid_points`` (K, default 32: the value is rounded
  at random to one of K evenly spaced points, ``ldptel.mechanisms.grid``; the published
  ``domain_size`` is K); ``mechanism`` absent or ``"grid"``, no ``memoize`` or ``buckets``.

The oracle: ``shuffled`` takes ``grr`` (default), ``oue`` or ``sue`` (their range variances are in
closed form, ``ldptel.mechanisms.index_stats``: OLH's and Hadamard's hashed or signed reports
correlate the indices' counts), ``shuffled-fakes`` the histogram, or GRR with ``local_epsilon``.
A heavy-hitter campaign (``shuffled`` only, issue 39) keeps its local keys; ``heavy_hitter_levels``
reads its J for the plan, ``heavy_hitter_fakes_refusal`` says why ``shuffled-fakes`` is refused.
Every error is a ``ConfigError`` naming its key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ldptel.campaigns.limits import MAX_FREQUENCY_DOMAIN
from ldptel.config_values import fail, read_int
from ldptel.mechanisms.grid import DEFAULT_GRID_POINTS, MAX_GRID_POINTS, MIN_GRID_POINTS
from ldptel.mechanisms.shuffled_kinds import GRID_MECHANISM, INDEX_KINDS, INDEX_ORACLES, RANGE_METHOD

KIND_OWN = {"range": ("method", "branching"), "numeric": ("mechanism", "memoize", "buckets")}


def index_domain(raw: dict[str, Any], at: str, kind: str) -> int:
    """K, the size of the index domain the planner plans for: the range's ``domain_size``, the
    numeric campaign's ``grid_points``."""
    if kind == "range":
        return read_int(raw, "domain_size", at, None, 2, MAX_FREQUENCY_DOMAIN)
    if "domain_size" in raw:
        raise fail(f"{at}.domain_size", "does not apply to numeric campaigns: grid_points sets the index "
                   "domain of a shuffled numeric campaign")
    return read_int(raw, "grid_points", at, DEFAULT_GRID_POINTS, MIN_GRID_POINTS, MAX_GRID_POINTS)


def heavy_hitter_levels(raw: dict[str, Any], at: str) -> int:
    """J, the levels of a heavy-hitter campaign in ``shuffled`` (the planner's ``domain_size`` for
    oracle ``heavy_hitters``): ``levels``, default ``max_length`` (the base parser checks the rest)."""
    max_length = read_int(raw, "max_length", at, None, 1, 64)
    return read_int(raw, "levels", at, max_length, -(-max_length // 2), 8 * max_length)


def heavy_hitter_fakes_refusal(target: float, delta: float, batch_min: int, levels: int) -> str:
    """Why ``shuffled-fakes`` is refused for heavy hitters, with its cost
    (``ldptel.privacy.heavy_hitter_fakes``; scipy, server side)."""
    from ldptel.privacy.heavy_hitter_fakes import refusal

    return refusal(target, delta, batch_min, levels)


def check_oracle(oracle: Any, at: str) -> None:
    """``shuffled``'s oracles for an index campaign (module docstring)."""
    if oracle not in INDEX_ORACLES:
        raise fail(f"{at}.oracle", f"must be one of {', '.join(INDEX_ORACLES)} for a range or numeric "
                   f"campaign with privacy_mode = \"shuffled\" (their range variances are in closed "
                   f"form), got {oracle!r}")


def build(kind: str, raw: dict[str, Any], table: dict[str, Any], oracle: str, epsilon: float | None, at: str,
          base: Callable[[dict[str, Any]], Any]) -> Any:
    """The campaign of an index kind: the base parser checks the common keys and the kind's
    bounds (with a placeholder ε when there is none), then the index mechanism's fields replace
    the local mechanism's (module docstring)."""
    assert kind in INDEX_KINDS
    own = {"range": ("method", RANGE_METHOD), "numeric": ("mechanism", GRID_MECHANISM)}[kind]
    if raw.get(own[0], own[1]) != own[1]:
        why = ("ranges come from the histogram over the domain" if kind == "range"
               else "values are rounded to a grid")
        raise fail(f"{at}.{own[0]}", f"must be absent or {own[1]!r} with a shuffled privacy mode ({why}), "
                   f"got {raw[own[0]]!r}")
    bad = next((k for k in KIND_OWN[kind][1:] if k in raw), None)
    if bad:
        raise fail(f"{at}.{bad}", "does not apply with a shuffled privacy mode")
    local = {k: v for k, v in table.items() if k not in ("oracle", *KIND_OWN[kind])}
    camp = base({**local, "epsilon": 1.0 if epsilon is None else epsilon})
    if kind == "range":
        return dataclasses.replace(camp, oracle=oracle, epsilon=epsilon, params={"method": RANGE_METHOD})
    params = {"lower": camp.params["lower"], "upper": camp.params["upper"], "mechanism": GRID_MECHANISM}
    return dataclasses.replace(camp, oracle=oracle, epsilon=epsilon, params=params,
                               domain_size=index_domain(raw, at, kind))


__all__ = ["KIND_OWN", "build", "check_oracle", "heavy_hitter_fakes_refusal", "heavy_hitter_levels",
           "index_domain"]
