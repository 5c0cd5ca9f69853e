"""What the privacy math reads of a campaign: ``Claimed``, the fields of
``ldptel.campaigns.Campaign`` that a central claim depends on, as a protocol, so that this room
states its needs without importing the campaigns room above it."""

from __future__ import annotations

from typing import Any, Protocol

from ldptel.privacy.modes import PrivacyMode


class Claimed(Protocol):
    """A campaign as the release claims, the central bound and device composition see it."""

    @property
    def name(self) -> str: ...
    @property
    def mode(self) -> PrivacyMode: ...
    @property
    def oracle(self) -> str | None: ...
    @property
    def epsilon(self) -> float | None: ...
    @property
    def domain_size(self) -> int | None: ...
    @property
    def central_delta(self) -> float | None: ...
    @property
    def shuffle_min_reports(self) -> int: ...
    @property
    def window_seconds(self) -> int: ...
    @property
    def retention_seconds(self) -> int | None: ...

    def privacy(self) -> dict[str, Any]: ...


__all__ = ["Claimed"]
