"""A worker's progress counters (``DrainStats``) and its wait while Redis is unavailable
(``Backoff``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class DrainStats:
    entries: int = 0
    reports: int = 0
    rejected: int = 0
    commits: int = 0
    lost: int = 0  # commits refused because another worker had claimed an entry
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        dt = max(self.elapsed, 1e-9)
        return (f"{self.entries} entries, {self.reports} reports in {dt:.1f} s "
                f"({self.reports / dt:,.0f} reports/s)"
                + (f", {self.rejected} rejected" if self.rejected else ""))


@dataclass
class Backoff:
    """Wait before the next try while Redis is unavailable: 0.1 s, doubling up to 5 s."""

    delay: float = 0.1
    down_since: float | None = None

    def reset(self) -> None:
        self.delay, self.down_since = 0.1, None

    def down_for(self) -> float:
        """Seconds since the first failure of this outage (0 on its first failure)."""
        if self.down_since is None:
            self.down_since = time.monotonic()
        return time.monotonic() - self.down_since

    def next(self) -> float:
        wait, self.delay = self.delay, min(self.delay * 2, 5.0)
        return wait
