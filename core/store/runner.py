"""The parts every background worker shares (the aggregator's ``Worker`` and the ``Shuffler``
use them by composition; neither knows the other): the errors after which a worker waits and
retries (``UNAVAILABLE``), its wait while Redis is unavailable (``Backoff``, ``retry_wait``),
its progress counters (``DrainStats``), and the runner of a worker in a daemon thread
(``BackgroundRunner``: ``ldptel demo`` and the tests). A worker is any object with
``run(stop=threading.Event) -> stats`` and ``warn(message)``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis as redis_lib
from redis.exceptions import ClusterDownError, SlotNotCoveredError

# errors after which a worker waits and retries (a cluster node down or slots not served)
UNAVAILABLE = (
    redis_lib.ConnectionError, redis_lib.TimeoutError, redis_lib.BusyLoadingError,
    ClusterDownError, SlotNotCoveredError)
ONCE_GIVE_UP_S = 60.0  # --once: give up when Redis stays unreachable this long


@dataclass
class DrainStats:
    entries: int = 0
    reports: int = 0
    rejected: int = 0
    commits: int = 0
    lost: int = 0  # commits refused because another worker had claimed an entry
    started: float = field(default_factory=time.monotonic)
    busy: float = 0.0  # seconds spent decoding and committing (not waiting for entries)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        """"N entries, M reports in T s (R reports/s while busy for B s)": the rate is over the
        time spent decoding and committing, never over the time spent waiting for entries."""
        dt, busy = max(self.elapsed, 1e-9), min(self.busy, self.elapsed)
        rate = f"{self.reports / busy:,.0f} reports/s while busy for {busy:.1f} s" if busy > 0 else "idle"
        return (f"{self.entries} entries, {self.reports} reports in {dt:.1f} s ({rate})"
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


def retry_wait(exc: Exception, backoff: Backoff, once: bool, warn: Callable[[str], None], what: str) -> float:
    """Seconds to wait after ``exc`` (one of ``UNAVAILABLE``) before the next round, logged
    through ``warn`` as ``"<what>: redis unavailable (…)"``; with ``once``, ``exc`` is raised
    again once Redis has been unavailable for ``ONCE_GIVE_UP_S``."""
    if once and backoff.down_for() > ONCE_GIVE_UP_S:
        raise exc
    wait = backoff.next()
    warn(f"{what}: redis unavailable ({exc}); retrying in {wait:.1f} s")
    return wait


class Worker(Protocol):
    def run(self, *, stop: threading.Event) -> Any: ...

    def warn(self, message: str) -> None: ...


class BackgroundRunner:
    """``worker.run(stop=…)`` in a daemon thread named ``thread_name``. ``stop()`` sets the
    event (the worker finishes its current step) and joins; an exception that ended the thread
    is kept in ``error`` and reported through ``worker.warn``."""

    def __init__(self, worker: Any, thread_name: str) -> None:
        self.worker = worker
        self.thread_name = thread_name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.worker.run(stop=self._stop)
        except BaseException as exc:  # noqa: BLE001 - surfaced through .error
            self.error = exc
            self.worker.warn(f"{self.thread_name}: stopped: {exc!r}")

    def start(self) -> BackgroundRunner:
        self._thread.start()
        return self

    def request_stop(self) -> None:
        """Ask the worker to stop after its current step, without waiting (stop several at once,
        then ``stop()`` each: their steps end in parallel)."""
        self._stop.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()


__all__ = ["ONCE_GIVE_UP_S", "UNAVAILABLE", "Backoff", "BackgroundRunner", "DrainStats", "Worker",
           "retry_wait"]
