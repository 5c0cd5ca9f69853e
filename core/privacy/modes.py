"""The privacy modes a campaign can be in (docs/privacy.md), as the privacy math names them:

- ``local``: every report is ε-LDP on its own;
- ``shuffled``: one ε₀-LDP report per device, sealed to the analyzer, released in whole batches of
  ≥ ``batch_min`` devices; the claim is central (amplification by shuffling);
- ``shuffled-fakes``: the device's index (true, or through GRR at ``local_epsilon``) plus Poisson
  fake indices, each sealed; the claim is central (the fakes' noise).

How a campaign's table chooses and plans its mode is ``ldptel.campaigns.modes``.
"""

from __future__ import annotations

from typing import Any

MODES = ("local", "shuffled", "shuffled-fakes")
SHUFFLED_MODES = ("shuffled", "shuffled-fakes")


def is_shuffled(campaign: Any) -> bool:
    """True for a campaign in a shuffled mode (sealed reports, whole-batch releases)."""
    return getattr(campaign, "privacy_mode", "local") in SHUFFLED_MODES


__all__ = ["MODES", "SHUFFLED_MODES", "is_shuffled"]
