"""Run ``ldptel shuffle`` for ``loadtest/run.sh`` as a child that is restarted when it dies, and
with ``--kills N`` kill it with SIGKILL N times during the run (the fault test of issue 15).

Kill i is due ``(i + 1) · --spread / (N + 1)`` seconds after the start; it happens at the first
moment after that at which the current shuffler process has moved reports since it started (its
counters ``keys.shuffle_metrics_key`` grew: it holds its leases and works), after a further random
0–300 ms, so each kill lands in a working shuffler — between reads, while it permutes, or inside a
release. The next process starts at once (it waits for the dead one's leases to lapse). Each kill
is written to ``--events`` (JSON lines: seconds since start, pid, reports moved by that process,
ingress entries waiting). SIGTERM/SIGINT: SIGTERM to the child, wait for it, exit 0.

This process reaps its children, so its CPU time (``loadtest/cpu.py``, role ``shuffler``) includes
the killed processes'.

    python loadtest/shuffler_up.py --config FILE --redis-url URL --log FILE [--kills N --spread S]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import threading
import time

from ldptel import keys
from ldptel.campaigns.config import Config, load_config
from ldptel.store.redis_client import connect


def moved(r, config: Config) -> tuple[int, int]:
    """(reports written to the analysis streams by shufflers so far, ingress entries waiting)."""
    pairs = [(c.name, s) for c in config.campaigns for s in range(c.shards)]
    pipe = r.pipeline(transaction=False)
    for name, shard in pairs:
        pipe.hget(keys.shuffle_metrics_key(name, shard), keys.ANALYSIS_REPORTS)
        pipe.xlen(keys.ingress_key(name, shard))
    got = pipe.execute()
    return sum(int(x or 0) for x in got[0::2]), sum(int(x or 0) for x in got[1::2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--redis-url", required=True)
    ap.add_argument("--log", required=True, help="the shufflers' stderr (appended)")
    ap.add_argument("--kills", type=int, default=0, help="SIGKILL the shuffler this many times")
    ap.add_argument("--spread", type=float, default=60.0, help="seconds over which the kills are due")
    ap.add_argument("--events", default=None, help="JSON lines, one per kill")
    args = ap.parse_args()
    config = load_config(args.config)
    r = connect(args.redis_url, socket_timeout=30.0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cmd = [sys.executable, "-m", "ldptel.commands.cli", "shuffle", "--config", args.config,
           "--redis-url", args.redis_url]
    log = open(args.log, "ab")  # open for the whole run
    t0 = time.monotonic()
    kills = 0
    while not stop.is_set():
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        start_moved = moved(r, config)[0]
        while not stop.is_set() and child.poll() is None:
            stop.wait(0.1)
            due = kills < args.kills and time.monotonic() - t0 >= (kills + 1) * args.spread / (args.kills + 1)
            if not due:
                continue
            done, waiting = moved(r, config)
            if done == start_moved:
                continue  # not working yet (waiting for the dead one's leases)
            time.sleep(random.uniform(0, 0.3))
            child.send_signal(signal.SIGKILL)
            child.wait()
            kills += 1
            if args.events:
                with open(args.events, "a") as fh:
                    fh.write(json.dumps({"t": round(time.monotonic() - t0, 2), "pid": child.pid,
                                         "moved_reports": done - start_moved,
                                         "ingress_entries": waiting}) + "\n")
        if child.poll() is None:  # stopping
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        elif not stop.is_set() and child.returncode != -signal.SIGKILL:
            print(f"shuffler_up: ldptel shuffle exited ({child.returncode}); restarting", file=sys.stderr)
            stop.wait(0.5)
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
