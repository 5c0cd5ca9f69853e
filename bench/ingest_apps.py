"""The two collectors of the ingest rows of ``bench/table.py`` (``bench/rows_ingest.py``), each
served the way ``ldptel serve`` serves the collector (``commands.gunicorn_pool.gunicorn_options``, one
worker process) so that the server's own cost is the same on both sides:

- ``ldptel``: ``server.app.create_app`` on ``--config`` (the real collector, every blueprint);
- ``floor``: a minimal Flask app whose ``POST /v1/reports`` does the same parse
  (``ReportBatch.FromString``) and one ``XADD`` of the body, answering 202 with the count.

    python bench/ingest_apps.py {ldptel,floor} --config FILE --redis-url URL --port P [--server granian]

``--server granian`` serves the same app with granian's WSGI interface instead (one worker; the
floor with 4 blocking threads, the gthread worker's, the collector with ``ldptel serve``'s
``granian_pool.THREADS``), to measure whether another server wins.
"""

from __future__ import annotations

import argparse

import redis
from flask import Flask, jsonify, request
from gunicorn.app.base import BaseApplication

try:
    from ldptel.commands.gunicorn_pool import gunicorn_options
except ImportError:  # a checkout before the pool modules (bench of an older version)
    from ldptel.commands.serve import gunicorn_options  # type: ignore[attr-defined,no-redef]
from ldptel.campaigns.config import load_config
from ldptel.proto import ReportBatch

FLOOR_STREAM = "{bench-floor}:ingress"


def floor_app(redis_url: str) -> Flask:
    app = Flask("floor")
    client = redis.Redis.from_url(redis_url)

    @app.post("/v1/reports")
    def post_reports():
        body = request.get_data()
        batch = ReportBatch.FromString(body)
        client.xadd(FLOOR_STREAM, {"batch": body, "window": 0, "count": batch.count})
        return jsonify({"accepted": batch.count, "duplicate": False}), 202

    return app


class Served(BaseApplication):
    def __init__(self, build, options: dict) -> None:
        self.build, self.options = build, options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self):
        return self.build()


def ldptel_factory():
    """The real collector, for granian (``--factory``): config and Redis from the environment."""
    import os

    from ldptel.server.app import create_app

    return create_app(load_config(os.environ["BENCH_CONFIG"]), os.environ["BENCH_REDIS_URL"])


def floor_factory():
    import os

    return floor_app(os.environ["BENCH_REDIS_URL"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("app", choices=["ldptel", "floor"])
    ap.add_argument("--config", required=True)
    ap.add_argument("--redis-url", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--server", choices=["gunicorn", "granian"], default="gunicorn")
    args = ap.parse_args()
    if args.server == "granian":
        import os
        import sys
        from pathlib import Path

        from granian import Granian

        from ldptel.commands import granian_pool

        os.environ.update(BENCH_CONFIG=args.config, BENCH_REDIS_URL=args.redis_url)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        Granian(f"ingest_apps:{args.app}_factory", address="127.0.0.1", port=args.port, interface="wsgi",
                factory=True, workers=1, log_enabled=False,
                blocking_threads=granian_pool.THREADS if args.app == "ldptel" else 4).serve()
        return
    options = gunicorn_options("127.0.0.1", args.port, 1)
    if args.app == "floor":
        Served(lambda: floor_app(args.redis_url), options).run()
        return
    from ldptel.server.app import create_app

    config = load_config(args.config)
    Served(lambda: create_app(config, args.redis_url), options).run()


if __name__ == "__main__":
    main()
