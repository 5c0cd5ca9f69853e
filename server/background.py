"""``ProcessThread``: a daemon thread that runs once per process — gunicorn forks its workers
from a master, and a thread does not survive a fork, so each process starts its own on first use."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable


class ProcessThread:
    """``ensure()`` starts a daemon thread, unless one was started in this process, that calls
    ``step`` (a bound method: one round, returning the seconds until the next) again and again.
    The thread holds the method's object weakly and ends once that object is gone: an app that is
    dropped (a test's) stops its background reads instead of polling Redis for the rest of the
    process's life."""

    def __init__(self, step: Callable[[], float], name: str) -> None:
        self.step, self.name = weakref.WeakMethod(step), name
        self._pid: int | None = None
        self._lock = threading.Lock()

    def ensure(self) -> None:
        pid = os.getpid()
        if self._pid == pid:
            return
        with self._lock:
            if self._pid == pid:
                return
            self._pid = pid
        threading.Thread(target=_rounds, args=(self.step,), name=self.name, daemon=True).start()


def _rounds(step: weakref.WeakMethod) -> None:  # type: ignore[type-arg]
    while True:
        bound = step()
        if bound is None:  # its object is gone: nothing left to refresh
            return
        wait = bound()
        del bound  # no strong reference while asleep
        time.sleep(wait)
