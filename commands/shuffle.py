"""``ldptel shuffle``: one shuffler until SIGTERM/SIGINT, or ``--once``."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

import redis as redis_lib

from ldptel.campaigns.config import load_config
from ldptel.commands.connect import connect_cli, redis_url_of
from ldptel.logs import redact_url
from ldptel.shuffler.runners import ROLES, SOCKET_TIMEOUT_S
from ldptel.shuffler.worker import Shuffler

log = logging.getLogger("ldptel.shuffler")


def run_shuffle(args: argparse.Namespace) -> int:
    """``ldptel shuffle``: one shuffler until SIGTERM/SIGINT (it stops after the current step,
    exit 0; what it held stays in ingress); ``--once`` drains the ingress streams (every held
    report released whatever the release rules say), logs what it did, exits 0."""
    config = load_config(args.config)
    if not config.shuffler.enabled:
        log.warning("[shuffler] enabled = false in %s: the collector writes to the analysis streams; "
                    "shuffling only what is left in ingress", args.config)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    clients = connect_cli(args, log, ROLES, socket_timeout=SOCKET_TIMEOUT_S)
    if isinstance(clients, int):
        return clients
    shuffler = Shuffler(config, clients["shuffler"], registry_r=clients["reader"])
    if not args.once:
        log.info("shuffler %s on %s (poll %d ms, batches of %d reports)", shuffler.owner,
                 redact_url(redis_url_of(args)), config.shuffler.poll_ms, config.shuffler.batch_reports)
    try:
        stats = shuffler.run(once=args.once, stop=stop)
    except redis_lib.RedisError as exc:
        log.error("redis error: %s", exc)
        return 1
    log.info("shuffled %s", stats.line(), extra={"releases": stats.releases,
                                                  "reports": stats.ingress_reports,
                                                  "refused": stats.refused})
    return 0
