"""Running a kernel over chunks of its input on a thread pool (the kernels release the GIL).

``threads()``: ``LDPTEL_KERNEL_THREADS`` if set, else the cores this process may run on;
``set_threads(n)`` changes it at run time (the benchmark's single-thread ratios). A chunk never
has fewer than a kernel's ``min_chunk`` units of work, so small batches run inline on the calling
thread with no hand-off.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_threads: int | None = None
_pool: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, workers, pool)


def threads() -> int:
    """Threads a kernel may use (≥ 1)."""
    if _threads is not None:
        return _threads
    env = os.environ.get("LDPTEL_KERNEL_THREADS", "").strip()
    if env:
        return max(1, int(env))
    return max(1, len(os.sched_getaffinity(0)))


def set_threads(n: int | None) -> None:
    """Use ``n`` threads from now on (None: back to the default)."""
    global _threads
    _threads = None if n is None else max(1, int(n))


def chunks(n: int, units_per_item: float, min_chunk: float) -> list[tuple[int, int]]:
    """[lo, hi) bounds splitting ``n`` items into at most ``threads()`` chunks of at least
    ``min_chunk`` units each (one chunk when the whole is smaller)."""
    k = max(1, min(threads(), int(n * units_per_item // max(min_chunk, 1)), n))
    edges = [n * i // k for i in range(k + 1)]
    return [(edges[i], edges[i + 1]) for i in range(k)]


def pool() -> ThreadPoolExecutor:
    """The process's worker pool (made anew after a fork or a change of ``threads()``)."""
    global _pool
    with _lock:
        want = threads()
        if _pool is None or _pool[0] != os.getpid() or _pool[1] != want:
            if _pool is not None and _pool[0] == os.getpid():
                _pool[2].shutdown(wait=False)
            _pool = (os.getpid(), want, ThreadPoolExecutor(want, thread_name_prefix="ldptel-kernel"))
        return _pool[2]


def run(fn: Callable[[int, int], T], bounds: list[tuple[int, int]]) -> list[T]:
    """``fn(lo, hi)`` for every chunk: inline for one, else on the pool (results in order)."""
    if len(bounds) == 1:
        return [fn(*bounds[0])]
    return list(pool().map(lambda b: fn(*b), bounds))
