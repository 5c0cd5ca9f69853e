"""``ldptel serve --config FILE [--redis-url URL] [--host H] [--port P] [--workers N]``.

Loads and validates the config (a bad one exits 2 with a message naming the key, via the CLI),
picks Redis — ``--redis-url``, else ``$REDIS_URL``, else an embedded ``redis-server`` whose URL is
printed, with its data (AOF) under ``$LDPTEL_DATA_DIR`` (default ``~/.local/share/ldptel``) in a
directory per config file — and runs the collector app under gunicorn with ``--workers`` worker
processes bound to ``--host`` (127.0.0.1 by default). With an embedded Redis an aggregator runs
beside the collector (``aggregator.runners.start_beside_collector``, started before gunicorn
forks, so the forks copy no running thread). Ctrl-C / SIGTERM stop everything cleanly.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

from ldptel.aggregator.runners import start_beside_collector
from ldptel.config import Config, load_config
from ldptel.server.gunicorn_logging import gunicorn_log_options

WORKER_CLASS = "gthread"  # keep-alive connections; threads per worker below
THREADS = 4


class CollectorApplication(BaseApplication):
    """gunicorn application serving ``create_app(config, redis_url)``; the app is built in each
    worker after the fork (no shared Redis connections)."""

    def __init__(self, config: Config, redis_url: str, options: dict[str, Any]) -> None:
        self.config, self.redis_url, self.options = config, redis_url, options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self):
        from ldptel.server.app import create_app

        return create_app(self.config, self.redis_url)  # logging: set up by the CLI (ldptel.logs)


def gunicorn_options(host: str, port: int, workers: int, access_log: bool = False,
                     access_log_addresses: bool = False) -> dict[str, Any]:
    return {
        "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "workers": workers,
        "worker_class": WORKER_CLASS,
        "threads": THREADS,
        "keepalive": 30,
        "timeout": 60,
        "graceful_timeout": 10,
        **gunicorn_log_options(access_log, access_log_addresses),
        "proc_name": "ldptel-serve",
        "control_socket_disable": True,  # one fixed path per user would clash between instances
    }


def default_data_dir(config_path: str | os.PathLike | None) -> Path:
    """``$LDPTEL_DATA_DIR`` or ``~/.local/share/ldptel``, plus ``redis-<config stem>-<hash>``, so a
    restarted ``ldptel serve`` of the same config finds its data again."""
    base = Path(os.environ.get("LDPTEL_DATA_DIR") or Path.home() / ".local" / "share" / "ldptel")
    cfg = Path(config_path).resolve() if config_path else Path("ldptel")
    digest = hashlib.sha256(str(cfg).encode()).hexdigest()[:10]
    return base / f"redis-{cfg.stem}-{digest}"


def run_serve(args: argparse.Namespace) -> int:
    """Entry point of ``ldptel serve``; returns the exit status."""
    config = load_config(args.config)
    if args.workers < 1:
        print("ldptel serve: --workers must be at least 1", file=sys.stderr)
        return 2
    redis_url = args.redis_url or os.environ.get("REDIS_URL")
    embedded = None
    aggregator = None
    try:
        if not redis_url:
            from ldptel.redis_server import EmbeddedRedis

            embedded = EmbeddedRedis(data_dir=default_data_dir(args.config)).start()
            redis_url = embedded.url
            print(f"ldptel: embedded Redis at {redis_url} (data in {embedded.data_dir})", flush=True)
            aggregator = start_beside_collector(config, redis_url)
        print(f"ldptel: collector on http://{args.host}:{args.port} "
              f"({args.workers} workers, {len(config.campaigns)} campaigns)", flush=True)
        try:
            options = gunicorn_options(args.host, args.port, args.workers,
                                       args.access_log, args.access_log_addresses)
            CollectorApplication(config, redis_url, options).run()
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return 0
    finally:
        if aggregator is not None:
            aggregator.stop()
        if embedded is not None:
            embedded.stop()
