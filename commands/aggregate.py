"""``ldptel aggregate``: one aggregator worker until SIGTERM, or ``--once``."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

import redis as redis_lib

from ldptel.aggregator.runners import ROLES, socket_timeout
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import load_config
from ldptel.commands.connect import connect_cli, redis_url_of
from ldptel.errors import StateMismatch
from ldptel.logs import redact_url

log = logging.getLogger("ldptel.aggregator")


def run_aggregate(args: argparse.Namespace) -> int:
    """``ldptel aggregate``: one worker; ``--once`` drains, logs what it did, exits 0. Every line
    goes through the ``ldptel.aggregator`` logger (``ldptel.logs``: stderr, text or JSON)."""
    config = load_config(args.config)
    clients = connect_cli(args, log, ROLES, socket_timeout=socket_timeout(config))
    if isinstance(clients, int):
        return clients
    worker = Worker(config, clients["aggregator"], registry_r=clients["reader"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if not args.once:
        log.info("consumer %s on %d stream(s) of %s", worker.consumer, len(worker.slots),
                 redact_url(redis_url_of(args)), extra={"consumer": worker.consumer})
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
