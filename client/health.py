"""What the SDK lost on the device and why: ``TelemetryClient.health()``.

A report is dropped on the device (never raised into the app) when it cannot be queued: the queue
file cannot be opened or written (disk full, read-only directory), or no campaign config is known
yet. ``DropCounter`` counts such reports by reason and keeps the last error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Health:
    """``ok``: reports are being queued; ``queue_error`` / ``config_error`` / ``store_error``: why
    not (None: fine; ``store_error``: the SDK's file was deleted or replaced while open, its device
    secret and privacy ledger with it, so new reports are dropped until the app restarts);
    ``dropped``: reports dropped on the device since the client started, by reason;
    ``last_error``: the error of the last drop; ``pending``: reports queued; ``clipped``: values
    of numeric campaigns outside [lower, upper], reported clipped to the range, by campaign."""

    ok: bool
    queue_error: str | None
    config_error: str | None
    dropped: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None
    pending: int = 0
    clipped: dict[str, int] = field(default_factory=dict)
    store_error: str | None = None


class DropCounter:
    """Thread-safe counts of dropped reports by reason (also of clipped values by campaign)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_reason: dict[str, int] = {}
        self.last_error: str | None = None

    def add(self, reason: str, n: int, error: str | None = None) -> None:
        with self._lock:
            self.by_reason[reason] = self.by_reason.get(reason, 0) + n
            if error is not None:
                self.last_error = error

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.by_reason)
