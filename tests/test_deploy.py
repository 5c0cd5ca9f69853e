"""The production layout of ``deploy/``: a separate Redis, ``ldptel serve`` (collector only), the
``ldptel shuffle`` shuffler and ``ldptel aggregate`` workers, each started from its systemd unit's
``ExecStart`` line with the variables of ``deploy/ldptel.env`` (only ports, paths and tokens
changed for a test), receives reports from the SDK and counts them in the export API. The reverse
proxy's body limit equals the collector's ``max_body_bytes``."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from http_support import http_request

from ldptel.campaigns.config import ServerConfig, load_config
from ldptel.client import TelemetryClient
from ldptel.store.redis_server import free_port, redis_server_binary

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
INGEST, EXPORT = "deploy-ingest-token", "deploy-export-token"


def exec_start(unit: Path) -> str:
    """The ``ExecStart=`` command line of a unit file (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", unit.read_text())
    [line] = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    return line.removeprefix("ExecStart=").strip()


def env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines, as systemd's ``EnvironmentFile=`` reads them (comments skipped)."""
    lines = path.read_text().splitlines()
    pairs = [ln.split("=", 1) for ln in lines if ln.strip() and not ln.startswith("#")]
    return {k.strip(): v.strip() for k, v in pairs}


def command(unit: Path, env: dict[str, str], paths: dict[str, str]) -> list[str]:
    """The unit's command as systemd runs it: ``${VAR}`` replaced by the variable's value (one
    word), then the installed paths of the unit mapped onto this machine's."""
    words = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], w) for w in shlex.split(exec_start(unit))]
    return [paths.get(w, w) for w in words]


def test_units_and_env_file_agree() -> None:
    """Every ``${VAR}`` a unit uses is set in ldptel.env; serve gets --redis-url and --no-aggregator
    (collector only)."""
    env = env_file(DEPLOY / "ldptel.env")
    for unit in DEPLOY.glob("*.service"):
        for name in re.findall(r"\$\{(\w+)\}", exec_start(unit)):
            assert name in env, f"{unit.name}: ${{{name}}} is not in ldptel.env"
    serve = shlex.split(exec_start(DEPLOY / "ldptel-serve.service"))
    assert serve[1] == "serve" and {"--config", "--redis-url", "--no-aggregator"} <= set(serve)
    assert shlex.split(exec_start(DEPLOY / "ldptel-aggregate@.service"))[1] == "aggregate"
    assert shlex.split(exec_start(DEPLOY / "ldptel-shuffle.service"))[1] == "shuffle"
    assert set(env) >= {"REDIS_URL", "LDPTEL_INGEST_TOKENS", "LDPTEL_EXPORT_TOKENS", "LDPTEL_SECRET_KEY",
                        "LDPTEL_LOG_FORMAT", "LDPTEL_LOG_LEVEL", "LDPTEL_ACCESS_LOG"}


def shipped_redis_password() -> str:
    [password] = re.findall(r"(?m)^requirepass (\S+)$", (DEPLOY / "redis.conf").read_text())
    return password


def test_redis_needs_a_password_and_redis_url_has_it() -> None:
    """Issue 35: the shipped redis.conf had no password, so on a shared host the per-role users
    restricted nothing (the default user could do everything without one)."""
    password = shipped_redis_password()
    url = env_file(DEPLOY / "ldptel.env")["REDIS_URL"]
    assert url.startswith(f"redis://:{password}@"), url


def test_proxy_body_limit_matches_max_body_bytes() -> None:
    conf = (DEPLOY / "nginx.conf").read_text()
    [limit] = re.findall(r"^\s*client_max_body_size\s+(\d+);", conf, re.M)
    assert int(limit) == ServerConfig().max_body_bytes
    assert int(limit) == load_config(ROOT / "examples" / "ldptel.toml").server.max_body_bytes
    assert re.search(r"^\s*listen 443 ssl", conf, re.M) and "ssl_certificate " in conf
    assert "$remote_addr" not in conf  # its access log leaves client addresses out


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


