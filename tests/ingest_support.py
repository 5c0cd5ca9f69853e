"""Helpers for the collector tests: tokens, the collector config with one campaign per oracle, and
counts of what Redis stored (the process and HTTP helpers are in http_support.py)."""

from __future__ import annotations

import redis

INGEST_TOKEN = "test-ingest-token-0001"
INGEST_TOKEN_2 = "test-ingest-token-0002"
EXPORT_TOKEN = "test-export-token-0001"
PROTOBUF = "application/x-protobuf"

CAMPAIGNS = """
[[campaigns]]
name = "grr"
reports_per_window = 1000000  # one client plays many devices
shuffle_max_delay = "1s"  # a serve stack counts a few reports within seconds
oracle = "grr"
epsilon = 2.0
domain = ["apple", "banana", "cherry", "durian", "elder"]

[[campaigns]]
name = "sue"
reports_per_window = 1000000  # one client plays many devices
shuffle_max_delay = "1s"  # a serve stack counts a few reports within seconds
oracle = "sue"
epsilon = 1.0
domain_size = 100

[[campaigns]]
name = "oue"
reports_per_window = 1000000  # one client plays many devices
shuffle_max_delay = "1s"  # a serve stack counts a few reports within seconds
oracle = "oue"
epsilon = 1.0
domain_size = 1021

[[campaigns]]
name = "olh"
reports_per_window = 1000000  # one client plays many devices
shuffle_max_delay = "1s"  # a serve stack counts a few reports within seconds
oracle = "olh"
epsilon = 1.0
domain_size = 1024
window = "1h"

[[campaigns]]
name = "hadamard"
reports_per_window = 1000000  # one client plays many devices
shuffle_max_delay = "1s"  # a serve stack counts a few reports within seconds
oracle = "hadamard"
epsilon = 1.0
domain_size = 100
shards = 4

[[campaigns]]
name = "rappor"
reports_per_window = 1000000  # one client plays many devices
shuffle_max_delay = "1s"  # a serve stack counts a few reports within seconds
oracle = "rappor"
bloom_bits = 60
hashes = 2
cohorts = 8
f = 0.5
p = 0.5
q = 0.75
candidates = ["a", "b", "c", "d"]
"""


def config_text(rate_limit: int = 1_000_000, max_body: int = 1 << 20, max_reports: int = 10_000,
                extra: str = "", per_address: int | None = 0) -> str:
    """The collector config of the tests; ``per_address``: ``rate_limit_per_address_per_minute``
    (0: off, as every test client sends from one loopback address, and then room for 64 unfinished
    bodies from it: a whole fleet's concurrent posts; None: the defaults of both)."""
    address_limit = "" if per_address is None else f"rate_limit_per_address_per_minute = {per_address}"
    if per_address == 0:
        address_limit += "\nmax_unfinished_bodies_per_address = 64"
    return f"""
[server]
ingest_tokens = ["{INGEST_TOKEN}", "{INGEST_TOKEN_2}"]
export_tokens = ["{EXPORT_TOKEN}"]
rate_limit_per_minute = {rate_limit}
{address_limit}
max_body_bytes = {max_body}
max_reports_per_batch = {max_reports}
{CAMPAIGNS}
{extra}
"""


def stream_keys(client: redis.Redis) -> list[bytes]:
    """Every report stream: the collector's ingress streams (where it writes with the shuffler
    enabled, the default) and the analysis streams (the shuffler's output, or the collector's with
    the shuffler disabled)."""
    return sorted([*client.scan_iter(match="{ldptel:*}:reports", count=1000),
                   *client.scan_iter(match="{ldptel:*}:ingress", count=1000)])


def total_entries(client: redis.Redis) -> int:
    """Entries in all report streams (ingress and analysis)."""
    return sum(client.xlen(k) for k in stream_keys(client))


def stored_reports(client: redis.Redis, campaign: str | None = None) -> int:
    """Sum of the ``count`` field over the stream entries (of one campaign, or all)."""
    total = 0
    for key in stream_keys(client):
        if campaign is not None and not key.startswith(f"{{ldptel:{campaign}:".encode()):
            continue
        total += sum(int(f[b"count"]) for _, f in client.xrange(key))
    return total


def entries(client: redis.Redis, campaign: str) -> list[dict]:
    out = []
    for key in stream_keys(client):
        if key.startswith(f"{{ldptel:{campaign}:".encode()):
            out.extend(f for _, f in client.xrange(key))
    return out
