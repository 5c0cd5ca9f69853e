"""Start the embedded Redis for ``loadtest/run.sh`` — one server, or with ``--cluster N`` a Redis
Cluster of N masters — on loopback ports, write its URL to ``--url-file``, and keep it running
until SIGTERM/SIGINT, then stop it (SHUTDOWN, which flushes the AOF).

SIGUSR1 makes an outage: the server (on a cluster, its first master) is shut down gracefully,
kept down ``--outage-seconds`` and started again on the same port and data directory.

    python loadtest/redis_up.py --data DIR --url-file FILE [--cluster 3] [--outage-seconds 2]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from ldptel.store.redis_server import EmbeddedRedis, EmbeddedRedisCluster


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="data directory (created)")
    ap.add_argument("--url-file", required=True, help="file to write the Redis URL to")
    ap.add_argument("--cluster", type=int, default=0, help="masters of a Redis Cluster (0: one server)")
    ap.add_argument("--outage-seconds", type=float, default=2.0, help="downtime on SIGUSR1")
    args = ap.parse_args()
    stop = threading.Event()
    outage = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: outage.set())
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    data = Path(args.data)
    server = (EmbeddedRedisCluster(masters=args.cluster, data_dir=data) if args.cluster
              else EmbeddedRedis(data_dir=data))
    server.start()
    try:
        url_file = Path(args.url_file)
        url_file.with_suffix(".tmp").write_text(server.url + "\n")
        url_file.with_suffix(".tmp").replace(url_file)
        print(f"redis_up: {server.url}", flush=True)
        while not stop.wait(0.1):
            if outage.is_set():
                outage.clear()
                node = server.nodes[0] if isinstance(server, EmbeddedRedisCluster) else server
                node.stop()
                print(f"redis_up: {node.url} stopped for {args.outage_seconds:g} s", flush=True)
                stop.wait(args.outage_seconds)
                node.start()
                print(f"redis_up: {node.url} back", flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
