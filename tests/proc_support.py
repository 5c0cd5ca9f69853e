"""Processes as Linux ``/proc`` shows them: a process's children and descendants (with their
command lines), its nice value, whether it is alive."""

from __future__ import annotations

from pathlib import Path


def _stat(entry: Path) -> list[str]:
    """The fields of ``entry/stat`` after "pid (comm)": state, ppid, …"""
    return (entry / "stat").read_text().rsplit(")", 1)[1].split()


def children(pid: int) -> dict[int, list[bytes]]:
    """The child processes of ``pid`` and their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = _stat(entry)
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if int(stat[1]) == pid:
            found[int(entry.name)] = cmd
    return found


def descendants(pid: int) -> dict[int, list[bytes]]:
    """Every descendant of ``pid`` and its command line."""
    found = children(pid)
    for child in list(found):
        found.update(descendants(child))
    return found


def nice_of(pid: int) -> int:
    return int(_stat(Path("/proc") / str(pid))[16])


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        return _stat(Path("/proc") / str(pid))[0] != "Z"
    except (OSError, IndexError):
        return False
