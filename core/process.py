"""``die_with_parent``: a child process of ``ldptel serve`` (gunicorn, the aggregator, the
embedded Redis) gets SIGTERM when ``serve`` dies, even by SIGKILL, so that no orphan keeps the data
directory or a port (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing happens).

``processes_for``, ``chunk_bounds`` and ``HelperPool``: how a pool of processes splits HPKE work (the
aggregator's ``aggregator.opening.Opener``, the shuffler's ``shuffler.sealer.Sealer``). A pool's
helpers exit when the process that started the pool is gone, even by SIGKILL (``exit_with``): a
``forkserver`` helper's parent is the fork server, which lives as long as its helpers do, so
without it a killed shuffler or aggregator left the fork server, its helpers and the resource
tracker running for good."""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> None:
    """Ask the kernel for SIGTERM when the parent dies. Call in the child (after ``fork``, or as
    a ``subprocess`` ``preexec_fn`` in a process without threads). ``parent``: the pid it must
    have; if it is already gone the child terminates itself."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def processes_for(setting: int) -> int:
    """The processes a setting (``[analyzer] open_processes``, ``[shuffler] fake_processes``)
    means: 0 is every core this process may use, k > 0 is k."""
    if setting > 0:
        return setting
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


def chunk_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous [start, stop) ranges covering 0..n, sizes differing by at most 1."""
    parts = max(min(parts, n), 1)
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def exit_with(owner: int) -> None:
    """Pool initializer: this helper exits (``os._exit``) once process ``owner`` is gone, watched
    by a daemon thread (``pidfd_open`` and a blocking ``select``; where that is missing, a check
    every second). Its work queue cannot tell it: the helper holds that queue's writing end too."""

    def gone() -> None:
        os._exit(0)

    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:
        gone()
    except (AttributeError, OSError):
        fd = None

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while True:
                time.sleep(1.0)
                try:
                    os.kill(owner, 0)
                except (ProcessLookupError, PermissionError):  # gone, or its pid is another user's now
                    break
        gone()

    threading.Thread(target=watch, name="ldptel-owner-watch", daemon=True).start()


class HelperPool:
    """``processes`` − 1 helper processes (``forkserver``: no copy of the caller's threads or
    keys), started at first use and stopped by ``close`` or at exit; the calling process does one
    share of the work itself. ``processes``: a setting as ``processes_for`` reads it."""

    def __init__(self, processes: int = 0) -> None:
        self.processes = processes_for(processes)
        self._pool: ProcessPoolExecutor | None = None
        self._atexit = False

    def started(self) -> ProcessPoolExecutor:
        """The pool, started if it is not running."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.processes - 1,
                                             mp_context=multiprocessing.get_context("forkserver"),
                                             initializer=exit_with, initargs=(os.getpid(),))
            if not self._atexit:
                atexit.register(self.close)
                self._atexit = True
        return self._pool

    def close(self) -> None:
        """Stop the pool's processes (a later large job starts a new pool)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
