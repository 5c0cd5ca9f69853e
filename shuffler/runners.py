"""Ways to run the shuffler: the ``ldptel shuffle`` CLI entry, and a shuffler in a child process
(``ldptel serve``, which supervises it beside the aggregator)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import redis as redis_lib

from ldptel.aggregator.runners import AggregatorProcess, BackgroundAggregator, connect_cli
from ldptel.config import Config, load_config
from ldptel.logs import redact_url
from ldptel.redis_client import connect_roles
from ldptel.shuffler.worker import Shuffler

log = logging.getLogger("ldptel.shuffler")
ROLES = ("shuffler", "reader")  # ``ldptel.acl``: the shuffler's user, and the registry's reads


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
    clients = connect_cli(args, log, ROLES, socket_timeout=30.0)
    if isinstance(clients, int):
        return clients
    url = args.redis_url or os.environ.get("REDIS_URL", "")
    shuffler = Shuffler(config, clients["shuffler"], registry_r=clients["reader"])
    if not args.once:
        log.info("shuffler %s on %s (poll %d ms, batches of %d reports)", shuffler.owner,
                 redact_url(url), config.shuffler.poll_ms, config.shuffler.batch_reports)
    try:
        stats = shuffler.run(once=args.once, stop=stop)
    except redis_lib.RedisError as exc:
        log.error("redis error: %s", exc)
        return 1
    log.info("shuffled %s", stats.line(), extra={"releases": stats.releases,
                                                  "reports": stats.ingress_reports,
                                                  "refused": stats.refused})
    return 0


class BackgroundShuffler(BackgroundAggregator):
    """A shuffler in a daemon thread (``ldptel demo`` runs one beside the collector);
    ``stop()`` finishes the current step and joins."""

    thread_name = "ldptel-shuffler"

    @staticmethod
    def build(config: Config, redis_url: str, log: Callable[[str], None] | None) -> Any:
        clients = connect_roles(redis_url, ROLES, socket_timeout=30.0)
        return Shuffler(config, clients["shuffler"], log=log, registry_r=clients["reader"])


class ShufflerProcess(AggregatorProcess):
    """``ldptel shuffle`` as a child process of ``ldptel serve`` (restarted by it), started and
    stopped as ``AggregatorProcess`` is: SIGTERM makes it finish its current step."""

    command = "shuffle"
