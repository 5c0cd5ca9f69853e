"""What keeps ``ldptel serve``'s children running: the embedded Redis, the shuffler, the aggregator
and the reader pool are restarted when they die, after a backoff (``BACKOFF_MIN_S`` doubling up to
``BACKOFF_MAX_S``; back to the minimum once a child has stayed up ``STABLE_S``), and every exit and
restart is logged. The collector (gunicorn, which restarts its own workers) is watched by
``serve`` itself: when it exits, ``serve`` stops the rest and exits.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any, cast

log = logging.getLogger(__name__)

BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0
STABLE_S = 60.0


def describe_exit(status: int | None) -> str:
    """A Popen return code in words (``killed by SIGKILL``, ``exit status 1``)."""
    if status is None:
        return "an unknown status"
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


class Supervised:
    """One restartable child: ``launch()`` starts it and returns its process, ``halt()`` stops it,
    ``on_exit(pid)`` runs once per death (e.g. to drop the dead process's live metrics)."""

    def __init__(self, name: str, launch: Callable[[], Any], halt: Callable[[], None],
                 on_exit: Callable[[int], None] | None = None) -> None:
        self.name, self.launch, self.halt, self.on_exit = name, launch, halt, on_exit
        self.proc: Any = None  # a subprocess.Popen, or anything with pid, poll() and returncode
        self.restarts = 0
        self.delay = BACKOFF_MIN_S
        self._started = 0.0
        self._next_try: float | None = None  # set while the child is dead

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> int:
        """Start the child (raises what ``launch`` raises); returns its pid."""
        self.proc = self.launch()
        self._started = time.monotonic()
        self._next_try = None
        return cast("int", self.proc.pid)

    def check(self) -> None:
        """Called every fraction of a second: notice a death, restart when the backoff is over."""
        now = time.monotonic()
        if self._next_try is None:
            if self.proc is None or self.proc.poll() is None:
                if now - self._started >= STABLE_S:
                    self.delay = BACKOFF_MIN_S
                return
            log.warning("ldptel serve: %s (pid %d) died (%s); restarting in %.1f s", self.name,
                        self.proc.pid, describe_exit(self.proc.returncode), self.delay)
            if self.on_exit is not None:
                self.on_exit(self.proc.pid)
            self._next_try = now + self.delay
        if now < self._next_try:
            return
        self.delay = min(self.delay * 2, BACKOFF_MAX_S)
        try:
            pid = self.start()
        except Exception as exc:  # noqa: BLE001 - logged, tried again after the backoff
            self._next_try = now + self.delay
            log.error("ldptel serve: could not restart %s (%s); next try in %.1f s", self.name, exc,
                      self.delay)
            return
        self.restarts += 1
        log.warning("ldptel serve: %s restarted (pid %d, restart %d)", self.name, pid, self.restarts)

    def stop(self) -> None:
        self._next_try = None
        self.halt()


def wait_pid(pid: int, timeout: float) -> int | None:
    """Wait up to ``timeout`` s for child ``pid``; its exit code (-signal if killed), else None."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def stop_pids(pids: list[int], timeout: float = 30.0) -> list[int]:
    """SIGTERM every child of ``pids`` at once, SIGKILL each one still running ``timeout`` s later;
    their exit codes, in order."""
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    codes = []
    for pid in pids:
        code = wait_pid(pid, max(0.0, deadline - time.monotonic()))
        if code is None:
            os.kill(pid, signal.SIGKILL)
            code = wait_pid(pid, 10.0)
        codes.append(code if code is not None else 1)
    return codes
