"""ldptel.privacy: the privacy claim's mathematics, I/O-free (numpy, scipy, dp-accounting).

What lives here: the privacy modes as the math names them (``modes``) and what a claim reads of a
campaign (``subject``); the amplification-by-shuffling bound (``clones``: Feldman, McMillan,
Talwar), the exact count pair and the GRR blanket bound (``count_pair``, ``blanket``), the oracles'
central bounds and lower bounds (``amplification``), the exact fake-message δ (``fake_messages``);
the planner that turns a central (ε, δ) target into ε₀ or a fake rate (``planner``) and its
on-disk cache (``plan_cache``); the PLD accountant over windows (``accounting``), composition
across campaigns per device (``device_composition``); the claim printed on a release
(``release_claims``, ``central``) and the Clopper-Pearson check of a mechanism (``ldp_check``).

What it may import: the SDK-safe root modules (``ldptel.errors`` …), ``ldptel.mechanisms`` and
``ldptel.proto``; never ``ldptel.campaigns``, ``ldptel.store`` or a service (pyproject's import
contract). Importing this package imports none of its modules: scipy loads with the module that
needs it.
"""
