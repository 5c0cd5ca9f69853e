"""CPU seconds used by the load test's components, for the capacity model (Linux ``/proc``).

``run.sh`` lists the components in ``pids`` (``role pid`` per line: ``redis``, ``collector``,
``aggregator``); a role's CPU time is user + system time of that process and all its descendants
(the collector's workers, the Redis servers started by ``redis_up.py``), including children they have
reaped. Two snapshots around the run give each component's CPU seconds, so the capacity per core
follows from the reports handled per CPU-second — a measure that does not depend on how busy the
shared machine was.

    python loadtest/cpu.py PIDS_FILE OUT_JSON      # write a snapshot
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds incl. reaped children) of a live process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) "
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ppid, (utime + stime + cutime + cstime) / TICK


def snapshot(pids_file: str | os.PathLike) -> dict[str, float]:
    """CPU seconds per role (``{"t": wall clock, role: seconds}``)."""
    procs = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                procs[int(entry.name)] = st
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in procs.items():
        children[ppid].append(pid)
    out: dict[str, float] = defaultdict(float)
    for line in Path(pids_file).read_text().splitlines():
        if not line.strip():
            continue
        role, pid_s = line.split()
        stack = [int(pid_s)]
        while stack:
            pid = stack.pop()
            if pid in procs:
                out[role] += procs[pid][1]
                stack.extend(children.get(pid, []))
    out["t"] = time.time()
    return dict(out)


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(snapshot(sys.argv[1])))
