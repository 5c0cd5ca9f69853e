"""``ldptel campaigns [--config FILE] [--redis-url URL] ACTION`` against the registry in Redis
(``ldptel.store.registry``). The Redis is found as ``ldptel serve`` finds it (``commands.connect``):
``--redis-url``/``$REDIS_URL``, else the embedded Redis of ``ldptel serve --config FILE``, with
its role credentials either way. ``--config`` and ``--redis-url`` may come before or after the
action.

- ``list``: one line per campaign: name, status, latest version, kind, ε (``broken`` and the
  reason for a record that cannot be read);
- ``show NAME``: the campaign's record as JSON (every version's table, status, times);
- ``history NAME``: its changes, oldest first: when (UTC), who, through what, action, version,
  what changed;
- ``set NAME KEY=VALUE…``: change those keys of the campaign live (values as TOML values; a bare
  word is a string: ``window=10s``); a changed randomization parameter makes a new version,
  devices follow at their next send;
- ``apply --config FILE [--dry-run] [--force]``: validate the file, print the drift (each key
  where the registry differs from the file: registry → file), then create / update each of its
  campaigns (a changed randomization parameter makes a new version) and print what changed. A
  campaign changed through the admin API since the last apply is not overridden without
  ``--force`` (exit 1, nothing written); ``--dry-run`` prints and writes nothing. Campaigns of the
  registry that the file does not name are left alone (``POST /v1/admin/campaigns/<name>/retire``
  retires one);
- ``rollback NAME --to VERSION``: a new version equal to version VERSION (the campaign-wide keys,
  e.g. ``min_reports``, stay as they are).

Exit 2 for a bad file or key, a change the registry refuses (the message names the key) or no
Redis; 1 for an unknown campaign, a refused apply or a Redis that does not answer. Changes are
recorded as made by ``cli <user>@<host>``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
import time
import tomllib
from typing import Any

import redis as redis_lib

from ldptel.campaigns.config import Campaign, ConfigError, load_config
from ldptel.commands.connect import NoRedis, hint, redis_url_of, resolve
from ldptel.credentials import CredentialsError
from ldptel.logs import redact_url
from ldptel.privacy.modes import Shuffled, ShuffledFakes
from ldptel.store import registry
from ldptel.store.redis_client import AnyRedis, connect


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


def who() -> str:
    """``cli <user>@<host>``: who ran the command (the history)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"cli {user}@{socket.gethostname()}"


def print_drift(applied: registry.Applied, prefix: str = "", file=sys.stdout) -> None:
    """One line per key where the registry differs from the file."""
    for name, diff in sorted(applied.drift.items()):
        for key, (held, wanted) in diff.items():
            print(f"{prefix}{name}.{key}: registry {json.dumps(held)} → file {json.dumps(wanted)}", file=file)


def _redis(args: argparse.Namespace) -> AnyRedis:
    url, _ = resolve(args)
    args.redis_url = url
    return connect(url, role="admin", socket_connect_timeout=5.0, socket_timeout=10.0)


def run_campaigns(args: argparse.Namespace) -> int:
    if args.action == "apply" and not args.config:
        print("ldptel campaigns apply: give --config FILE", file=sys.stderr)
        return 2
    # bad file: exit 2 first; ``set``/``rollback`` check against its [shuffler] (issue 34 item 6)
    config = load_config(args.config) if args.action == "apply" or args.config else None
    changes = parse_changes(args.changes) if args.action == "set" else {}
    embedded = not redis_url_of(args)
    try:
        r = _redis(args)
        return _act(args, r, config, changes)
    except (NoRedis, CredentialsError) as exc:
        print(f"ldptel campaigns: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:  # a change the registry refuses: nothing was written
        print(f"ldptel campaigns: {exc}", file=sys.stderr)
        return 2
    except redis_lib.RedisError as exc:
        print(f"ldptel campaigns: {redact_url(redis_url_of(args))}: {exc}{hint(args, embedded)}",
              file=sys.stderr)
        return 1


def _act(args: argparse.Namespace, r: AnyRedis, config: Any, changes: dict[str, Any]) -> int:
    if args.action == "apply":
        return _apply(r, config.tables, args, config.shuffler)
    if args.action in ("set", "rollback"):
        shuffler = config.shuffler if config is not None else None
        done = (registry.patch(r, args.name, changes, by=who(), via="cli", shuffler=shuffler)
                if args.action == "set"
                else registry.rollback(r, args.name, args.to, by=who(), via="cli", shuffler=shuffler))
        if done is None:
            return _unknown(args.name)
        print(done.line())
        return 0
    _, records = registry.load(r)
    if args.action in ("show", "history"):
        rec = records.get(args.name)
        if rec is None:
            return _unknown(args.name)
        if args.action == "show":
            print(json.dumps(rec, indent=2, sort_keys=True))
        for e in registry.history(r, args.name) if args.action == "history" else []:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["at"]))
            what = {k: v for k, v in e.items() if k not in ("at", "by", "via", "action", "version")}
            print(f"{when}Z\t{e['by']} ({e['via']})\t{e['action']}\tversion {e['version']}"
                  f"\t{json.dumps(what, sort_keys=True) if what else ''}".rstrip())
        return 0
    for name in sorted(records):
        try:
            latest = registry.readable_versions(records[name])[-1]
        except ConfigError as exc:
            print(f"{name}\tbroken\t{exc}")
            continue
        print(f"{name}\t{latest.status}\tversion {latest.version}\t{latest.kind}\t{privacy_text(latest)}")
    return 0


def privacy_text(c: Campaign) -> str:
    """``epsilon 2`` (local), or the mode with its central target and the local ε (issue 35: a
    shuffled-fakes campaign printed ``epsilon -``)."""
    local = "no local epsilon (the true value, sealed)" if c.epsilon is None else f"epsilon {c.epsilon:g}"
    mode = c.mode
    if not isinstance(mode, (Shuffled, ShuffledFakes)):
        return local
    return f"{mode.name}: central epsilon {mode.central_epsilon:g} (delta {mode.central_delta:g}), {local}"


def _unknown(name: str) -> int:
    print(f"ldptel campaigns: no campaign named {name!r} in the registry", file=sys.stderr)
    return 1


def _apply(r: AnyRedis, tables: list[dict[str, Any]], args: argparse.Namespace, shuffler: Any = None) -> int:
    applied = registry.apply(r, tables, by=who(), via="apply", dry_run=args.dry_run, force=args.force,
                             shuffler=shuffler)
    print_drift(applied, "drift: ")
    if applied.refused:
        print(f"ldptel campaigns: not applied: {', '.join(applied.refused)} changed through the admin API "
              "since the last apply (the drift above); `ldptel campaigns history NAME` shows who changed "
              "what; --force overrides", file=sys.stderr)
        return 1
    for change in applied.changes:
        print(("would be " if args.dry_run else "") + change.line())
    return 0
