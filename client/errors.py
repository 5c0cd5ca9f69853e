"""The client package's exceptions.

Bad arguments to a mechanism or to the SDK raise plain ``ValueError`` naming the argument; the
classes here carry more than a message: the index of a bad report, or why the SDK cannot go on.
"""

from __future__ import annotations

from ldptel.errors import LdptelError


class TelemetryError(LdptelError, RuntimeError):
    """The SDK cannot proceed (no campaign config, unknown campaign, authentication)."""


class UnknownCampaign(TelemetryError, ValueError):
    """The collector has no campaign of that name."""


class CampaignRefused(TelemetryError):
    """The campaign's config spends more privacy than the client allows (``max_epsilon``): the
    SDK neither randomizes nor sends anything for it."""


class VersionClosed(TelemetryError):
    """Queued reports of a campaign version the collector no longer takes (superseded more than
    its ``accept_old_versions`` ago, or the campaign retired): they are dropped and counted under
    ``reason`` (``version_retired`` / ``campaign_retired``)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class BadConfig(TelemetryError):
    """A campaign config from the collector that fails validation (ε outside [0.01, 10], NaN, a
    negative domain size, RAPPOR's f = 0, …): that campaign's reports are dropped and counted as
    ``bad_config`` by ``report()``, never raised into the app (``mechanism()`` raises it)."""


class KeyNotTrusted(TelemetryError):
    """The analyzer key in a shuffled campaign's config is not one the SDK may seal to: no
    ``analyzer_signing_key`` is pinned, or the key's signature does not verify under it, or it
    has expired. Its reports wait in the queue (``health().sealing_error`` says why)."""


class QueueUnavailable(TelemetryError):
    """The SDK's queue file cannot be opened (e.g. a read-only directory)."""


__all__ = ["BadConfig", "CampaignRefused", "KeyNotTrusted", "QueueUnavailable", "TelemetryError",
           "UnknownCampaign", "VersionClosed"]
