"""What the SDK lost on the device and why: ``TelemetryClient.health()``.

A report is dropped on the device (never raised into the app) when it cannot be queued: the queue
file cannot be opened or written (disk full, read-only directory), or no campaign config is known
yet, or ``report()`` refused it (``reports_per_window``, ``lifetime_epsilon``). ``DropCounter``
counts such reports by reason, keeps the last error, and says why in one log line per reason at
most every ``LOG_EVERY_S`` seconds (with the number of drops since its last line), so a
``report()`` that returns False is never silent and a loop of them does not flood the log.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger("ldptel.client")

LOG_EVERY_S = 60.0


@dataclass
class Health:
    """``ok``: reports are being queued; ``queue_error`` / ``config_error`` / ``store_error``: why
    not (None: fine; ``store_error``: the SDK's file was deleted or replaced while open, its device
    secret and privacy ledger with it, so new reports are dropped until the app restarts);
    ``dropped``: reports dropped on the device since the client started, by reason;
    ``last_error``: the error of the last drop; ``pending``: reports queued; ``clipped``: values
    of numeric campaigns outside [lower, upper], reported clipped to the range, by campaign;
    ``sealing_error``: why reports of shuffled campaigns wait in the queue unsealed (no
    ``analyzer_signing_key`` pinned, or the collector's analyzer key not signed by it or expired:
    ``client.sealed.pinned_key``), None when every such campaign seals."""

    ok: bool
    queue_error: str | None
    config_error: str | None
    dropped: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None
    pending: int = 0
    clipped: dict[str, int] = field(default_factory=dict)
    store_error: str | None = None
    sealing_error: str | None = None
    # reports that wait in the queue, by reason: ``no_token`` (a campaign that requires Privacy Pass
    # tokens, none to be had: no attestation, the issuer unreachable or its quota reached; issue 37)
    waiting: dict[str, int] = field(default_factory=dict)


class DropCounter:
    """Thread-safe counts of dropped reports by reason (also of clipped values by campaign)."""

    def __init__(self, announce: bool = False) -> None:
        self._lock = threading.Lock()
        self.by_reason: dict[str, int] = {}
        self.last_error: str | None = None
        self.announce = announce  # log why (rate-limited per reason)
        self._logged_at: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}

    def add(self, reason: str, n: int, error: str | None = None, logged: bool = False) -> None:
        """Count ``n`` reports dropped for ``reason`` (``logged``: the caller logged it already)."""
        with self._lock:
            self.by_reason[reason] = self.by_reason.get(reason, 0) + n
            if error is not None:
                self.last_error = error
            if not self.announce or logged:
                return
            now = time.monotonic()
            self._unlogged[reason] = self._unlogged.get(reason, 0) + n
            if now - self._logged_at.get(reason, -float("inf")) < LOG_EVERY_S:
                return
            self._logged_at[reason], count = now, self._unlogged.pop(reason)
        log.warning("%d report%s dropped on the device (%s): %s", count, "" if count == 1 else "s",
                    reason, error or reason)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.by_reason)
