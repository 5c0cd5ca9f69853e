"""Plans (``ldptel.privacy.plan``) kept on disk, so that a plan is computed once per machine, not once
per process: a shuffled campaign of the config file is planned whenever the file is parsed (every
collector worker, the shuffler, the aggregator) and a new registry version when it is created (a
stored version is never planned again: its plan is pinned in its registry entry,
``ldptel.privacy.modes.Pinned``); a cold plan takes 0.05–0.9 s (``bench/privacy_plan.py``: GRR at d
= 1,024, n = 10⁶ about 0.1 s) on top of the import of the privacy math (scipy, about a second),
which a hit does not pay. ``ldptel.privacy.plan`` answers from this process's memory, then the file,
then computes (``planner.compute_plan``) and stores. ``lookup`` / ``store`` keep other documents of
the privacy math in the same file (``ldptel.privacy.device_composition``: a device's cumulative ε
across campaigns), ``computing`` keeps two processes from computing one at once.

The file: ``$LDPTEL_PLAN_CACHE`` or ``$XDG_CACHE_HOME/ldptel/privacy-plans.json`` (default
``~/.cache``), one JSON object {key: plan}, key = the plan's arguments and ``VERSION``, the
planner's version (bump it when the planner's math changes: entries of another version are ignored;
a version's pinned plan records the version that made it, ``ldptel.privacy.modes.Pinned``), written
atomically (temporary file and rename); at most ``MAX_ENTRIES`` kept. A file that cannot be read or
written is only a missing cache: plans are then computed every time.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

VERSION = 2
MAX_ENTRIES = 2048
_memory: dict[str, Any] = {}
_lock = threading.Lock()


def cache_path() -> Path:
    explicit = os.environ.get("LDPTEL_PLAN_CACHE")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ldptel" / "privacy-plans.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


class CachedPlan:
    """A stored plan: the fields of ``planner.PrivacyPlan`` as attributes, and ``as_dict``
    (a hit imports nothing of the privacy math, whose import alone takes about a second)."""

    # the fields read by name (``ldptel.campaigns.modes``, ``ldptel privacy plan``); the rest by as_dict
    local_epsilon: float | None
    fake_rate: float | None
    fakes_per_bucket: float | None
    bound: str
    std_error: float | None

    def __init__(self, doc: dict[str, Any]) -> None:
        self._doc = dict(doc)
        self.__dict__.update(doc)

    def as_dict(self) -> dict[str, Any]:
        return dict(self._doc)


def lookup(key: str) -> dict[str, Any] | None:
    """The document stored under ``key`` (this process's memory, then the file), or None."""
    with _lock:
        hit = _memory.get(key)
    if hit is not None:
        return cast("dict[str, Any] | None", hit)
    stored = _read(cache_path()).get(key)
    if not isinstance(stored, dict):
        return None
    with _lock:
        _memory[key] = stored
    return stored


def store(key: str, doc: dict[str, Any]) -> None:
    """Keep ``doc`` under ``key`` in memory and in the file (atomically; at most ``MAX_ENTRIES``,
    the oldest dropped; a file that cannot be written is left as it is)."""
    path = cache_path()
    with _lock:
        _memory[key] = doc
        try:
            entries = _read(path)
            entries[key] = doc
            while len(entries) > MAX_ENTRIES:
                entries.pop(next(iter(entries)))
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".plans-")
            with os.fdopen(fd, "w") as fh:
                json.dump(entries, fh)
            os.replace(tmp, path)
        except OSError:
            pass


@contextmanager
def computing(key: str) -> Iterator[None]:
    """Held while one process computes what it will ``store`` (an exclusive ``flock`` on the cache
    file's ``.lock``, shared by every process of the machine): another process computing the
    same waits, then finds it with ``lookup``. Without a lock file (unwritable directory) nothing
    is held."""
    path = cache_path().with_suffix(".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a")  # closed below (the lock is held by the open file)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
    finally:
        fh.close()  # releases the lock


__all__ = ["MAX_ENTRIES", "VERSION", "CachedPlan", "cache_path", "computing", "lookup", "store"]
