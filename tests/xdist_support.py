"""What tests share across pytest-xdist workers (``make test`` runs ``pytest -n 2``).

- ``worker()``: this process's worker id (``gw0``, ``gw1``, …), ``""`` without xdist;
- ``run_id()``: one id for every process of this run (xdist's ``testrunuid``, else this process's);
- ``shared_lock(path)``: an exclusive ``fcntl.flock`` on ``path``, held by one process at a time
  (e.g. one-time builds into the working tree, a directory emptied once per run);
- ``worker_url(url, worker)``: ``REDIS_URL`` for one worker (its own database);
- ``HEAVY``/``heavy(nodeid)``: the tests the scheduler (``conftest.pytest_xdist_make_scheduler``)
  keeps together and starts first.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

_OWN_RUN = uuid.uuid4().hex


def worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "")


def run_id() -> str:
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or _OWN_RUN


@contextmanager
def shared_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``path`` (created if missing) across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def worker_url(url: str, worker: str) -> str:
    """``REDIS_URL`` for the xdist worker ``worker`` (``gw0``, ``gw1``, …; ``""`` without xdist):
    worker k uses database URL's + k, so that one worker's ``flushdb`` never empties another's
    keys (tests/conftest.py's ``pytest_configure`` checks first that each can be selected)."""
    k = int(worker.removeprefix("gw")) if worker.startswith("gw") else 0
    if k == 0:
        return url
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if "db" in query or parts.scheme == "unix":  # unix://path?db=N: the path is the socket's
        query["db"] = [str(int(query.get("db", ["0"])[0]) + k)]
        moved = parts._replace(query=urlencode(query, doseq=True))
    else:
        moved = parts._replace(path=f"/{int(parts.path.strip('/') or 0) + k}")
    out = urlunsplit(moved)
    return out.replace("unix:", "unix://", 1) if parts.scheme == "unix" and not parts.netloc else out


# The longest end-to-end, load and kill tests (a minute or more each, several processes; a module,
# or a test as ``module::name``): one unit of work for xdist (tests/conftest.py's scheduler), so
# two of them never run at once, and handed out first, so none is left for the end of the run.
# (Not ``xdist_group`` marks: with pytest 9.2, pytest-xdist 3.8's ``--dist loadgroup`` ignores them,
# pytest-dev/pytest-xdist#1386.) tests/test_packaging.py checks that each entry exists.
HEAVY = (
    "tests/test_tutorial.py",  # `make demo` in a fresh clone: 150-200 s
    "tests/test_loadtest.py",  # the load test and its shuffler kill test: ~120 s
    "tests/test_docs.py::test_every_block_runs_against_the_demo",  # 70-120 s
    "tests/test_amplification.py::test_grr_grid_sound_and_tight",  # CPU only: 47-260 s
    "tests/test_demo_serve.py",  # two demo runs (~60 s each), a serve stack counting within 30 s
    "tests/test_campaign_change_e2e.py",  # 10 s alone, 65 s beside a heavy test: waits of 60 s each
    "tests/test_one_release.py::test_one_window_of_1e5_devices_is_one_release",  # ~55 s
    "tests/test_shuffled_heavy_hitters.py::test_shuffled_heavy_hitters_end_to_end",  # ~55 s
)


def heavy(nodeid: str) -> bool:
    """Whether the test ``nodeid`` is one of ``HEAVY`` (a listed module's, or a listed test, any
    of its parameters)."""
    return any(nodeid == h or nodeid.startswith((h + "::", h + "[")) for h in HEAVY)
