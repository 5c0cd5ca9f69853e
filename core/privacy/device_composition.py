"""A device's cumulative central ε across every campaign in a shuffled privacy mode: what the
published estimates of all of them, over their retention periods, reveal about one device that
reports to every one of them in every window (``GET /v1/campaigns``' ``device_composition``, the
campaigns list page; docs/privacy.md).

What is composed. Each campaign c in a shuffled mode (its latest version, whatever its status: the
windows it already released stay published) contributes T_c = ``release_claims.releases_composed``
releases (its windows over the retention period; 1 for ``window = "all"``), each one batch of
``batch_min`` devices with c's certified curve δ_c(ε) (``planner.shuffled_curve`` or
``fakes_curve``: the curve of the planned claim, whose smallest batch is the worst; larger batches
only lower it). The device is in one batch per window of each campaign (``reports_per_window = 1``),
and windows and campaigns draw fresh randomness, so the releases compose:

    ε_device = ε at δ of ⊗_c δ_c^{⊗T_c}        (``privacy_accounting.cumulative_epsilon``, a PLD
                                                 accountant: pessimistic, FFT-based)

at δ = the smallest ``central_delta`` of the campaigns composed (the strictest any of them claims).
A campaign that keeps its windows forever (no ``retention``) has no finite T: it is not composed,
and ``unbounded`` names it (its own documents say so too). Local campaigns are not here: their
reports are ε-LDP on the device and the device's own ledger counts them.

Cost and cache. The curves take 0.1–3 s to evaluate (the GRR blanket at 120 points), so a result
is never computed on a request: ``device_composition`` answers from this process's memory or the
plan cache file (``plan_cache.lookup``: once per machine, whichever process computed it), and
otherwise starts the computation in a daemon thread (once per key and process; ``plan_cache.
computing`` lets one process of the machine compute while the others wait for its result) and
answers ``status = "computing"`` without a figure until it is done.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ldptel.privacy import plan_cache
from ldptel.privacy.modes import Shuffled, ShuffledFakes
from ldptel.privacy.release_claims import releases_composed
from ldptel.privacy.subject import Claimed

VERSION = 2  # of the cached documents: bump when the composition's math changes (2: issue 38's fakes)
_running: dict[str, int] = {}  # key → pid of the process whose thread computes it
_failed: dict[str, str] = {}  # key → why its computation failed in this process (not started again)
_lock = threading.Lock()


@dataclass(frozen=True)
class Release:
    """One campaign's part: ``releases`` windows of one batch of ``n`` devices."""

    campaign: str
    mode: str
    oracle: str
    epsilon: float | None
    domain_size: int
    n: int
    fake_rate: float | None
    delta: float
    releases: int
    shuffler_fakes: float = 0.0  # μ_s per bucket per release (``fake_sources``)


def releases_of(campaigns: Sequence[Claimed]) -> tuple[list[Release], list[str]]:
    """(each composed campaign's ``Release``, the names of those kept forever), by name."""
    from ldptel.privacy.clones import n_bucket  # the claims' own n grid (as release_claims.cumulative)

    parts, unbounded = [], []
    for c in sorted(campaigns, key=lambda c: c.name):
        mode = c.mode
        if not isinstance(mode, (Shuffled, ShuffledFakes)):
            continue
        t = releases_composed(c)
        if t is None:
            unbounded.append(c.name)
            continue
        parts.append(Release(c.name, mode.name, str(c.oracle), c.epsilon, int(c.domain_size or 0),
                             n_bucket(max(mode.batch_min, 2)),
                             mode.fake_rate if isinstance(mode, ShuffledFakes) else None,
                             mode.central_delta, t,
                             mode.shuffler_fakes if isinstance(mode, ShuffledFakes) else 0.0))
    return parts, unbounded


def _key(parts: list[Release]) -> str:
    return json.dumps(["device_composition", VERSION, [asdict(p) for p in parts]], default=str)


def compose(parts: list[Release]) -> float | None:
    """ε_device of the module docstring (None when no ε reaches δ)."""
    from ldptel.privacy.accounting import cumulative_epsilon
    from ldptel.privacy.fake_sources import FakeSplit
    from ldptel.privacy.planner import fakes_curve, shuffled_curve

    curves = []
    for p in parts:
        curve = (shuffled_curve(p.oracle, float(p.epsilon or 0.0), p.domain_size, p.n) if p.mode == "shuffled"
                 else fakes_curve(FakeSplit("", float(p.fake_rate or 0.0), p.shuffler_fakes).honest_mu(
                     p.n, p.domain_size), p.epsilon, p.domain_size, p.n))
        curves.append((curve, p.releases))
    value = cumulative_epsilon(curves, min(p.delta for p in parts))
    return value if math.isfinite(value) else None


def _compute(key: str, parts: list[Release]) -> dict[str, Any]:
    with plan_cache.computing(key):
        done = plan_cache.lookup(key)  # another process may have computed it meanwhile
        if done is None:
            done = {"epsilon": compose(parts)}
            plan_cache.store(key, done)
    return done


def _background(key: str, parts: list[Release]) -> None:
    try:
        _compute(key, parts)
    except Exception as exc:  # noqa: BLE001 - kept: no request starts it again
        with _lock:
            _failed[key] = f"{type(exc).__name__}: {exc}"
    finally:
        with _lock:
            _running.pop(key, None)


def device_composition(campaigns: Sequence[Claimed], wait: bool = False) -> dict[str, Any]:
    """The figure of the module docstring as a JSON object: ``status`` (``ready``, ``computing``,
    ``failed`` (with ``reason``; computed once per process, never retried by a request) or
    ``none``: no shuffled campaign with a finite retention), ``epsilon``, ``delta``, the
    ``campaigns`` composed (name, mode, releases), the total ``releases``, ``unbounded`` and a
    ``scope`` sentence. ``wait``: compute now if needed (tests, the CLI)."""
    parts, unbounded = releases_of(campaigns)
    out: dict[str, Any] = {
        "status": "none", "epsilon": None, "delta": min((p.delta for p in parts), default=None),
        "campaigns": [{"name": p.campaign, "privacy_mode": p.mode, "releases": p.releases} for p in parts],
        "releases": sum(p.releases for p in parts), "unbounded": unbounded,
        "scope": ("one device reporting to every campaign in a shuffled privacy mode in every window over "
                  "its retention period (one batch of batch_min devices per window), composed by a PLD "
                  "accountant at the smallest central_delta: what the exports of one retention period "
                  "reveal, not a lifetime bound (exports kept longer add their windows)"
                  + (f"; not composed: {', '.join(unbounded)} (windows kept forever: set retention)"
                     if unbounded else ""))}
    if not parts:
        return out
    key = _key(parts)
    done = _compute(key, parts) if wait else plan_cache.lookup(key)
    if done is not None:
        return {**out, "status": "ready", "epsilon": done.get("epsilon")}
    with _lock:
        if key in _failed:
            return {**out, "status": "failed", "reason": _failed[key]}
        if _running.get(key) != os.getpid():  # (a thread of the parent does not survive a fork)
            _running[key] = os.getpid()
            threading.Thread(target=_background, args=(key, parts), name="ldptel-composition",
                             daemon=True).start()
    return {**out, "status": "computing"}


__all__ = ["VERSION", "Release", "compose", "device_composition", "releases_of"]
