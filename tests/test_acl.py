"""Least-privilege Redis roles (``ldptel.store.acl``, ``ldptel redis-acl``) on a real Redis 6.2.

Every key that ``ldptel.keys`` spells is granted to a role; each role can do what its process
does and is refused (NOPERM) what it must not: the collector reads no stream, state, publication
or registry; the reader writes nothing; the aggregator and the shuffler cannot write the registry.
Commands called inside Lua scripts are checked against the calling user too (shown here, and what
the rules rely on). ``redis-acl`` is idempotent and revokes rights given by hand.
"""

from __future__ import annotations

import fnmatch
import inspect
import json
import os
import re
import stat
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from http_support import Poster, http_request, request, start_collector
from ingest_support import EXPORT_TOKEN, INGEST_TOKEN, config_text

from ldptel import credentials, keys
from ldptel.campaigns.config import load_config
from ldptel.client import create_mechanism
from ldptel.commands.cli import main
from ldptel.store import acl, registry
from ldptel.store.acl import username
from ldptel.store.redis_client import connect
from ldptel.store.redis_server import EmbeddedRedis, EmbeddedRedisCluster

CAMPAIGN = "grr"
STREAM = keys.stream_key(CAMPAIGN, 0)
INGRESS = keys.ingress_key(CAMPAIGN, 0)
STATE = keys.state_key(CAMPAIGN, 0)
COUNTS = keys.counts_key(CAMPAIGN, 0)
TARGET = INGRESS  # where the collector appends ([shuffler] enabled, the default)
PUBLISHED = keys.published_key(CAMPAIGN, 0)

# a value for every parameter name of a key function in ldptel.keys
SAMPLE_ARGS: dict[str, Any] = {"campaign": "camp-1_x", "shard": 3, "window": 1_700_000_000, "version": 2,
                               "batch_id": b"\x01\xab", "token_id": "tok", "minute": 29_000_000,
                               "kind": "addr", "digest": "0123abcd", "session_digest": "feed",
                               "key_id": 0xfd6a0569, "subject_digest": "5ab1ec7"}


def sample_keys() -> dict[str, str]:
    """One key of every key function (``*_key``) and key constant (``*_KEY``) of ldptel.keys."""
    out = {}
    for name, fn in inspect.getmembers(keys, inspect.isfunction):
        if name.endswith("_key"):
            params = inspect.signature(fn).parameters
            missing = [p for p in params if p not in SAMPLE_ARGS]
            assert not missing, f"keys.{name}: add a sample value for {missing} to SAMPLE_ARGS"
            out[name] = fn(*(SAMPLE_ARGS[p] for p in params))
            if "version" in params:
                out[f"{name}(version 1)"] = fn(*(SAMPLE_ARGS[p] if p != "version" else 1 for p in params))
    out.update({name: value for name, value in vars(keys).items() if name.endswith("_KEY")})
    return out


def granted(config_path: Path, key: str) -> set[str]:
    return {r.name for r in acl.roles(load_config(config_path))
            if any(fnmatch.fnmatchcase(key, p) for p in r.keys)}


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("acl") / "ldptel.toml"
    path.write_text(config_text())
    return path


def ungranted(config_path: Path) -> list[str]:
    """The key functions and constants of ldptel.keys whose sample key no role holds."""
    return [f"keys.{name} ({key!r})" for name, key in sample_keys().items() if not granted(config_path, key)]


