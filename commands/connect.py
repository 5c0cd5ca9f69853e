"""How a command finds its Redis: ``--redis-url``, else ``$REDIS_URL``, connected as the
command's roles (``redis_client.connect_roles``)."""

from __future__ import annotations

import argparse
import logging
import os

import redis as redis_lib

from ldptel.credentials import CredentialsError
from ldptel.logs import redact_url
from ldptel.redis_client import AnyRedis, connect_roles


def redis_url_of(args: argparse.Namespace) -> str:
    """The command's Redis URL: ``--redis-url``, else ``$REDIS_URL``, else ``""``."""
    return getattr(args, "redis_url", None) or os.environ.get("REDIS_URL", "")


def connect_cli(args: argparse.Namespace, logger: logging.Logger, roles: tuple[str, ...],
                socket_timeout: float) -> dict[str, AnyRedis] | int:
    """The Redis clients of a worker command, one per role, or, logged, its exit status: 2
    without a URL, 1 if it cannot connect (or its credentials file does not fit the URL)."""
    url = redis_url_of(args)
    if not url:
        logger.error("no Redis: pass --redis-url or set REDIS_URL (the embedded Redis runs with "
                     "`ldptel serve`)")
        return 2
    try:
        return connect_roles(url, roles, socket_timeout=socket_timeout)
    except (redis_lib.RedisError, redis_lib.RedisClusterException, CredentialsError) as exc:
        logger.error("cannot connect to %s: %s", redact_url(url), exc)
        return 1
