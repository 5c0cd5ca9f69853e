"""The SDK's mechanisms per (campaign, version), built from the public config once, and the
device's own ε limit: a campaign whose privacy loss (``builder.privacy_loss``: RAPPOR's ε∞ or the
per-report ε) exceeds ``max_epsilon`` is refused, whatever the server says. A config that fails
validation (``configs.check_config``, then the mechanism's own checks: ε in [0.01, 10], finite
bounds, …) raises ``BadConfig`` naming the campaign, never a bare ``ValueError``: a malicious or
broken collector cannot make ``report()`` raise into the app."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from ldptel.client.configs import check_config
from ldptel.client.errors import BadConfig, CampaignRefused, TelemetryError
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.builder import CAMPAIGN_KINDS, build_mechanism, privacy_loss, uses_device_secret


class MechanismCache:
    """``get(campaign, cfg)`` → (cfg, mechanism), rebuilt only when the config changed;
    ``secret_of(campaign)`` gives the campaign's device secret for mechanisms that use one."""

    def __init__(self, max_epsilon: float, secret_of: Callable[[str], bytes],
                 accept_unrandomized: bool = False) -> None:
        self.max_epsilon = max_epsilon
        self.accept_unrandomized = accept_unrandomized
        self._secret_of = secret_of
        self._lock = threading.Lock()
        self._mechs: dict[tuple[str, int], tuple[dict[str, Any], Mechanism]] = {}  # by (campaign, version)

    def get(self, campaign: str, cfg: dict[str, Any]) -> tuple[dict[str, Any], Mechanism]:
        """The mechanism of ``cfg`` (campaign ``campaign``); ``CampaignRefused`` over
        ``max_epsilon``, ``TelemetryError`` for a kind this SDK does not know."""
        with self._lock:
            key = (campaign, int(cfg.get("version", 1)))
            cached = self._mechs.get(key)
            if cached is None or cached[0] != cfg:
                if cfg.get("kind", "frequency") not in CAMPAIGN_KINDS:
                    raise TelemetryError(f"campaign {campaign!r}: unknown campaign kind {cfg['kind']!r}")
                check_config(campaign, cfg)
                secret = self._secret_of(campaign) if uses_device_secret(cfg) else None
                try:
                    built = build_mechanism(cfg, secret)
                    what, eps = privacy_loss(built)
                    if not math.isfinite(eps) and built.name != "histogram":
                        raise ValueError(f"its {what} is {eps}")
                except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
                    raise BadConfig(f"campaign {campaign!r}: the collector's config cannot be used "
                                    f"({type(exc).__name__}: {exc}); its reports are dropped") from None
                if built.name == "histogram":
                    if not self.accept_unrandomized:
                        raise CampaignRefused(
                            f"campaign {campaign!r} refused: it sends the true value, not randomized on "
                            "the device (privacy_mode shuffled-fakes without local_epsilon: its "
                            "guarantee is central only); TelemetryClient(accept_unrandomized=True) "
                            "allows it")
                elif eps > self.max_epsilon:
                    raise CampaignRefused(
                        f"campaign {campaign!r} refused: its {what} = {eps:.3g} exceeds this client's "
                        f"max_epsilon = {self.max_epsilon:g}; nothing is reported or sent for it")
                cached = self._mechs[key] = (cfg, built)
            return cached
