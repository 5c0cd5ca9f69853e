"""ldptel.privacy: the privacy claim's mathematics, I/O-free (numpy, scipy, dp-accounting).

What lives here: the privacy modes as types, one frozen dataclass per mode with its pinned plan
(``modes``), and what a claim reads of a campaign (``subject``); the amplification-by-shuffling
bound (``clones``: Feldman, McMillan, Talwar), the exact count pair and the GRR blanket bound
(``count_pair``, ``blanket``), the oracles' central bounds and lower bounds (``amplification``), the
exact fake-message δ (``fake_messages``); the planner that turns a central (ε, δ) target into ε₀ or
a fake rate (``planner``) and its on-disk cache (``plan_cache``); the PLD accountant over windows
(``accounting``), composition across campaigns per device (``device_composition``); the claim
printed on a release (``release_claims``, ``central``) and the Clopper-Pearson check of a mechanism
(``ldp_check``).

What it may import: the SDK-safe root modules (``ldptel.errors`` …), ``ldptel.mechanisms`` and
``ldptel.proto``; never ``ldptel.campaigns``, ``ldptel.store`` or a service (pyproject's import
contract). Importing this package imports none of its modules: scipy loads with the module that
needs it.

``plan`` (below) is the planner under its one name: every caller plans through it, and so through
the plan cache; ``planner.compute_plan`` is the computation behind a miss.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ldptel.privacy.plan_cache import CachedPlan


def plan(mode: str, oracle: str, domain_size: int, central_epsilon: float, central_delta: float,
         batch_min: int, windows: int | None = None, *, local_epsilon: float | None = None) -> CachedPlan:
    """The planner: the plan of a central (ε, δ) target at n = ``batch_min`` (``planner``'s module
    docstring), through the plan cache (``plan_cache``: this process's memory, then the file, then
    ``planner.compute_plan``, stored). A hit imports nothing of the privacy math (no scipy). Errors
    of the planner (``ValueError`` naming the argument, ``UncertifiableTarget``) are raised and
    not cached."""
    from ldptel.privacy import plan_cache

    args = (mode, oracle, domain_size, central_epsilon, central_delta, batch_min, windows)
    key = json.dumps([plan_cache.VERSION, args, local_epsilon], default=str)
    stored = plan_cache.lookup(key)
    if stored is not None and "local_epsilon" in stored and "fake_rate" in stored:
        return plan_cache.CachedPlan(stored)
    from ldptel.privacy.planner import compute_plan

    doc = compute_plan(*args, local_epsilon=local_epsilon).as_dict()
    plan_cache.store(key, doc)
    return plan_cache.CachedPlan(doc)


__all__ = ["plan"]
