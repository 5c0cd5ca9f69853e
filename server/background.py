"""``ProcessThread``: a daemon thread that runs once per process — gunicorn forks its workers
from a master, and a thread does not survive a fork, so each process starts its own on first use."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


class ProcessThread:
    """``ensure()`` starts ``target`` in a daemon thread unless one was started in this process."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        self.target, self.name = target, name
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
        threading.Thread(target=self.target, name=self.name, daemon=True).start()
