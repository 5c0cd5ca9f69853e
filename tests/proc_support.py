"""Processes as Linux ``/proc`` shows them: a process's children and descendants (with their
command lines), its nice value, whether it is alive; what a block of code costs this process
(``budget``: wall time and peak RSS growth)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _stat(entry: Path) -> list[str]:
    """The fields of ``entry/stat`` after "pid (comm)": state, ppid, …"""
    return (entry / "stat").read_text().rsplit(")", 1)[1].split()


def _processes() -> dict[int, tuple[int, list[bytes]]]:
    """Every process: pid → (parent pid, command line), from one pass over ``/proc``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            found[int(entry.name)] = (int(_stat(entry)[1]), (entry / "cmdline").read_bytes().split(b"\0"))
        except (OSError, IndexError):
            continue
    return found


def children(pid: int) -> dict[int, list[bytes]]:
    """The child processes of ``pid`` and their command lines."""
    return {child: cmd for child, (parent, cmd) in _processes().items() if parent == pid}


def descendants(pid: int) -> dict[int, list[bytes]]:
    """Every descendant of ``pid`` and its command line."""
    procs, found, todo = _processes(), {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, cmd) in procs.items():
            if ppid == parent:
                found[child] = cmd
                todo.append(child)
    return found


def nice_of(pid: int) -> int:
    return int(_stat(Path("/proc") / str(pid))[16])


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        return _stat(Path("/proc") / str(pid))[0] != "Z"
    except (OSError, IndexError):
        return False


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


@contextmanager
def budget() -> Iterator[dict[str, float]]:
    """The wall time and the peak growth of this process's RSS (sampled every 2 ms) of the block
    (an app served in this process, ``HttpStack``, shows what a request costs here)."""
    out: dict[str, float] = {}
    base, peak, done = _rss_mb(), [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mb() - base)
            time.sleep(0.002)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.monotonic()
    try:
        yield out
    finally:
        out["seconds"] = time.monotonic() - start
        done.set()
        thread.join()
        out["rss_growth_mb"] = max(peak[0], _rss_mb() - base)
        print(f"budget: {out['seconds']:.3f} s, peak RSS growth {out['rss_growth_mb']:.1f} MB")
