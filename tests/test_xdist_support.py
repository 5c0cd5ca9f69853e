"""The suite under pytest-xdist (``make test``: two workers): what two worker processes share.

- ``browser_support.artifacts(name)``: a second process of the same run keeps the screenshots the
  first one wrote there; the next run starts from an empty directory;
- ``xdist_support.worker_url``: with ``REDIS_URL``, worker gwK uses the URL's database + K.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from xdist_support import worker_url

TESTS = Path(__file__).resolve().parent

SHOT = """
import sys
from browser_support import artifacts
path = artifacts("shots")
(path / sys.argv[1]).write_text("png")
print(sorted(p.name for p in path.iterdir() if not p.name.startswith(".")))
"""


def artifacts_in_process(tmp: Path, run: str, worker: str, name: str) -> str:
    env = {**os.environ, "LDPTEL_ARTIFACTS": str(tmp), "PYTEST_XDIST_TESTRUNUID": run,
           "PYTEST_XDIST_WORKER": worker, "PYTHONPATH": str(TESTS)}
    out = subprocess.run([sys.executable, "-c", SHOT, name], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_artifacts_are_emptied_once_per_run(tmp_path: Path) -> None:
    assert artifacts_in_process(tmp_path, "run-1", "gw0", "a.png") == "['a.png']"
    assert artifacts_in_process(tmp_path, "run-1", "gw1", "b.png") == "['a.png', 'b.png']"
    assert artifacts_in_process(tmp_path, "run-2", "gw0", "c.png") == "['c.png']"


@pytest.mark.parametrize(("url", "worker", "expected"), [
    ("redis://h:6379/0", "", "redis://h:6379/0"),
    ("redis://h:6379/0", "gw0", "redis://h:6379/0"),
    ("redis://h:6379/0", "gw1", "redis://h:6379/1"),
    ("redis://h:6379", "gw1", "redis://h:6379/1"),
    ("rediss://:pw@h:6380/3?ssl_cert_reqs=none", "gw2", "rediss://:pw@h:6380/5?ssl_cert_reqs=none"),
    ("unix:///run/redis.sock", "gw1", "unix:///run/redis.sock?db=1"),
    ("unix:///run/redis.sock?db=2", "gw1", "unix:///run/redis.sock?db=3"),
])
def test_each_worker_has_its_own_database(url: str, worker: str, expected: str) -> None:
    assert worker_url(url, worker) == expected
