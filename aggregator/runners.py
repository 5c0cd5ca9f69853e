"""The aggregator worker in a daemon thread (``ldptel demo``, tests): ``BackgroundAggregator``.
The ``ldptel aggregate`` command is ``ldptel.commands.aggregate``; ``ldptel serve`` runs it as a
child process (``ldptel.commands.children``)."""

from __future__ import annotations

from collections.abc import Callable

from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import Config
from ldptel.store.redis_client import connect_roles
from ldptel.store.runner import BackgroundRunner

ROLES = ("aggregator", "reader")  # ``ldptel.store.acl``: the worker's user, and the registry's reads


def socket_timeout(config: Config) -> float:
    """The aggregator's Redis socket timeout: its longest blocking read plus a minute."""
    return config.aggregator.block_ms / 1000 + 60


def build_worker(config: Config, redis_url: str, log: Callable[[str], None] | None = None) -> Worker:
    """An aggregator ``Worker`` on ``redis_url``, connected as its roles (``ROLES``)."""
    clients = connect_roles(redis_url, ROLES, socket_timeout=socket_timeout(config))
    return Worker(config, clients["aggregator"], log=log, registry_r=clients["reader"])


class BackgroundAggregator(BackgroundRunner):
    """An aggregator worker in a daemon thread; ``stop()`` finishes the current commit and joins."""

    def __init__(self, config: Config, redis_url: str, log: Callable[[str], None] | None = None) -> None:
        super().__init__(build_worker(config, redis_url, log), "ldptel-aggregator")
