"""``ldptel issuer``: the Privacy Pass token issuer (``ldptel.server.issuer``) under gunicorn, on
``[issuer] port``, as the Redis user ``issuer``; ``ldptel serve`` runs (and restarts) it as a child
of its own when the config has an ``[issuer]`` table. Its key is made (or replaced, past
``key_lifetime``) before the workers start, so they all sign with one key."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from gunicorn.app.base import BaseApplication

from ldptel.campaigns.config import Config, load_config
from ldptel.commands.connect import resolve
from ldptel.commands.gunicorn_pool import gunicorn_options
from ldptel.errors import CredentialsError

log = logging.getLogger("ldptel.issuer")


class IssuerApplication(BaseApplication):
    """gunicorn serving ``create_issuer_app`` (built in each worker after the fork)."""

    def __init__(self, config: Config, redis_url: str, options: dict[str, Any]) -> None:
        self.config, self.redis_url, self.options = config, redis_url, options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if key != "child_exit":
                self.cfg.set(key, value)

    def load(self):
        from ldptel.server.issuer import create_issuer_app

        return create_issuer_app(self.config, self.redis_url)


def run_issuer(args: argparse.Namespace) -> int:
    """Entry point of ``ldptel issuer``; returns the exit status."""
    from ldptel.commands.connect import NoRedis
    from ldptel.server.issuer import load_or_create_key

    config = load_config(args.config)
    if config.issuer is None:
        log.error("%s has no [issuer] table: nothing to issue", args.config)
        return 2
    try:
        url, _ = resolve(args)
    except (NoRedis, CredentialsError) as exc:
        log.error("%s", exc)
        return 2
    key = load_or_create_key(config.issuer)
    port = args.port or config.issuer.port
    log.info("issuer %r on http://%s:%d (attester %s, %d tokens per subject per %s; key valid until %d)",
             config.issuer.name, args.host, port, config.issuer.attester, config.issuer.tokens_per_window,
             config.issuer.window, key.not_after)
    options = gunicorn_options(args.host, port, args.workers, proc_name="ldptel-issuer")
    IssuerApplication(config, url, options).run()
    return 0
