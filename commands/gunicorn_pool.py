"""The collector under gunicorn (``ldptel serve --server gunicorn``, the reader pool, the access
log): a ``gthread`` worker per process, ``THREADS`` threads each, the app built in each worker after
the fork (no shared Redis connections)."""

from __future__ import annotations

from typing import Any

from gunicorn.app.base import BaseApplication

from ldptel.campaigns.config import Config
from ldptel.commands.gunicorn_logging import gunicorn_log_options

WORKER_CLASS = "gthread"  # keep-alive connections; threads per worker below
THREADS = 4


class CollectorApplication(BaseApplication):
    """gunicorn application serving ``create_app(config, redis_url)`` (``reader``: only the
    reader pool's blueprints, ``app.READ_BLUEPRINT_MODULES``); the app is built in each worker
    after the fork (no shared Redis connections)."""

    def __init__(self, config: Config, redis_url: str, options: dict[str, Any],
                 supervised_aggregator: bool = False, reader: bool = False) -> None:
        self.config, self.redis_url, self.options = config, redis_url, options
        self.supervised_aggregator, self.reader = supervised_aggregator, reader
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self):
        from ldptel.server.app import READ_BLUEPRINT_MODULES, create_app

        # logging: set up by the CLI (ldptel.logs)
        return create_app(self.config, self.redis_url, supervised_aggregator=self.supervised_aggregator,
                          modules=READ_BLUEPRINT_MODULES if self.reader else None)


def gunicorn_options(host: str, port: int, workers: int, access_log: bool = False,
                     access_log_addresses: bool = False, proc_name: str = "ldptel-serve") -> dict[str, Any]:
    return {
        "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "workers": workers,
        "worker_class": WORKER_CLASS,
        "threads": THREADS,
        "keepalive": 30,
        "timeout": 60,
        "graceful_timeout": 10,
        **gunicorn_log_options(access_log, access_log_addresses),
        "proc_name": proc_name,
        "control_socket_disable": True,  # one fixed path per user would clash between instances
        "child_exit": worker_exited,
    }


def worker_exited(server: Any, worker: Any) -> None:
    """gunicorn's ``child_exit`` hook: drop the dead worker's live gauges."""
    from ldptel.ops import prom

    prom.mark_dead(worker.pid)