def test_every_key_is_granted_to_a_role(config_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key function added to ldptel.keys without a pattern in ldptel.store.acl fails here (the
    negative control adds one)."""
    assert len(sample_keys()) >= 17
    assert ungranted(config_path) == []
    monkeypatch.setattr(keys, "forgotten_key", lambda campaign, shard: f"{keys.tag(campaign, shard)}:new",
                        raising=False)
    assert ungranted(config_path) == ["keys.forgotten_key ('{ldptel:camp-1_x:3}:new')"]


def test_patterns_are_plain_globs(config_path: Path) -> None:
    """Only ``*`` is special in the patterns (Redis and fnmatch then agree on what they match)."""
    for r in acl.roles(load_config(config_path)):
        for p in r.keys:
            assert not set(p) & set("?[]\\"), (r.name, p)


def test_who_touches_what(config_path: Path) -> None:
    """The roles table of the README: which users hold which keys."""
    expect = {
        keys.stream_key("c", 1): {"shuffler", "aggregator", "reader"},  # reader: XLEN only
        keys.ingress_key("c", 1): {"collector", "shuffler", "reader"},
        keys.seen_key("c", 1, b"\x01"): {"collector"},
        keys.metrics_key("c", 1): {"collector", "reader"},
        keys.state_key("c", 1, 3): {"aggregator"},
        keys.counts_key("c", 1, 3): {"aggregator", "reader"},
        keys.ingress_top_key("c", 1): {"collector"},
        keys.stream_top_key("c", 1): {"collector"},  # the last ids it wrote: no entry in them
        keys.registry_history_key("c"): {"admin"},
        keys.published_key("c", 5, 2): {"aggregator", "reader"},
        keys.publish_claim_key("c", 5): {"aggregator"},
        keys.HEARTBEAT_KEY: {"aggregator", "reader"},
        keys.SHUFFLER_HEARTBEAT_KEY: {"shuffler", "reader"},
        keys.REGISTRY_KEY: {"reader", "admin"},
        keys.REGISTRY_REVISION_KEY: {"reader", "admin"},
        keys.GLOBAL_METRICS_KEY: {"collector", "reader"},
        keys.ratelimit_key("t", 5): {"collector"},
        keys.auth_failure_key("addr", "d"): {"collector"},
        keys.SESSION_SECRET_KEY: {"sessions"},
        keys.session_key("d"): {"sessions"},
        keys.shuffle_lease_key("c", 1): {"shuffler"},
        keys.shuffle_metrics_key("c", 1): {"shuffler", "reader"},
        keys.release_key("c", 1): {"shuffler"},  # a journaled release (shuffler.release)
        keys.release_batches_key("c", 1): {"shuffler"},
        keys.release_ids_key("c", 1): {"shuffler"},
        keys.opened_key(0x1234): {"aggregator"},  # the messages opened per analyzer key
    }
    for key, roles in expect.items():
        assert granted(config_path, key) == roles, key


# --- on a real Redis ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory: pytest.TempPathFactory, config_path: Path) -> Iterator[tuple[str, Path]]:
    """A Redis of its own (its default user is the test's administrator) with the role users of
    ``ldptel redis-acl``; (URL, credentials file)."""
    tmp = tmp_path_factory.mktemp("acl-redis")
    with EmbeddedRedis(data_dir=tmp / "data") as server:
        creds = tmp / "credentials.json"
        assert main(["redis-acl", "--config", str(config_path), "--redis-url", server.url,
                     "--credentials", str(creds)]) == 0
        yield server.url, creds


def as_role(acl_redis: tuple[str, Path], role: str) -> redis.Redis:
    url, path = acl_redis
    user, password = credentials.load(path).users[role]
    return redis.Redis.from_url(url, username=user, password=password)


def acl_list(url: str) -> list[bytes]:
    return sorted(redis.Redis.from_url(url).execute_command("ACL", "LIST"))


def test_credentials_file(acl_redis: tuple[str, Path]) -> None:
    url, path = acl_redis
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    creds = credentials.load(path)
    assert creds.fits(url) and set(creds.users) == set(acl.ROLE_NAMES)
    assert len({pw for _, pw in creds.users.values()}) == len(acl.ROLE_NAMES)
    users = {line.split()[1].decode() for line in acl_list(url)}
    assert {username(r) for r in acl.ROLE_NAMES} <= users


def refused(call: Callable[[], Any]) -> bool:
    """True if ``call`` is refused by the ACL (directly: NOPERM; inside a script: the script's
    error that the user "can't run this command")."""
    try:
        call()
    except redis.exceptions.NoPermissionError:
        return True
    except redis.ResponseError as exc:
        return "can't run this command" in str(exc) or "no permissions" in str(exc)
    return False


def test_lua_commands_are_checked_against_the_caller(acl_redis: tuple[str, Path]) -> None:
    """Redis 6.2 checks what a script calls against the calling user: the collector may run
    scripts, yet XRANGE inside one is refused; an XADD to a key it holds passes."""
    c = as_role(acl_redis, "collector")
    xrange = "return redis.call('XRANGE', KEYS[1], '-', '+')"
    xadd = "return redis.call('XADD', KEYS[1], '*', 'a', 'b')"
    assert refused(lambda: c.execute_command("EVAL", xrange, 1, TARGET))
    assert not refused(lambda: c.execute_command("EVAL", xadd, 1, TARGET))


def test_collector_cannot_read_a_stream(acl_redis: tuple[str, Path]) -> None:
    url, _ = acl_redis
    admin = redis.Redis.from_url(url)
    for stream in (STREAM, INGRESS):
        admin.xadd(stream, {"batch": b"x", "window": 0, "count": 1})
        admin.xgroup_create(stream, keys.GROUP, id="0")
    admin.hset(STATE, "n:0", 1)
    admin.hset(PUBLISHED, "n", 1)
    c = as_role(acl_redis, "collector")
    for stream in (STREAM, INGRESS):
        assert refused(lambda s=stream: c.xrange(s))
        assert refused(lambda s=stream: c.xrevrange(s))
        assert refused(lambda s=stream: c.xread({s: "0"}))
        assert refused(lambda s=stream: c.xreadgroup(keys.GROUP, "spy", {s: "0"}))
    assert refused(lambda: c.hgetall(STATE))
    assert refused(lambda: c.hgetall(PUBLISHED))
    assert refused(lambda: c.hgetall(keys.REGISTRY_KEY))
    assert refused(lambda: c.keys("*"))
    assert refused(lambda: c.flushall())
    # what it does: its counters and the stream it appends to
    c.hincrby(keys.metrics_key(CAMPAIGN, 0), keys.ACCEPTED_BATCHES, 1)
    c.xadd(TARGET, {"batch": b"y", "window": 0, "count": 1})


def test_reader_writes_nothing(acl_redis: tuple[str, Path]) -> None:
    url, _ = acl_redis
    redis.Redis.from_url(url).hset(PUBLISHED, "n", 1)
    rd = as_role(acl_redis, "reader")
    assert rd.hget(PUBLISHED, "n") == b"1"  # it reads publications
    assert rd.xlen(STREAM) >= 0
    assert refused(lambda: rd.xadd(STREAM, {"batch": b"x"}))
    assert refused(lambda: rd.xrange(STREAM))
    assert refused(lambda: rd.hset(COUNTS, "n:0", 5))
    assert refused(lambda: rd.hincrby(COUNTS, "n:0", 5))
    assert refused(lambda: rd.delete(COUNTS))
    assert refused(lambda: rd.hgetall(STATE))  # raw state: the aggregator's alone
    assert refused(lambda: rd.set(keys.REGISTRY_REVISION_KEY, 9))
    assert refused(lambda: rd.execute_command("EVAL", "return 1", 0))


def test_aggregator_and_shuffler_cannot_write_the_registry(acl_redis: tuple[str, Path]) -> None:
    for role in ("aggregator", "shuffler", "collector"):
        r = as_role(acl_redis, role)
        assert refused(lambda r=r: r.hset(keys.REGISTRY_KEY, "grr", "{}")), role
        assert refused(lambda r=r: r.incr(keys.REGISTRY_REVISION_KEY)), role
        assert refused(lambda r=r: registry.put(r, {"name": "x", "oracle": "grr", "domain_size": 4,
                                                     "epsilon": 1.0})), role
    agg = as_role(acl_redis, "aggregator")
    assert refused(lambda: agg.get(keys.seen_key(CAMPAIGN, 0, b"\x01")))
    assert refused(lambda: agg.xadd(INGRESS, {"batch": b"x"}))
    # the admin may
    admin = as_role(acl_redis, "admin")
    change = registry.put(admin, {"name": "acl-test", "oracle": "grr", "domain_size": 4, "epsilon": 1.0})
    assert change.action == "created"


def test_shuffler_reads_ingress_not_state(acl_redis: tuple[str, Path]) -> None:
    url, _ = acl_redis
    redis.Redis.from_url(url).xadd(INGRESS, {"batch": b"z", "window": 0, "count": 1})
    sh = as_role(acl_redis, "shuffler")
    assert sh.xrange(INGRESS)
    sh.xadd(STREAM, {"batch": b"z", "window": 0, "count": 1})
    assert refused(lambda: sh.hgetall(STATE))
    assert refused(lambda: sh.hgetall(PUBLISHED))
    assert refused(lambda: sh.xreadgroup(keys.GROUP, "x", {STREAM: ">"}))


def test_connect_with_role(acl_redis: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    url, path = acl_redis
    monkeypatch.setenv(credentials.ENV, str(path))
    r = connect(url, role="reader")
    assert refused(lambda: r.hset(COUNTS, "n:0", 1))
    assert connect(url).hset(COUNTS, "n:9", 1) == 1  # no role: as the URL says (the default user)
    # a URL's own user and password (an administrative REDIS_URL) give way to the role's
    with_userinfo = url.replace("redis://", "redis://someone:wrong@", 1)
    assert connect(with_userinfo, role="reader").ping()
    with pytest.raises(redis.AuthenticationError):
        connect(with_userinfo).ping()
    monkeypatch.setenv(credentials.ENV, str(path.with_name("missing.json")))
    with pytest.raises(credentials.CredentialsError):
        connect(url, role="reader")
    other = credentials.write(path.with_name("other.json"), ["10.0.0.1:6379"], credentials.load(path).users)
    monkeypatch.setenv(credentials.ENV, str(other))
    with pytest.raises(credentials.CredentialsError, match="not for 127.0.0.1"):
        connect(url, role="reader")


def test_redis_acl_is_idempotent_and_revokes(acl_redis: tuple[str, Path], config_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    url, path = acl_redis
    args = ["redis-acl", "--config", str(config_path), "--redis-url", url, "--credentials", str(path)]
    before, file_before = acl_list(url), path.read_text()
    assert main(args) == 0
    assert acl_list(url) == before and path.read_text() == file_before
    admin = redis.Redis.from_url(url)
    admin.execute_command("ACL", "SETUSER", username("collector"), "~*", "+xrange")  # by hand
    assert not refused(lambda: as_role(acl_redis, "collector").xrange(STREAM))
    assert main(args) == 0
    assert acl_list(url) == before
    assert refused(lambda: as_role(acl_redis, "collector").xrange(STREAM))
    # --print changes nothing; --rotate: new passwords, the old ones refused
    assert main([*args, "--print"]) == 0
    assert "ACL SETUSER ldptel-collector reset on" in capsys.readouterr().out
    assert acl_list(url) == before
    old = credentials.load(path).users["reader"]
    assert main([*args, "--rotate"]) == 0
    new = credentials.load(path).users["reader"]
    assert new[1] != old[1]
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(url, username=old[0], password=old[1]).ping()
    assert as_role(acl_redis, "reader").ping()
    assert json.loads(path.read_text())["servers"] == credentials.servers_of(url)
    # --split: a file per kind of process with only its roles' passwords
    assert main([*args, "--split"]) == 0
    serve_only = credentials.load(path.with_name(f"{path.stem}-serve.json"))
    assert set(serve_only.users) == {"collector", "reader", "sessions", "admin"}
    shuffle_only = credentials.load(path.with_name(f"{path.stem}-shuffle.json"))
    assert set(shuffle_only.users) == {"shuffler", "reader"}
    assert stat.S_IMODE(shuffle_only.path.stat().st_mode) == 0o600
    aggregate_only = credentials.load(path.with_name(f"{path.stem}-aggregate.json"))
    assert set(aggregate_only.users) == {"aggregator", "reader"}
    assert os.environ.get(credentials.ENV) is None
    # a user that may not run ACL SETUSER (here: the reader): exit 1 with the error, nothing written
    user, password = credentials.load(path).users["reader"]
    as_reader = url.replace("redis://", f"redis://{user}:{password}@", 1)
    listing, file_now = acl_list(url), path.read_text()
    assert main(["redis-acl", "--config", str(config_path), "--redis-url", as_reader,
                 "--credentials", str(path), "--rotate"]) == 1
    assert "no permissions" in capsys.readouterr().err
    assert acl_list(url) == listing and path.read_text() == file_now


# --- the whole stack, every process on its role ------------------------------------------------

ADMIN_TOKEN = "test-admin-token-0001"


def _signed_in_cookie(url: str) -> str:
    """Sign in on the operator pages (the sessions role writes the session)."""
    form = http_request(url, "GET", "/signin")
    cookie = next(c.split(";", 1)[0] for c in form.cookies if c.startswith("ldptel_session="))
    csrf = re.search(rb'name="csrf_token" value="([^"]+)"', form.body)
    assert csrf is not None
    body = urllib.parse.urlencode({"token": EXPORT_TOKEN, "csrf_token": csrf.group(1).decode()})
    reply = http_request(url, "POST", "/signin", body,
                         {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie})
    assert reply.status == 302, reply.body
    return next(c.split(";", 1)[0] for c in reply.cookies if c.startswith("ldptel_session="))


@pytest.mark.slow
def test_stack_runs_with_every_process_on_its_role(tmp_path: Path) -> None:
    """``ldptel redis-acl`` on an external Redis, then ``ldptel serve --redis-url … --aggregator``
    with the credentials file: ingest → shuffle → aggregate → export, the admin API and a
    signed-in page work, and every connection of the stack (collector workers, shuffler,
    aggregator) is a role's user (CLIENT LIST), none the default."""
    text = config_text().replace("export_tokens = ", f'admin_tokens = ["{ADMIN_TOKEN}"]\nexport_tokens = ', 1)
    cfg = tmp_path / "ldptel.toml"
    cfg.write_text(text)
    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        creds = tmp_path / "credentials.json"
        assert main(["redis-acl", "--config", str(cfg), "--redis-url", server.url,
                     "--credentials", str(creds)]) == 0
        col = start_collector(tmp_path / "serve", text, server.url, workers=1,
                              env={credentials.ENV: str(creds)}, args=["--aggregator"])
        try:
            mech = create_mechanism("grr", epsilon=2.0, domain_size=5)
            batch = mech.encode_batch(np.arange(1200) % 5, rng=np.random.default_rng(7), campaign="grr")
            poster = Poster(col.url)
            assert poster.post(batch.SerializeToString(), token=INGEST_TOKEN)[0] == 202
            poster.close()
            auth = {"Authorization": f"Bearer {EXPORT_TOKEN}"}
            deadline = time.monotonic() + 30
            while True:
                status, doc = request(col.url, "GET", "/v1/campaigns/grr/estimates", headers=auth)
                if status == 200 and isinstance(doc, dict) and doc.get("n_reports") == 1200:
                    break
                assert time.monotonic() < deadline, (status, doc, col.log())
                time.sleep(0.2)
            status, listing = request(col.url, "GET", "/v1/admin/campaigns",
                                      headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            assert status == 200 and "grr" in {c["name"] for c in listing["campaigns"]}  # type: ignore[index]
            cookie = _signed_in_cookie(col.url)
            assert http_request(col.url, "GET", "/campaigns/grr", headers={"Cookie": cookie}).status == 200
            admin = redis.Redis.from_url(server.url)
            admin.client_setname("test-admin")
            clients = [c for c in admin.client_list() if c.get("name") != "test-admin"]
            users = {c["user"] for c in clients}
            # the shuffler's too; no issuer: this config has no [issuer] (tests/test_tokens_e2e.py)
            assert users == {username(r) for r in acl.ROLE_NAMES if r != "issuer"}, clients
            assert "PERM" not in col.log().upper(), col.log()
        finally:
            col.stop()


@pytest.mark.slow
def test_roles_on_a_redis_cluster(tmp_path: Path, config_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """ACL users are per node: ``redis-acl`` with a cluster URL creates them on every node, and a
    role's cluster client (slot map, command table) works on keys of several nodes."""
    with EmbeddedRedisCluster(masters=3, data_dir=tmp_path / "cluster") as cluster:
        creds = tmp_path / "credentials.json"
        assert main(["redis-acl", "--config", str(config_path), "--redis-url", cluster.url,
                     "--credentials", str(creds)]) == 0
        for node in cluster.node_urls:
            users = {line.split()[1].decode()
                     for line in redis.Redis.from_url(node).execute_command("ACL", "LIST")}
            assert {username(r) for r in acl.ROLE_NAMES} <= users, node
        monkeypatch.setenv(credentials.ENV, str(creds))
        collector = connect(cluster.url, role="collector")
        streams = [keys.ingress_key(f"c{i}") for i in range(8)]  # spread over the nodes' slots
        for stream in streams:
            collector.xadd(stream, {"batch": b"x", "window": 0, "count": 1})
            assert refused(lambda s=stream: collector.xrange(s))
        reader = connect(cluster.url, role="reader")
        assert sum(reader.xlen(s) for s in streams) == len(streams)
        assert refused(lambda: connect(cluster.url, role="aggregator").hset(keys.REGISTRY_KEY, "x", "{}"))


# --- every role against every key and command ---------------------------------------------------

K = object()  # where the key goes in a command's arguments
TYPE_COMMANDS: dict[str, list[tuple[str, tuple]]] = {  # (ACL name, the command with K for the key)
    "stream": [("xrange", ("XRANGE", K, "-", "+")), ("xrevrange", ("XREVRANGE", K, "+", "-")),
               ("xinfo|stream", ("XINFO", "STREAM", K, "FULL", "COUNT", "0")), ("xlen", ("XLEN", K)),
               ("xadd", ("XADD", K, "*", "batch", "x")), ("xdel", ("XDEL", K, "1-1")),
               ("xtrim", ("XTRIM", K, "MAXLEN", "100"))],
    "hash": [("hgetall", ("HGETALL", K)), ("hget", ("HGET", K, "n:0")), ("hkeys", ("HKEYS", K)),
             ("hset", ("HSET", K, "probe", "1"))],
    "string": [("get", ("GET", K)), ("set", ("SET", K, "1"))],
    "list": [("lrange", ("LRANGE", K, "0", "-1")), ("rpush", ("RPUSH", K, "x"))],
}
EVERY_TYPE = [("object|encoding", ("OBJECT", "ENCODING", K)), ("memory|usage", ("MEMORY", "USAGE", K)),
              ("debug", ("DEBUG", "OBJECT", K)), ("dump", ("DUMP", K)), ("del", ("DEL", K)),
              ("type", ("TYPE", K))]
KEYLESS = [("SCAN", "0"), ("KEYS", "*"), ("DEBUG", "SLEEP", "0"), ("MEMORY", "STATS"), ("OBJECT", "HELP"),
           ("FLUSHALL",), ("CONFIG", "GET", "*"), ("ACL", "LIST"), ("MONITOR",)]


def key_type(name: str) -> str:
    if name.startswith(("stream_key", "ingress_key", "release_batches_key")):
        return "stream"
    if name.startswith(("registry_history_key", "release_ids_key")):
        return "list"
    if name.startswith(("seen_key", "shuffle_lease_key", "ratelimit_key", "auth_failure_key", "session_key",
                        "publish_claim_key", "ingress_top_key", "stream_top_key", "SESSION_SECRET_KEY",
                        "REGISTRY_REVISION_KEY")):
        return "string"
    return "hash"


def test_every_role_against_every_key_and_command(acl_redis: tuple[str, Path], config_path: Path) -> None:
    """Each role runs each key type's commands (and OBJECT, MEMORY, DEBUG, DUMP, SCAN, KEYS …)
    on one key of every key function: Redis allows exactly what ``ldptel.store.acl`` grants, and the
    grants keep the boundaries: no role but the shuffler and aggregator reads a stream entry
    (``XINFO STREAM FULL`` lists them all: the collector once had it), no role but the aggregator
    reads the raw state (the reader once could HGETALL a window below ``min_reports``), and no
    role may inspect or list keys."""
    url, _ = acl_redis
    admin = redis.Redis.from_url(url)
    samples = sample_keys()
    for name, key in samples.items():
        kind = key_type(name)
        admin.delete(key)
        if kind == "stream":
            admin.xadd(key, {"batch": b"x", "window": 0, "count": 1}, id="1-1")
        elif kind == "list":
            admin.rpush(key, "{}")
        elif kind == "string":
            admin.set(key, "1")
        else:
            admin.hset(key, "n:0", 1)
    roles = {r.name: r for r in acl.roles(load_config(config_path))}
    mismatches = []
    for role_name, role in roles.items():
        user = as_role(acl_redis, role_name)
        for command in KEYLESS:
            assert refused(lambda u=user, c=command: u.execute_command(*c)), (role_name, command)
        for name, key in samples.items():
            held = any(fnmatch.fnmatchcase(key, p) for p in role.keys)
            for acl_name, args in [*TYPE_COMMANDS[key_type(name)], *EVERY_TYPE]:
                allowed = held and (acl_name in role.commands or acl_name in acl.BASE_COMMANDS)
                command = [key if a is K else a for a in args]
                got = not refused(lambda u=user, c=command: u.execute_command(*c))
                if got != allowed:
                    mismatches.append((role_name, name, acl_name, "allowed" if got else "refused"))
                if got and acl_name in ("xrange", "xrevrange", "xinfo|stream"):
                    assert role_name in ("shuffler", "aggregator"), (role_name, name, acl_name)
                    assert role_name == "shuffler" or "ingress" not in name, (role_name, name)
                if got and acl_name in ("hgetall", "hget", "hkeys", "dump") and name.startswith("state_key"):
                    assert role_name == "aggregator", (role_name, name, acl_name)
                assert not (got and acl_name in ("object|encoding", "memory|usage", "debug", "dump")), (
                    role_name, name, acl_name)
    assert mismatches == []
