"""How the kernels are compiled: ``numba.njit`` with ``nogil`` (a kernel releases the GIL) and an
on-disk cache, so a process compiles a kernel once per machine and source change, and a cold
aggregator loads it in milliseconds.

Cache directory: ``NUMBA_CACHE_DIR`` if set (the systemd units set it to their
``CacheDirectory``), else ``$XDG_CACHE_HOME/ldptel/numba`` (``~/.cache/ldptel/numba``). Never a
shared temporary directory: numba's cache entries are pickles, so the directory must be writable
by the service's user alone. If none can be created the kernels compile on first use in every
process (about a second each) and nothing is written.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cache_dir() -> str | None:
    """The cache directory (created if missing), or None when no private directory is writable."""
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given:
        return given
    try:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "ldptel" / "numba"
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except (OSError, RuntimeError):  # RuntimeError: no home directory to be found
        return None
    return str(path) if os.access(path, os.W_OK) else None


CACHE_DIR = cache_dir()
if CACHE_DIR:
    os.environ["NUMBA_CACHE_DIR"] = CACHE_DIR  # read by numba's config when it is first imported

import numba  # noqa: E402  (after NUMBA_CACHE_DIR is set)

if CACHE_DIR:
    numba.config.CACHE_DIR = CACHE_DIR  # type: ignore[attr-defined]  # numba imported before us


def kernel(fn: Callable[..., Any]) -> Any:
    """``numba.njit(nogil=True, cache=...)`` of ``fn``, compiled lazily on its first call."""
    return numba.njit(nogil=True, cache=CACHE_DIR is not None)(fn)
