"""``ldptel campaigns list | show NAME | apply --config FILE`` against the registry in Redis
(``ldptel.registry``; ``--redis-url`` or ``$REDIS_URL``).

- ``list``: one line per campaign: name, status, latest version, kind, ε;
- ``show NAME``: the campaign's record as JSON (every version's table, status, times);
- ``apply --config FILE``: validate the file, then create / update each of its campaigns (a
  changed randomization parameter makes a new version) and print what changed; campaigns of the
  registry that the file does not name are left alone (``POST /v1/admin/campaigns/<name>/retire``
  retires one). Exit 2 for a bad file (the message names the key), 1 for an unknown campaign.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ldptel import registry
from ldptel.config import load_config
from ldptel.redis_client import AnyRedis, connect


def _redis(args: argparse.Namespace) -> AnyRedis | None:
    url = args.redis_url or os.environ.get("REDIS_URL")
    if not url:
        print("ldptel campaigns: give --redis-url (or set $REDIS_URL)", file=sys.stderr)
        return None
    return connect(url, role="admin")


def run_campaigns(args: argparse.Namespace) -> int:
    config = load_config(args.config) if args.action == "apply" else None  # bad file: exit 2 first
    r = _redis(args)
    if r is None:
        return 2
    if args.action == "apply":
        assert config is not None
        for change in registry.apply(r, config.tables):
            print(change.line())
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
