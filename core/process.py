"""``die_with_parent``: a child process of ``ldptel serve`` (gunicorn, the aggregator, the
embedded Redis) gets SIGTERM when ``serve`` dies, even by SIGKILL, so that no orphan keeps the data
directory or a port (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing happens)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

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
