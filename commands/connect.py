"""How a command finds its Redis, the way ``ldptel serve`` does, and connects as its roles.

``resolve(args)`` → (URL, credentials file or None):

1. ``--redis-url``, else ``$REDIS_URL``: that Redis. Its role credentials are
   ``$LDPTEL_REDIS_CREDENTIALS`` (``ldptel.credentials``) or, when that is unset, those of the
   embedded Redis of ``serve --config FILE`` (its data directory,
   ``credentials.embedded_data_dir``) or of any ``serve`` under ``$LDPTEL_DATA_DIR`` whose
   credentials name the URL's server (newest first): so ``ldptel campaigns --redis-url
   redis://127.0.0.1:PORT/0 list`` works against ``serve``'s embedded Redis as it is printed;
2. else, with ``--config FILE``: the embedded Redis of ``ldptel serve --config FILE`` (the URL and
   credentials it wrote in its data directory);
3. else nothing (the command exits 2 and says how to name a Redis).

A file found so is exported as ``$LDPTEL_REDIS_CREDENTIALS`` for this process, so every client it
makes (``redis_client.connect(url, role=…)``) uses it.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import redis as redis_lib

from ldptel import credentials
from ldptel.credentials import CredentialsError
from ldptel.logs import redact_url
from ldptel.store.redis_client import AnyRedis, connect_roles


class NoRedis(Exception):
    """No Redis named and no ``serve`` of the config found (the message says what to do)."""


def redis_url_of(args: argparse.Namespace) -> str:
    """The command's Redis URL: ``--redis-url``, else ``$REDIS_URL``, else ``""``."""
    return getattr(args, "redis_url", None) or os.environ.get("REDIS_URL", "")


def _embedded(config: str | None) -> credentials.Credentials | None:
    if not config:
        return None
    path = credentials.embedded_data_dir(config) / credentials.DEFAULT_NAME
    return credentials.load(path) if path.is_file() else None


def _fitting(url: str, config: str | None) -> Path | None:
    """The credentials file of an embedded Redis (this config's first) that names ``url``'s server."""
    mine = _embedded(config)
    if mine is not None and mine.fits(url):
        return mine.path
    for path in credentials.embedded_files():
        try:
            if credentials.load(path).fits(url):
                return path
        except CredentialsError:
            continue
    return None


def resolve(args: argparse.Namespace) -> tuple[str, Path | None]:
    """The command's Redis URL and the credentials file it connects with (None: the URL as it
    is, or ``$LDPTEL_REDIS_CREDENTIALS``); ``NoRedis`` when there is none (module docstring)."""
    url = redis_url_of(args)
    config = getattr(args, "config", None)
    named = os.environ.get(credentials.ENV)
    if url:
        found = None if named else _fitting(url, config)
    else:
        creds = _embedded(config)
        if creds is None:
            where = (f" (looked for the embedded Redis of `ldptel serve --config {config}` in "
                     f"{credentials.embedded_data_dir(config)})") if config else ""
            raise NoRedis("no Redis: pass --redis-url, set REDIS_URL, or start `ldptel serve "
                          f"--config FILE` and give this command the same --config{where}")
        url, found = f"redis://{creds.servers[0]}/0", creds.path
    if found is not None:
        os.environ[credentials.ENV] = str(found)
    return url, found


def connect_cli(args: argparse.Namespace, logger: logging.Logger, roles: tuple[str, ...],
                socket_timeout: float) -> dict[str, AnyRedis] | int:
    """The Redis clients of a worker command, one per role, or, logged, its exit status: 2
    without a Redis, 1 if it cannot connect (or its credentials file does not fit the URL)."""
    embedded = not redis_url_of(args)
    try:
        url, _ = resolve(args)
    except (NoRedis, CredentialsError) as exc:
        logger.error("%s", exc)
        return 2
    args.redis_url = url
    try:
        return connect_roles(url, roles, socket_timeout=socket_timeout)
    except (redis_lib.RedisError, redis_lib.RedisClusterException, CredentialsError) as exc:
        logger.error("cannot connect to %s: %s%s", redact_url(url), exc, hint(args, embedded))
        return 1


def hint(args: argparse.Namespace, embedded: bool) -> str:
    """What to check when the Redis found does not answer."""
    config = getattr(args, "config", None)
    return f" (is `ldptel serve --config {config}` running?)" if embedded and config else ""
