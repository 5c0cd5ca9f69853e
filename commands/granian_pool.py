"""The collector served by granian (``ldptel serve --server granian``, the default).

granian (a Rust HTTP server with a WSGI interface) serves the same Flask app as gunicorn, with
less of the CPU per request: on this project's 2-core machine, 0.28 ms against 0.46 ms for a
``POST /v1/reports`` of 100 reports (``docs/performance.md``), the app's own work being the same.
gunicorn stays available (``--server gunicorn``) and serves the reader pool and the collector with
``--access-log`` (its access-log format, which carries the response size, is the documented one).

``run(...)`` runs in the child ``serve`` forks for the pool (it takes over SIGTERM/SIGINT and
stops its workers): ``--workers`` processes, each with ``THREADS`` threads for the app (more than
gunicorn's ``gthread`` count: a thread waiting for a body costs no CPU), each building the app
after it starts (``collector``, from the environment this function sets: the config file, the
Redis URL), each dying with the pool's process and started again when it dies (``serve``'s
supervisor removes a dead worker's live gauges: ``prom.mark_dead_gone``). Its log lines go
through ``ldptel.logs``'s formatter, on stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ldptel import logs

# app threads per worker process. A thread waiting for a request body holds no CPU and no GIL, so
# there are many more than cores: a few stalled bodies (a client holding the ingest token can send
# a head and stall the body) leave the others serving; ``server.bodies.BodyGuard`` lets one address
# hold at most ``[server] max_unfinished_bodies_per_address`` of them (issue 34, item 1).
THREADS = 32
ENV_CONFIG = "LDPTEL_SERVE_CONFIG"
ENV_REDIS = "LDPTEL_SERVE_REDIS_URL"
ENV_SUPERVISED = "LDPTEL_SERVE_SUPERVISED"


def available() -> bool:
    try:
        import granian  # noqa: F401
    except ImportError:
        return False
    return True


def choose(server: str | None, access_log: bool) -> str:
    """The collector pool's server: ``server`` (``--server``; default granian when installed, the
    server extra's), gunicorn with the access log (its format, which carries the response size,
    is the documented one)."""
    chosen = server or ("granian" if available() else "gunicorn")
    if chosen == "granian" and access_log:
        print("ldptel: --access-log: the collector runs under gunicorn (whose access log carries the "
              "response size)", file=sys.stderr, flush=True)
        chosen = "gunicorn"
    if chosen == "granian" and not available():
        print("ldptel: granian is not installed; the collector runs under gunicorn", file=sys.stderr,
              flush=True)
        chosen = "gunicorn"
    return chosen


def collector() -> Any:
    """The collector app of one granian worker (its factory)."""
    from ldptel.campaigns.config import load_config
    from ldptel.process import die_with_parent
    from ldptel.server.app import create_app

    die_with_parent()  # the pool's process dying takes its workers with it
    logs.configure(logs.current_format(), logs.current_level())
    return create_app(load_config(os.environ[ENV_CONFIG]), os.environ[ENV_REDIS],
                      supervised_aggregator=os.environ.get(ENV_SUPERVISED) == "1")


def log_config() -> dict[str, Any]:
    """granian's loggers through ``ldptel.logs``'s formatter, on stderr."""
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"ldptel": {"()": "ldptel.logs.formatter", "fmt": logs.current_format()}},
            "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "ldptel",
                                    "stream": "ext://sys.stderr"}},
            "loggers": {"_granian": {"handlers": ["stderr"], "propagate": False},
                        "granian.access": {"handlers": ["stderr"], "propagate": False}}}


def run(config_path: str, redis_url: str, host: str, port: int, workers: int, supervised: bool) -> None:
    """Serve the collector on ``host:port`` until SIGTERM/SIGINT."""
    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels

    os.environ.update({ENV_CONFIG: str(config_path), ENV_REDIS: redis_url,
                       ENV_SUPERVISED: "1" if supervised else "0"})
    Granian("ldptel.commands.granian_pool:collector", address=host, port=port, interface=Interfaces.WSGI,
            factory=True, workers=workers, blocking_threads=THREADS,
            websockets=False,  # WSGI has none: else granian logs "Websockets are not supported"
            log_level=LogLevels(logs.current_level()), log_dictconfig=log_config(),
            respawn_failed_workers=True, respawn_interval=0.5, workers_kill_timeout=10).serve()


__all__ = ["THREADS", "available", "choose", "collector", "run"]
