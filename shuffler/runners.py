"""The shuffler in a daemon thread (``ldptel demo``, tests): ``BackgroundShuffler``. The
``ldptel shuffle`` command is ``ldptel.commands.shuffle``; ``ldptel serve`` runs it as a child
process (``ldptel.commands.children``)."""

from __future__ import annotations

from collections.abc import Callable

from ldptel.campaigns.config import Config
from ldptel.shuffler.worker import Shuffler
from ldptel.store.redis_client import connect_roles
from ldptel.store.runner import BackgroundRunner

ROLES = ("shuffler", "reader")  # ``ldptel.store.acl``: the shuffler's user, and the registry's reads
SOCKET_TIMEOUT_S = 30.0


def build_shuffler(config: Config, redis_url: str, log: Callable[[str], None] | None = None) -> Shuffler:
    """A ``Shuffler`` on ``redis_url``, connected as its roles (``ROLES``)."""
    clients = connect_roles(redis_url, ROLES, socket_timeout=SOCKET_TIMEOUT_S)
    return Shuffler(config, clients["shuffler"], log=log, registry_r=clients["reader"])


class BackgroundShuffler(BackgroundRunner):
    """A shuffler in a daemon thread; ``stop()`` finishes the current step and joins."""

    def __init__(self, config: Config, redis_url: str, log: Callable[[str], None] | None = None) -> None:
        super().__init__(build_shuffler(config, redis_url, log), "ldptel-shuffler")
