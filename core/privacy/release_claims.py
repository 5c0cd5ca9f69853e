"""The central claim of campaigns in a shuffled privacy mode (``ldptel.campaigns.modes``): what a
published window says about one device, from the real reports of each shuffled batch (release)
the window holds.

- each batch of n devices is (U, δ)-DP with U from ``planner.shuffled_bound`` (ε₀-LDP reports
  of the oracle; a heavy-hitter campaign's: the pool-OLH, ``claim_oracle``) or
  ``planner.fakes_bound`` (μ = μ_s + λ·n/d fakes per bucket: the shuffler's and the devices',
  ``fake_sources``; with the GRR of ``local_epsilon`` on top), and its true central
  ε is at least L (an explicit attack); that claim assumes honest devices, and ``claims`` (a list)
  states it beside the claim against adversarial devices (``fake_sources.claims``: every other
  device of the batch the attacker's), each with its ``assumes``;
- a device reports once per window (``reports_per_window = 1``), so it is in exactly one batch of
  the window: the window's claim is the worst over its batches, "central ε between max L and
  max U" (the smallest batch is the worst: every bound falls in n);
- composition (``ldptel.privacy.accounting``, PLD accountant): the cumulative central ε at the same
  δ of a device that reports in every window over the campaign's retention (T = retention /
  window releases, each at the worst batch size seen), cached per (campaign, n-bucket, T);
  T is at most ``MAX_RELEASES_COMPOSED`` (``ldptel.campaigns.modes`` refuses a longer retention:
  composing 10⁴ releases costs ~20 MB and ~0.2 s beyond the curve, 10⁶ ~0.5 GB and 6 s).

``window_claim`` is the ``privacy`` object's central part in every published document of such a
campaign; ``planned_claim`` the same at n = ``batch_min`` (``/v1/campaigns`` and the pages before
any release). ``version_claims`` evaluates the planned claim when a version is made or loaded
(``ldptel.campaigns.modes``: the admin API, ``campaigns apply``, a config load, each registry
revision a process reads), so ``planned_claim`` on a request finds it computed: it never composes
on the caller's thread (the per-machine cache, else a daemon thread computes it and the claim says
``cumulative_status = "computing"`` meanwhile, as ``device_composition`` does).
"""

from __future__ import annotations

import json
import math
import os
import threading
from functools import lru_cache
from typing import Any

from ldptel.mechanisms.shuffled_kinds import HEAVY_HITTERS
from ldptel.privacy.accounting import MAX_RELEASES
from ldptel.privacy.fake_sources import FakeSplit
from ldptel.privacy.modes import Shuffled, ShuffledFakes, ShuffledMode
from ldptel.privacy.subject import Claimed

MAX_RELEASES_COMPOSED = MAX_RELEASES  # the most T = retention / window (module docstring)
_running: dict[str, int] = {}  # cumulative keys → pid of the process whose thread computes them
_failed: dict[str, str] = {}  # cumulative keys whose computation failed in this process → why
_lock = threading.Lock()


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
    return fakes_bound(fake_split(mode).honest_mu(n, d), d, n, mode.central_delta, mode.local_epsilon)


def fake_split(mode: ShuffledFakes) -> FakeSplit:
    """The mode's ``FakeSplit``: the devices' λ and the shuffler's μ per bucket."""
    return FakeSplit(mode.fake_source, mode.fake_rate, mode.shuffler_fakes)


def claim_oracle(campaign: Claimed) -> tuple[str, int]:
    """The (oracle, d) the bounds of ``campaign``'s releases are computed for: its plan's for a
    heavy-hitter campaign (``heavy_hitters``, d = its levels J: the pool-OLH's attack), else its
    own oracle and domain size."""
    mode = shuffled_mode(campaign)
    if isinstance(mode, Shuffled) and mode.plan.inputs.oracle == HEAVY_HITTERS:
        return HEAVY_HITTERS, mode.plan.inputs.domain_size
    return str(campaign.oracle), int(campaign.domain_size or 0)


