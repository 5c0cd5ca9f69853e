"""``ldptel campaigns list | show NAME | history NAME | apply --config FILE [--dry-run] [--force] |
rollback NAME --to VERSION`` against the registry in Redis (``ldptel.registry``; ``--redis-url``
or ``$REDIS_URL``).

- ``list``: one line per campaign: name, status, latest version, kind, ε (``broken`` and the
  reason for a record that cannot be read);
- ``show NAME``: the campaign's record as JSON (every version's table, status, times);
- ``history NAME``: its changes, oldest first: when (UTC), who, through what, action, version,
  what changed;
- ``apply --config FILE``: validate the file, print the drift (each key where the registry
  differs from the file: registry → file), then create / update each of its campaigns (a
  changed randomization parameter makes a new version) and print what changed. A campaign
  changed through the admin API since the last apply is not overridden without ``--force``
  (exit 1, nothing written); ``--dry-run`` prints and writes nothing. Campaigns of the registry
  that the file does not name are left alone;
- ``rollback NAME --to VERSION``: a new version equal to version VERSION (the campaign-wide keys,
  e.g. ``min_reports``, stay as they are).

Exit 2 for a bad file or a change the registry refuses (the message names the key), 1 for an
unknown campaign or a refused apply. Changes are recorded as made by ``cli <user>@<host>``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
import time

from ldptel import registry
from ldptel.config import ConfigError, load_config
from ldptel.redis_client import AnyRedis, connect


def _redis(args: argparse.Namespace) -> AnyRedis | None:
    url = args.redis_url or os.environ.get("REDIS_URL")
    if not url:
        print("ldptel campaigns: give --redis-url (or set $REDIS_URL)", file=sys.stderr)
        return None
    return connect(url, role="admin")


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


def run_campaigns(args: argparse.Namespace) -> int:
    config = load_config(args.config) if args.action == "apply" else None  # bad file: exit 2 first
    r = _redis(args)
    if r is None:
        return 2
    try:
        if args.action == "apply":
            assert config is not None
            return _apply(r, config.tables, args)
        if args.action == "rollback":
            change = registry.rollback(r, args.name, args.to, by=who(), via="cli")
            if change is None:
                return _unknown(args.name)
            print(change.line())
            return 0
    except ConfigError as exc:
        print(f"ldptel campaigns: {exc}", file=sys.stderr)
        return 2
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
        eps = "-" if latest.epsilon is None else f"{latest.epsilon:g}"
        print(f"{name}\t{latest.status}\tversion {latest.version}\t{latest.kind}\tepsilon {eps}")
    return 0


def _unknown(name: str) -> int:
    print(f"ldptel campaigns: no campaign named {name!r} in the registry", file=sys.stderr)
    return 1


def _apply(r: AnyRedis, tables: list[dict], args: argparse.Namespace) -> int:
    applied = registry.apply(r, tables, by=who(), via="apply", dry_run=args.dry_run, force=args.force)
    print_drift(applied, "drift: ")
    if applied.refused:
        print(f"ldptel campaigns: not applied: {', '.join(applied.refused)} changed through the admin API "
              "since the last apply (the drift above); `ldptel campaigns history NAME` shows who changed "
              "what; --force overrides", file=sys.stderr)
        return 1
    for change in applied.changes:
        print(("would be " if args.dry_run else "") + change.line())
    return 0
