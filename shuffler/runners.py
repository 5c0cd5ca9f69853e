"""Ways to run the shuffler: the ``ldptel shuffle`` CLI entry, and a shuffler in a child process
(``ldptel serve``, which supervises it beside the aggregator)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

import redis as redis_lib

from ldptel.aggregator.runners import AggregatorProcess
from ldptel.config import load_config
from ldptel.logs import redact_url
from ldptel.redis_client import connect
from ldptel.shuffler.worker import Shuffler

log = logging.getLogger("ldptel.shuffler")


def run_shuffle(args: argparse.Namespace) -> int:
    """``ldptel shuffle``: one shuffler until SIGTERM/SIGINT (it stops after the current step,
    exit 0; what it held stays in ingress); ``--once`` drains the ingress streams (every held
    report released whatever the release rules say), logs what it did, exits 0."""
    config = load_config(args.config)
    url = args.redis_url or os.environ.get("REDIS_URL")
    if not url:
        log.error("no Redis: pass --redis-url or set REDIS_URL (the embedded Redis runs with `ldptel serve`)")
        return 2
    if not config.shuffler.enabled:
        log.warning("[shuffler] enabled = false in %s: the collector writes to the analysis streams; "
                    "shuffling only what is left in ingress", args.config)
    try:
        # hook for least-privilege roles: connect(url, role="shuffler") once they exist
        r = connect(url, socket_timeout=30.0)
    except (redis_lib.RedisError, redis_lib.RedisClusterException) as exc:
        log.error("cannot connect to %s: %s", redact_url(url), exc)
        return 1
    shuffler = Shuffler(config, r)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
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


class ShufflerProcess(AggregatorProcess):
    """``ldptel shuffle`` as a child process of ``ldptel serve`` (restarted by it), started and
    stopped as ``AggregatorProcess`` is: SIGTERM makes it finish its current step."""

    command = "shuffle"
