"""Exceptions of the aggregator."""

from __future__ import annotations


class StateMismatch(RuntimeError):
    """Stored state that does not fit a campaign's current parameters."""


class WindowError(ValueError):
    """An invalid ``window`` query value (the export API answers 400)."""
