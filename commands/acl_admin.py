"""Creating the role users (``ldptel.store.acl``) on a Redis server, and ``ldptel redis-acl``.

``ldptel redis-acl --config FILE [--redis-url URL] [--credentials FILE] [--rotate] [--print]``
connects with an administrative URL (``--redis-url`` or ``$REDIS_URL``: a user allowed to run
``ACL SETUSER``), creates or updates one user per role (``ACL SETUSER ldptel-<role> reset on
~keys… -@all +commands… >password``: ``reset`` first, so a second run leaves the same users and
revokes any right given by hand), and writes the credentials file (``ldptel.credentials``, mode
0600) that the processes read. Passwords are random (``secrets``, OS randomness); a second run
keeps those of the existing file (running processes keep working) unless ``--rotate``.
``--print`` shows the rules and changes nothing. ``--split`` also writes one file per kind of
process (``<file stem>-serve.json``, ``-shuffle``, ``-aggregate``: ``PROCESS_ROLES``) holding only
the passwords that process uses, for services run as separate system users. On a Redis Cluster
the users are created on every node (ACL users are per node).

``ldptel serve`` with its embedded Redis does the same without a command: ``embedded_acl``
writes the users, the default user's password included, into an ACL file that the server loads
at every start (``--aclfile``), so there is no moment at which the default user is open.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import sys
from pathlib import Path

from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from ldptel import credentials
from ldptel.campaigns.config import Config, load_config
from ldptel.logs import redact_url
from ldptel.store import acl
from ldptel.store.acl import username
from ldptel.store.redis_client import AnyRedis, connect, is_cluster

ACL_FILE = "users.acl"
# the roles each kind of process connects as (``--split`` writes a file per kind with only these)
PROCESS_ROLES = {
    "serve": ("collector", "reader", "sessions", "admin"),
    "shuffle": ("shuffler", "reader"),
    "aggregate": ("aggregator", "reader"),
}


def new_password() -> str:
    return secrets.token_urlsafe(32)


def passwords(previous: credentials.Credentials | None, rotate: bool = False) -> dict[str, tuple[str, str]]:
    """(username, password) per role: the previous file's unless ``rotate`` (or a role is new)."""
    old = {} if previous is None or rotate else previous.users
    return {name: old.get(name, (username(name), new_password())) for name in acl.ROLE_NAMES}


def setuser_args(role: acl.Role, password: str) -> list[str]:
    """``ACL SETUSER`` arguments of ``role`` with ``password`` (in the clear)."""
    return ["ACL", "SETUSER", username(role.name), *role.rules(), f">{password}"]


def apply(r: AnyRedis, config: Config, users: dict[str, tuple[str, str]]) -> list[str]:
    """Create or update every role's user (on every node of a cluster); the user names."""
    for role in acl.roles(config):
        args = setuser_args(role, users[role.name][1])
        if is_cluster(r):
            r.execute_command(*args, target_nodes=RedisCluster.ALL_NODES)
        else:
            r.execute_command(*args)
    return [username(name) for name in acl.ROLE_NAMES]


def acl_file_text(config: Config, users: dict[str, tuple[str, str]], default_password: str) -> str:
    """An ACL file (``redis-server --aclfile``): the default user with ``default_password`` and
    every right (only ``ldptel serve`` holds it), and one user per role; SHA-256 hashes only."""

    def digest(pw: str) -> str:
        return "#" + hashlib.sha256(pw.encode()).hexdigest()

    lines = [f"user default on {digest(default_password)} ~* &* +@all"]
    for role in acl.roles(config):
        lines.append(" ".join(["user", username(role.name), *role.rules(), digest(users[role.name][1])]))
    return "\n".join(lines) + "\n"


def embedded_acl(config: Config, data_dir: Path, port: int) -> tuple[list[str], str, Path]:
    """For ``ldptel serve``'s embedded Redis on ``port``: new passwords, the ACL file and the
    credentials file (both 0600, in ``data_dir``). Returns (the redis-server arguments, the
    default user's password, the credentials file)."""
    users = passwords(None)
    default_password = new_password()
    path = data_dir / ACL_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(acl_file_text(config, users, default_password))
    creds = credentials.write(data_dir / credentials.DEFAULT_NAME, [f"127.0.0.1:{port}"], users)
    return ["--aclfile", str(path)], default_password, creds


def run_redis_acl(args: argparse.Namespace) -> int:
    """Entry point of ``ldptel redis-acl``; returns the exit status."""
    config = load_config(args.config)
    if args.print:
        print(acl.describe(config))
        return 0
    url = args.redis_url or os.environ.get("REDIS_URL")
    if not url:
        print("ldptel redis-acl: give --redis-url (or set $REDIS_URL): an administrative URL",
              file=sys.stderr)
        return 2
    path = Path(args.credentials) if args.credentials else credentials.default_path()
    previous = credentials.load(path) if path.exists() else None
    users = passwords(previous, rotate=args.rotate)
    try:
        names = apply(connect(url, socket_connect_timeout=5.0, socket_timeout=10.0), config, users)
    except (RedisError, RedisClusterException) as exc:  # unreachable, or not allowed to run ACL
        print(f"ldptel redis-acl: {redact_url(url)}: {exc}", file=sys.stderr)
        return 1
    credentials.write(path, credentials.servers_of(url), users)
    if args.split:
        for kind, roles in PROCESS_ROLES.items():
            part = credentials.write(path.with_name(f"{path.stem}-{kind}{path.suffix}"),
                                     credentials.servers_of(url), {k: users[k] for k in roles})
            print(f"ldptel redis-acl: ldptel {kind} only: {part}")
    print(f"ldptel redis-acl: users {', '.join(names)} on {', '.join(credentials.servers_of(url))}; "
          f"credentials in {path} (mode 0600): give it to each process as "
          f"{credentials.ENV}={path}")
    return 0
