"""The central claim of campaigns in a shuffled privacy mode (``ldptel.campaigns.modes``): what a
published window says about one device, from the real reports of each shuffled batch (release)
the window holds.

- each batch of n devices is (U, δ)-DP with U from ``planner.shuffled_bound`` (ε₀-LDP reports
  of the oracle) or ``planner.fakes_bound`` (μ = λ·n/d fakes per bucket; with the GRR of
  ``local_epsilon`` on top), and its true central ε is at least L (an explicit attack);
- a device reports once per window (``reports_per_window = 1``), so it is in exactly one batch of
  the window: the window's claim is the worst over its batches, "central ε between max L and
  max U" (the smallest batch is the worst: every bound falls in n);
- composition (``ldptel.privacy.accounting``, PLD accountant): the cumulative central ε at the same
  δ of a device that reports in every window over the campaign's retention (T = retention /
  window releases, each at the worst batch size seen), cached per (campaign, n-bucket, T).

``window_claim`` is the ``privacy`` object's central part in every published document of such a
campaign; ``planned_claim`` the same at n = ``batch_min`` (``/v1/campaigns`` and the pages before
any release).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

from ldptel.privacy.modes import Shuffled, ShuffledFakes, ShuffledMode
from ldptel.privacy.subject import Claimed


def shuffled_mode(campaign: Claimed) -> ShuffledMode:
    """The campaign's shuffled mode (the claims of this module exist for no other)."""
    mode = campaign.mode
    if not isinstance(mode, (Shuffled, ShuffledFakes)):
        raise ValueError(f"campaign {campaign.name!r} is not in a shuffled privacy mode")
    return mode


def _bound(mode: ShuffledMode, oracle: str, d: int, n: int) -> Any:
    from ldptel.privacy.planner import fakes_bound, shuffled_bound  # scipy: server side only

    if isinstance(mode, Shuffled):
        return shuffled_bound(oracle, mode.local_epsilon, d, n, mode.central_delta)
    return fakes_bound(mode.fake_rate * n / d, d, n, mode.central_delta, mode.local_epsilon)


def batch_bound(campaign: Claimed, n: int) -> Any:
    """The ``CentralBound`` of one shuffled batch of ``n`` devices of ``campaign``."""
    from ldptel.privacy.clones import n_bucket

    return _bound(shuffled_mode(campaign), str(campaign.oracle), int(campaign.domain_size or 0),
                  n_bucket(max(n, 1)))


def releases_composed(campaign: Claimed) -> int | None:
    """T: the windows a device can report in over the retention period (1 for "all"; None when
    windows are kept forever: no finite count to compose)."""
    if campaign.window_seconds == 0:
        return 1
    kept = campaign.retention_seconds
    return None if kept is None else max(1, kept // campaign.window_seconds)


@lru_cache(maxsize=512)
def _cumulative(mode: ShuffledMode, oracle: str, d: int, n: int, releases: int) -> float | None:
    """(kept in the plan cache file too: a GRR curve takes seconds to evaluate, once per machine)"""
    from ldptel.privacy import plan_cache

    fake_rate = mode.fake_rate if isinstance(mode, ShuffledFakes) else None
    key = json.dumps(["cumulative", 1, mode.name, oracle, mode.local_epsilon, d, n, mode.central_delta,
                      fake_rate, releases])
    stored = plan_cache.lookup(key)
    if stored is not None:
        epsilon: float | None = stored.get("epsilon")
        return epsilon
    from ldptel.privacy.accounting import cumulative_epsilon
    from ldptel.privacy.planner import fakes_curve, shuffled_curve

    curve = (shuffled_curve(oracle, mode.local_epsilon, d, n) if isinstance(mode, Shuffled)
             else fakes_curve(mode.fake_rate * n / d, mode.local_epsilon, d))
    value = cumulative_epsilon([(curve, releases)], mode.central_delta)
    plan_cache.store(key, {"epsilon": value if math.isfinite(value) else None})
    return value if math.isfinite(value) else None


def cumulative(campaign: Claimed, n: int) -> tuple[int | None, float | None]:
    """(T, the cumulative central ε at δ over T releases of ``n`` devices), None when T is."""
    from ldptel.privacy.clones import n_bucket

    releases = releases_composed(campaign)
    if releases is None:
        return None, None
    return releases, _cumulative(shuffled_mode(campaign), str(campaign.oracle),
                                 int(campaign.domain_size or 0), n_bucket(max(n, 2)), releases)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def window_claim(campaign: Claimed, batches: list[int], compose: bool = True) -> dict[str, Any]:
    """The central fields of the ``privacy`` object of a window made of ``batches`` (their real
    report counts; module docstring)."""
    mode = shuffled_mode(campaign)
    worst = min(batches) if batches else mode.batch_min
    bounds = [batch_bound(campaign, n) for n in (batches or [worst])]
    upper = max(b.epsilon for b in bounds)
    lower = max(b.epsilon_lower for b in bounds)
    name = next(b.bound for b in bounds if b.epsilon == upper)
    releases, total = cumulative(campaign, worst) if compose else (releases_composed(campaign), None)
    return {"privacy_mode": mode.name, "local_epsilon": campaign.epsilon,
            "fake_rate": mode.fake_rate if isinstance(mode, ShuffledFakes) else None,
            "batch_min": mode.batch_min,
            "central_epsilon": _finite(upper), "central_epsilon_lower": _finite(lower),
            "central_delta": campaign.central_delta, "central_bound": name,
            "central_target": mode.central_epsilon, "batches": list(batches),
            "central_n": worst, "releases_composed": releases, "cumulative_epsilon": _finite(total),
            "central_scope": ("one device in one shuffled batch (it reports once per window, so in one "
                              "batch per window); the window's claim is its worst batch; "
                              + (f"cumulative over {releases} windows (the retention period) by a PLD "
                                 "accountant" if releases else "windows are kept forever: no cumulative "
                                 "figure (set retention)"))}


def planned_claim(campaign: Claimed) -> dict[str, Any]:
    """``window_claim`` of one batch of ``batch_min`` devices (what the plan certifies)."""
    return window_claim(campaign, [shuffled_mode(campaign).batch_min])


__all__ = ["batch_bound", "cumulative", "planned_claim", "releases_composed", "shuffled_mode", "window_claim"]
