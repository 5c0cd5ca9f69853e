"""``process.HelperPool``'s helpers go when the process that started the pool is killed: before
``exit_with`` a SIGKILLed shuffler or aggregator left its fork server, helpers and resource tracker
running for good (seen after the load test's ten shuffler kills)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OWNER = """
import os, sys, time
from ldptel.process import HelperPool

if __name__ == "__main__":
    pool = HelperPool(3)
    assert sorted(pool.started().map(abs, [-1, -2, -3, -4])) == [1, 2, 3, 4]
    print("ready", flush=True)
    time.sleep(120)
"""


def _tree(root: int) -> set[int]:
    """The live (not zombie) descendants of ``root``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    out, stack = set(), [root]
    while stack:
        pid = stack.pop()
        kids = [c for c, p in parents.items() if p == pid]
        out.update(kids)
        stack.extend(kids)
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def test_helpers_exit_when_their_owner_is_killed(tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
        helpers = _tree(owner.pid)
        assert len(helpers) >= 3, helpers  # the fork server, its two helpers, the resource tracker
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        end = time.monotonic() + 15
        while time.monotonic() < end and any(_alive(p) for p in helpers):
            time.sleep(0.1)
        left = sorted(p for p in helpers if _alive(p))
        for pid in left:  # never leave them to the rest of the suite
            os.kill(pid, signal.SIGKILL)
        assert not left, f"helpers still running 15 s after their owner was killed: {left}"
    finally:
        if owner.poll() is None:
            owner.kill()
