"""Shared fixtures: one real Redis per test session (the embedded server, or ``REDIS_URL``), and
the collector of a test module (``ldptel serve`` on that Redis)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from http_support import Collector, start_collector
from ingest_support import config_text
from xdist_support import worker, worker_url

from ldptel.keys import SESSION_SECRET_KEY
from ldptel.store import registry
from ldptel.store.redis_server import EmbeddedRedis


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Redis: ``REDIS_URL`` if set (under pytest-xdist, each worker on its own
    database: ``worker_url``), else an embedded server for the session (one per worker process)."""
    if os.environ.get("REDIS_URL"):
        yield worker_url(os.environ["REDIS_URL"], worker())
        return
    server = EmbeddedRedis(data_dir=tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        if os.environ.get("LDPTEL_TEST_ACL") == "1":
            with_role_users(server.url, tmp_path_factory.mktemp("acl"))
        yield server.url
    finally:
        registry.stop_pollers()  # the in-process apps' registry pollers, before their Redis goes
        server.stop()


def pytest_configure(config: pytest.Config) -> None:
    """With ``REDIS_URL`` and ``-n N`` (N > 1), before any worker starts: every worker's database
    (``worker_url``) must be selectable, or the run stops naming it. A Redis Cluster (database 0
    only) or a server with fewer databases than workers is refused: run ``-n 0`` on it."""
    url = os.environ.get("REDIS_URL")
    workers = getattr(config.option, "numprocesses", None) or 0
    if not url or hasattr(config, "workerinput") or workers < 2:
        return
    for k in range(1, workers):
        try:
            client = redis.Redis.from_url(worker_url(url, f"gw{k}"), socket_timeout=10)
            client.ping()
            client.close()
        except (redis.RedisError, ValueError) as exc:
            raise pytest.UsageError(
                f"REDIS_URL with -n {workers}: worker gw{k} uses database {k} above the URL's "
                f"(so that no worker flushes another's keys), which this Redis refuses: {exc}. "
                "Run the suite with -n 0 on it, or give a Redis with more databases") from exc


def with_role_users(url: str, tmp) -> None:
    """``LDPTEL_TEST_ACL=1``: the role users (``ldptel.store.acl``) on the session Redis and their
    credentials in ``$LDPTEL_REDIS_CREDENTIALS``, so every process and app the tests start connects
    as its role (the tests' own clients stay the default user): the suite then shows a command
    or key a role lacks as a NOPERM failure. Tests that start a Redis of their own (e.g.
    test_redis_outage) are outside this mode: the credentials name the session Redis only."""
    from ldptel import credentials
    from ldptel.campaigns.config import load_config
    from ldptel.commands import acl_admin

    (tmp / "ldptel.toml").write_text(config_text())
    users = acl_admin.passwords(None)
    acl_admin.apply(redis.Redis.from_url(url), load_config(tmp / "ldptel.toml"), users)
    os.environ[credentials.ENV] = str(credentials.write(tmp / "credentials.json",
                                                        credentials.servers_of(url), users))


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client on the session Redis, flushed before each test, except the operator-session
    secret: a module's collector workers may still be loading it (a worker that read it before the
    flush and one that creates it after would sign cookies with different secrets)."""
    client = redis.Redis.from_url(redis_url)
    secret = client.get(SESSION_SECRET_KEY)
    client.flushdb()
    if secret is not None:
        client.set(SESSION_SECRET_KEY, secret)
    yield client
    client.close()


@pytest.fixture(scope="module")
def collector(request: pytest.FixtureRequest, redis_url: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    """``ldptel serve`` for one test module on the session Redis (flushed before it starts). The
    module sets its config with ``pytestmark = pytest.mark.collector(config_text, workers=n)``;
    the default is ``config_text()`` of ingest_support and two gunicorn workers."""
    marker = request.node.get_closest_marker("collector")
    text = marker.args[0] if marker and marker.args else config_text()
    workers = marker.kwargs.get("workers", 2) if marker else 2
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    c = start_collector(tmp_path_factory.mktemp("collector"), text, redis_url, workers=workers)
    yield c
    c.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tiers. Every test that drives Chromium (the ``browser`` fixture of
    test_operator_pages) is ``slow``; every test that needs a real Redis (the ``redis_url``
    fixture, directly or through ``redis_client``, ``collector``, …) is ``integration``. The
    unit tier, ``make test-fast``, is ``-m "not slow and not integration"``: no server, no Redis
    process (``LDPTEL_UNIT_TIER=1`` makes starting one fail the test)."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "browser" in names:
            item.add_marker(pytest.mark.slow)
        if "redis_url" in names:
            item.add_marker(pytest.mark.integration)


SERVER_COMMANDS = {"serve", "aggregate", "shuffle", "demo"}


@pytest.fixture(autouse=True)
def _unit_tier_starts_no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """``LDPTEL_UNIT_TIER=1`` (``make test-fast``): a test that starts a Redis server or an
    ``ldptel`` server command fails, naming what it started (mark it ``integration``)."""
    if os.environ.get("LDPTEL_UNIT_TIER") != "1":
        return

    def refuse_redis(self, *args, **kwargs):
        pytest.fail("the unit tier starts no Redis: mark this test integration (or slow)")

    popen = subprocess.Popen.__init__

    def checked_popen(self, args, *rest, **kwargs):
        argv = [str(a) for a in (args if isinstance(args, (list, tuple)) else [args])]
        if SERVER_COMMANDS & set(argv) or any(a.endswith("redis-server") for a in argv):
            pytest.fail(f"the unit tier starts no server: {' '.join(argv[:6])} (mark this test integration)")
        popen(self, args, *rest, **kwargs)

    monkeypatch.setattr(EmbeddedRedis, "start", refuse_redis)
    monkeypatch.setattr(subprocess.Popen, "__init__", checked_popen)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` (``make test``) as this suite wants it: the unit of work is a test
    module (its module-scoped stacks start once, on one worker), except for the tests of
    ``xdist_support.HEAVY``: together they are one unit, run one after another on one worker (two
    of them never run at once) and handed out before any module (none left for the end of the
    run, the other worker idle)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling
    from xdist_support import heavy

    class ModulesAndHeavy(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "heavy" if heavy(nodeid) else super()._split_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            if "heavy" in self.workqueue:
                self.workqueue.move_to_end("heavy", last=False)
            super()._assign_work_unit(node)

    return ModulesAndHeavy(config, log)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands the screenshot directories it used to the controller (below)."""
    import browser_support

    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["screenshots"] = [str(p) for p in browser_support.USED]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """The controller gathers each worker's screenshot directories (printed once at the end)."""
    import browser_support

    for path in getattr(node, "workeroutput", {}).get("screenshots", []):
        if Path(path) not in browser_support.USED:
            browser_support.USED.append(Path(path))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Where this run's screenshots are, and, when browser tests were skipped for want of
    Chromium, how to install it (on CI they fail instead: ``tests/browser_support.py``)."""
    import browser_support

    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if browser_support.SKIP_MARK in str(getattr(r, "longrepr", ""))]
    if skipped:
        write = terminalreporter.write_line
        title = f"{len(skipped)} browser tests SKIPPED: Chromium is missing"
        terminalreporter.write_sep("!", title, red=True)
        write(f"to run them: {browser_support.INSTALL_HINT}")
        write("(on CI, or with LDPTEL_REQUIRE_BROWSER=1, they fail instead of skipping)")
    for path in dict.fromkeys(browser_support.USED):  # both workers may name one
        terminalreporter.write_line(f"screenshots: {path}")
