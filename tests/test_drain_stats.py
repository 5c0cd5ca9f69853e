"""The aggregator's progress line gives its rate over the time it worked (issue 25): a worker
that decoded 1,000 reports in 1 s and then waited 9 s for more logged "100 reports/s"."""

from __future__ import annotations

import time

from ldptel.store.runner import DrainStats


def test_rate_is_over_busy_time() -> None:
    stats = DrainStats(entries=10, reports=1000, started=time.monotonic() - 10.0)
    stats.busy = 1.0
    line = stats.line()
    assert "1,000 reports/s" in line and "busy for 1.0 s" in line, line
    assert line.startswith("10 entries, 1000 reports in 10.")


def test_idle_worker_reports_no_rate() -> None:
    assert "idle" in DrainStats(started=time.monotonic() - 5.0).line()
