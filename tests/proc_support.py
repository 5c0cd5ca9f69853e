"""Processes as Linux ``/proc`` shows them: a process's children and descendants (with their
command lines), its nice value, whether it is alive."""

from __future__ import annotations

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
