"""``ldptel campaigns [--config FILE] [--redis-url URL] ACTION`` against the registry in Redis
(``ldptel.registry``). The Redis is found as ``ldptel serve`` finds it (``commands.connect``):
``--redis-url``/``$REDIS_URL``, else the embedded Redis of ``ldptel serve --config FILE``, with
its role credentials either way. ``--config`` and ``--redis-url`` may come before or after the
action.

- ``list``: one line per campaign: name, status, latest version, kind, ε;
- ``show NAME``: the campaign's record as JSON (every version's table, status, times);
- ``set NAME KEY=VALUE…``: change those keys of the campaign live (values as TOML values; a bare
  word is a string: ``window=10s``); a changed randomization parameter makes a new version,
  devices follow at their next send;
- ``apply --config FILE``: validate the file, then create / update each of its campaigns (a
  changed randomization parameter makes a new version) and print what changed; campaigns of the
  registry that the file does not name are left alone (``POST /v1/admin/campaigns/<name>/retire``
  retires one).

Exit 2 for a bad file or key (the message names it) or no Redis, 1 for an unknown campaign or a
Redis that does not answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from typing import Any

import redis as redis_lib

from ldptel import registry
from ldptel.commands.connect import NoRedis, hint, redis_url_of, resolve
from ldptel.config import ConfigError, load_config
from ldptel.credentials import CredentialsError
from ldptel.logs import redact_url
from ldptel.redis_client import AnyRedis, connect


def parse_changes(pairs: list[str]) -> dict[str, Any]:
    """``["epsilon=1", "window=10s"]`` → ``{"epsilon": 1, "window": "10s"}``; ``ConfigError``
    for a pair without ``=``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"{pair!r}: expected KEY=VALUE (e.g. epsilon=1)")
        try:
            out[key.strip()] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = text
    return out


def _redis(args: argparse.Namespace) -> AnyRedis:
    url, _ = resolve(args)
    args.redis_url = url
    return connect(url, role="admin", socket_connect_timeout=5.0, socket_timeout=10.0)


def run_campaigns(args: argparse.Namespace) -> int:
    if args.action == "apply" and not args.config:
        print("ldptel campaigns apply: give --config FILE", file=sys.stderr)
        return 2
    config = load_config(args.config) if args.action == "apply" else None  # bad file: exit 2 first
    changes = parse_changes(args.changes) if args.action == "set" else {}
    embedded = not redis_url_of(args)
    try:
        r = _redis(args)
        return _act(args, r, config, changes)
    except (NoRedis, CredentialsError) as exc:
        print(f"ldptel campaigns: {exc}", file=sys.stderr)
        return 2
    except redis_lib.RedisError as exc:
        print(f"ldptel campaigns: {redact_url(redis_url_of(args))}: {exc}{hint(args, embedded)}",
              file=sys.stderr)
        return 1


def _act(args: argparse.Namespace, r: AnyRedis, config: Any, changes: dict[str, Any]) -> int:
    if args.action == "apply":
        for change in registry.apply(r, config.tables):
            print(change.line())
        return 0
    if args.action == "set":
        done = registry.patch(r, args.name, changes)
        if done is None:
            print(f"ldptel campaigns: no campaign named {args.name!r} in the registry", file=sys.stderr)
            return 1
        print(done.line())
        return 0
    _, records = registry.load(r)
    if args.action == "show":
        rec = records.get(args.name)
        if rec is None:
            print(f"ldptel campaigns: no campaign named {args.name!r} in the registry", file=sys.stderr)
            return 1
        print(json.dumps(rec, indent=2, sort_keys=True))
        return 0
    for name in sorted(records):
        latest = registry.versions_of(records[name])[-1]
        eps = "-" if latest.epsilon is None else f"{latest.epsilon:g}"
        print(f"{name}\t{latest.status}\tversion {latest.version}\t{latest.kind}\tepsilon {eps}")
    return 0