def batch_bound(campaign: Claimed, n: int) -> Any:
    """The ``CentralBound`` of one shuffled batch of ``n`` devices of ``campaign``."""
    from ldptel.privacy.clones import n_bucket

    return _bound(shuffled_mode(campaign), *claim_oracle(campaign), n_bucket(max(n, 1)))


def releases_composed(campaign: Claimed) -> int | None:
    """T: the windows a device can report in over the retention period (1 for "all"; None when
    windows are kept forever: no finite count to compose)."""
    if campaign.window_seconds == 0:
        return 1
    kept = campaign.retention_seconds
    return None if kept is None else max(1, kept // campaign.window_seconds)


def _key(mode: ShuffledMode, oracle: str, d: int, n: int, releases: int) -> str:
    fake_rate = mode.fake_rate if isinstance(mode, ShuffledFakes) else None
    shuffler = [mode.shuffler_fakes] if isinstance(mode, ShuffledFakes) and mode.shuffler_fakes else []
    return json.dumps(["cumulative", 2, mode.name, oracle, mode.local_epsilon, d, n, mode.central_delta,
                       fake_rate, releases, *shuffler])


@lru_cache(maxsize=512)
def _cumulative(mode: ShuffledMode, oracle: str, d: int, n: int, releases: int) -> float | None:
    """(kept in the plan cache file too: a GRR curve takes seconds to evaluate, once per machine)"""
    from ldptel.privacy import plan_cache

    key = _key(mode, oracle, d, n, releases)
    stored = plan_cache.lookup(key)
    if stored is not None:
        epsilon: float | None = stored.get("epsilon")
        return epsilon
    if releases > MAX_RELEASES_COMPOSED:
        raise ValueError(f"{releases:,} releases to compose, more than {MAX_RELEASES_COMPOSED:,}")
    from ldptel.privacy.accounting import cumulative_epsilon
    from ldptel.privacy.planner import fakes_curve, shuffled_curve

    curve = (shuffled_curve(oracle, mode.local_epsilon, d, n) if isinstance(mode, Shuffled)
             else fakes_curve(fake_split(mode).honest_mu(n, d), mode.local_epsilon, d, n))
    value = cumulative_epsilon([(curve, releases)], mode.central_delta)
    plan_cache.store(key, {"epsilon": value if math.isfinite(value) else None})
    return value if math.isfinite(value) else None


def _background(key: str, args: tuple[Any, ...]) -> None:
    try:
        _cumulative(*args)
    except Exception as exc:  # noqa: BLE001 - kept, so that no request starts it again
        with _lock:
            _failed[key] = f"{type(exc).__name__}: {exc}"
    finally:
        with _lock:
            _running.pop(key, None)


def cumulative(campaign: Claimed, n: int, wait: bool = True) -> tuple[int | None, float | None, str]:
    """(T, the cumulative central ε at δ over T releases of ``n`` devices, its status): status
    ``ready``, ``none`` (T is None: windows kept forever), and with ``wait=False`` (a request:
    nothing composed on this thread) ``computing`` (a daemon thread computes it, once per key and
    process) or ``failed`` (it could not be computed here; the version's creation would have said
    why)."""
    from ldptel.privacy import plan_cache
    from ldptel.privacy.clones import n_bucket

    releases = releases_composed(campaign)
    if releases is None:
        return None, None, "none"
    args = (shuffled_mode(campaign), *claim_oracle(campaign), n_bucket(max(n, 2)), releases)
    if wait:
        return releases, _cumulative(*args), "ready"
    key = _key(*args)
    done = plan_cache.lookup(key)
    if done is not None:
        return releases, done.get("epsilon"), "ready"
    with _lock:
        if key in _failed:
            return releases, None, "failed"
        if _running.get(key) != os.getpid():  # (a thread of the parent does not survive a fork)
            _running[key] = os.getpid()
            threading.Thread(target=_background, args=(key, args), name="ldptel-cumulative",
                             daemon=True).start()
    return releases, None, "computing"


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def window_claim(campaign: Claimed, batches: list[int], compose: bool = True) -> dict[str, Any]:
    """The central fields of the ``privacy`` object of a window made of ``batches`` (their real
    report counts; module docstring). ``compose=False``: the cumulative ε only if already computed
    (``cumulative(wait=False)``), with its ``cumulative_status``."""
    mode = shuffled_mode(campaign)
    worst = min(batches) if batches else mode.batch_min
    bounds = [batch_bound(campaign, n) for n in (batches or [worst])]
    upper = max(b.epsilon for b in bounds)
    lower = max(b.epsilon_lower for b in bounds)
    name = next(b.bound for b in bounds if b.epsilon == upper)
    releases, total, status = cumulative(campaign, worst, wait=compose)
    out = {"privacy_mode": mode.name, "local_epsilon": campaign.epsilon,
           "fake_rate": mode.fake_rate if isinstance(mode, ShuffledFakes) else None,
           "batch_min": mode.batch_min,
           "central_epsilon": _finite(upper), "central_epsilon_lower": _finite(lower),
           "central_delta": campaign.central_delta, "central_bound": name,
           "central_target": mode.central_epsilon, "batches": list(batches),
           "central_n": worst, "releases_composed": releases, "cumulative_epsilon": _finite(total),
           "central_scope": ("one device in one shuffled batch (it reports once per window, so in one "
                             "batch per window); the window's claim is its worst batch; "
                             + (f"cumulative over {releases} windows (the retention period) by a PLD "
                                "accountant: what the exports of one retention period reveal, not a "
                                "lifetime bound (exports kept longer add their windows)"
                                if releases else "windows are kept forever: no cumulative "
                                "figure (set retention)")),
           "claims": source_claims(campaign, worst, max(bounds, key=lambda b: b.epsilon))}
    if isinstance(mode, ShuffledFakes):
        out["fake_source"] = mode.fake_source
        out["shuffler_fakes_per_bucket"] = mode.shuffler_fakes
    if not compose:
        out["cumulative_status"] = status
    return out


def source_claims(campaign: Claimed, n: int, honest: Any) -> list[dict[str, Any]]:
    """The release's two claims (``fake_sources.claims``): against adversarial devices (every
    other device of the batch the attacker's) and with honest devices (``honest``: the bound of
    the window's worst batch, of ``n`` devices), each with what it ``assumes``."""
    from ldptel.privacy.fake_sources import claims

    mode = shuffled_mode(campaign)
    d = int(campaign.domain_size or 0)
    if isinstance(mode, Shuffled):
        return claims(None, d, n, mode.central_delta, mode.local_epsilon, honest)
    return claims(fake_split(mode), d, n, mode.central_delta, mode.local_epsilon, honest)


def version_claims(campaign: Claimed) -> dict[str, Any]:
    """The planned claim computed now, cumulative ε included (``ldptel.campaigns.modes`` calls it
    when a version is made or loaded; errors are the version's: ``ValueError`` and the like)."""
    return window_claim(campaign, [shuffled_mode(campaign).batch_min])


def planned_claim(campaign: Claimed) -> dict[str, Any]:
    """``window_claim`` of one batch of ``batch_min`` devices (what the plan certifies), for a
    request: the cumulative ε as ``version_claims`` left it, never composed here."""
    return window_claim(campaign, [shuffled_mode(campaign).batch_min], compose=False)


__all__ = ["MAX_RELEASES_COMPOSED", "batch_bound", "claim_oracle", "cumulative", "fake_split",
           "planned_claim", "releases_composed", "shuffled_mode", "source_claims", "version_claims",
           "window_claim"]