def answers(url: str, path: str, status: int) -> bool:
    try:
        return http_request(url, "GET", path, timeout=2).status == status
    except OSError:
        return False


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@pytest.mark.slow
def test_layout_from_the_unit_files_counts_sdk_reports(tmp_path: Path) -> None:
    redis_port, http_port = free_port(), free_port()
    config = tmp_path / "ldptel.toml"
    config.write_text('[[campaigns]]\nname = "screens"\noracle = "grr"\nepsilon = 2.0\n'
                      'domain = ["home", "search", "cart"]\nmin_reports = 100\nshards = 2\n'
                      'shuffle_max_delay = "1s"\n')  # 601 reports < shuffle_min_reports
    # the shipped redis.conf, with this test's port and data directory
    redis_conf = tmp_path / "redis.conf"
    (tmp_path / "redis-data").mkdir()
    redis_conf.write_text(re.sub(r"(?m)^dir .*$", f"dir {tmp_path / 'redis-data'}",
                                 re.sub(r"(?m)^port .*$", f"port {redis_port}",
                                        (DEPLOY / "redis.conf").read_text())))
    password = shipped_redis_password()
    env = {**env_file(DEPLOY / "ldptel.env"),
           "REDIS_URL": f"redis://:{password}@127.0.0.1:{redis_port}/0", "LDPTEL_CONFIG": str(config),
           "LDPTEL_PORT": str(http_port), "LDPTEL_WORKERS": "1",
           "LDPTEL_INGEST_TOKENS": INGEST, "LDPTEL_EXPORT_TOKENS": EXPORT,
           "LDPTEL_SECRET_KEY": "deploy-test-secret-key"}
    paths = {"/opt/ldptel/venv/bin/ldptel": str(Path(sys.executable).parent / "ldptel"),
             "/usr/bin/redis-server": str(redis_server_binary()),
             "/etc/ldptel/redis.conf": str(redis_conf)}
    base_env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("LDPTEL_")}
    procs: dict[str, subprocess.Popen] = {}

    def start(name: str, unit: str) -> None:
        with (tmp_path / f"{name}.log").open("wb") as log:
            procs[name] = subprocess.Popen(command(DEPLOY / unit, env, paths), stdout=log,
                                           stderr=subprocess.STDOUT, env={**base_env, **env})

    try:
        start("redis", "ldptel-redis.service")
        client = redis.Redis(port=redis_port, password=password)
        wait_until(lambda: _pings(client), 20, "redis-server")
        with pytest.raises(redis.AuthenticationError):  # issue 35: no password, nothing
            redis.Redis(port=redis_port).get("x")
        start("serve", "ldptel-serve.service")
        url = f"http://127.0.0.1:{http_port}"
        wait_until(lambda: answers(url, "/healthz", 200), 60, "ldptel serve")
        start("shuffle", "ldptel-shuffle.service")
        for name in ("aggregate-1", "aggregate-2"):
            start(name, "ldptel-aggregate@.service")
        for name, line in (("shuffle", '"message": "shuffler '), ("aggregate-1", '"message": "consumer '),
                           ("aggregate-2", '"message": "consumer ')):  # running (SIGTERM handler set)
            log = tmp_path / f"{name}.log"
            wait_until(lambda log=log, line=line: line in log.read_text(), 30, name)

        values = np.random.default_rng(4).choice(["home", "search", "cart"], size=600, p=[0.6, 0.3, 0.1])
        sdk = TelemetryClient(url, INGEST, queue_path=tmp_path / "queue.sqlite")
        assert sdk.report_many("screens", list(values)) == 600
        sdk.report("screens", "home")
        result = sdk.flush(timeout=60)
        assert result.accepted == 601 and sdk.pending() == 0, result

        def counted() -> bool:
            reply = http_request(url, "GET", "/v1/campaigns/screens/estimates?format=json",
                                 headers={"Authorization": f"Bearer {EXPORT}"}, timeout=5)
            return reply.status == 200 and json.loads(reply.body)["n_reports"] == 601

        wait_until(counted, 60, "601 reports counted by the aggregators")
        assert all(p.poll() is None for p in procs.values()), {n: p.poll() for n, p in procs.items()}
    finally:
        codes = {name: stop(procs[name]) for name in reversed(list(procs))}
    assert codes == dict.fromkeys(procs, 0), codes
    # the env file's LDPTEL_LOG_FORMAT=json reached every ldptel process
    for name in ("serve", "shuffle", "aggregate-1", "aggregate-2"):
        lines = [ln for ln in (tmp_path / f"{name}.log").read_text().splitlines() if ln.startswith("{")]
        assert lines and all("level" in json.loads(ln) for ln in lines), name


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
