"""Ways to run the aggregator worker: the ``ldptel aggregate`` CLI entry, a worker in a daemon
thread (``ldptel demo``), a worker in a child process (``ldptel serve``, which supervises it)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import redis as redis_lib

from ldptel import process
from ldptel.aggregator.errors import StateMismatch
from ldptel.aggregator.worker import Worker
from ldptel.config import Config, load_config
from ldptel.credentials import CredentialsError
from ldptel.logs import redact_url
from ldptel.redis_client import AnyRedis, connect_roles

log = logging.getLogger("ldptel.aggregator")


ROLES = ("aggregator", "reader")  # ``ldptel.acl``: the worker's user, and the registry's reads


def connect_cli(args: argparse.Namespace, logger: logging.Logger, roles: tuple[str, ...],
                socket_timeout: float) -> dict[str, AnyRedis] | int:
    """The Redis clients of a worker command (``--redis-url``, else ``$REDIS_URL``), one per
    role (``redis_client.connect_roles``), or, logged, its exit status: 2 without a URL, 1 if it
    cannot connect (or its credentials file does not fit the URL)."""
    url = args.redis_url or os.environ.get("REDIS_URL")
    if not url:
        logger.error("no Redis: pass --redis-url or set REDIS_URL (the embedded Redis runs with "
                     "`ldptel serve`)")
        return 2
    try:
        return connect_roles(url, roles, socket_timeout=socket_timeout)
    except (redis_lib.RedisError, redis_lib.RedisClusterException, CredentialsError) as exc:
        logger.error("cannot connect to %s: %s", redact_url(url), exc)
        return 1


def run_aggregate(args: argparse.Namespace) -> int:
    """``ldptel aggregate``: one worker; ``--once`` drains, logs what it did, exits 0. Every line
    goes through the ``ldptel.aggregator`` logger (``ldptel.logs``: stderr, text or JSON)."""
    config = load_config(args.config)
    clients = connect_cli(args, log, ROLES, socket_timeout=config.aggregator.block_ms / 1000 + 60)
    if isinstance(clients, int):
        return clients
    url = args.redis_url or os.environ.get("REDIS_URL", "")
    worker = Worker(config, clients["aggregator"], registry_r=clients["reader"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if not args.once:
        log.info("consumer %s on %d stream(s) of %s", worker.consumer, len(worker.slots), redact_url(url),
                 extra={"consumer": worker.consumer})
    try:
        stats = worker.run(once=args.once, stop=stop, progress=True)
    except StateMismatch as exc:
        log.error("%s", exc)
        return 2
    except redis_lib.RedisError as exc:
        log.error("redis error: %s", exc)
        return 1
    log.info("drained %s", stats.line(), extra={"entries": stats.entries, "reports": stats.reports,
                                                 "rejected": stats.rejected})
    return 0


class BackgroundAggregator:
    """A worker in a daemon thread (``ldptel serve``/``demo`` run one beside the collector).
    ``stop()`` finishes the current commit and joins."""

    thread_name = "ldptel-aggregator"

    def __init__(self, config: Config, redis_url: str, log: Callable[[str], None] | None = None) -> None:
        self.worker: Any = self.build(config, redis_url, log)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self.error: BaseException | None = None

    @staticmethod
    def build(config: Config, redis_url: str, log: Callable[[str], None] | None) -> Any:
        """The worker the thread runs (``run(stop=…)``, ``warn``): here an aggregator ``Worker``."""
        clients = connect_roles(redis_url, ROLES, socket_timeout=config.aggregator.block_ms / 1000 + 60)
        return Worker(config, clients["aggregator"], log=log, registry_r=clients["reader"])

    def _run(self) -> None:
        try:
            self.worker.run(stop=self._stop)
        except BaseException as exc:  # noqa: BLE001 - surfaced through .error
            self.error = exc
            self.worker.warn(f"{self.thread_name}: stopped: {exc!r}")

    def start(self) -> BackgroundAggregator:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()


class AggregatorProcess:
    """``ldptel aggregate`` as a child process (what ``ldptel serve`` runs, and restarts, beside
    gunicorn), in a session of its own: only its parent stops it (a Ctrl-C reaches the parent,
    which stops its children in order), and SIGTERM when its parent dies (``ldptel.process``; so
    create it from a thread-free process). ``stop()`` sends SIGTERM — the worker finishes its current
    commit — and waits."""

    command = "aggregate"  # the ``ldptel`` subcommand (``ShufflerProcess``: ``shuffle``)

    def __init__(self, config_path: str, redis_url: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "ldptel.cli", self.command, "--config",
                                      str(config_path)],  # the URL in the environment, not in `ps`
                                     env={**os.environ, "REDIS_URL": redis_url}, start_new_session=True,
                                     preexec_fn=process.die_with_parent)

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def is_alive(self) -> bool:
        return self.proc.poll() is None

