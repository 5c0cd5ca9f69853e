"""Start the embedded Redis for ``loadtest/run.sh`` — one server, or with ``--cluster N`` a Redis
Cluster of N masters — on loopback ports, write its URL to ``--url-file``, and keep it running
until SIGTERM/SIGINT, then stop it (SHUTDOWN, which flushes the AOF).

    python loadtest/redis_up.py --data DIR --url-file FILE [--cluster 3]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from ldptel.redis_server import EmbeddedRedis, EmbeddedRedisCluster


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="data directory (created)")
    ap.add_argument("--url-file", required=True, help="file to write the Redis URL to")
    ap.add_argument("--cluster", type=int, default=0, help="masters of a Redis Cluster (0: one server)")
    args = ap.parse_args()
    stop = threading.Event()
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
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
