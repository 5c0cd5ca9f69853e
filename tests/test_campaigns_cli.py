"""``ldptel campaigns`` finds its Redis as ``ldptel serve`` does (issue 25): with ``--config`` the
embedded Redis of ``serve --config FILE`` and its role credentials; with ``--redis-url`` (before
or after the action) the credentials of the embedded Redis that URL names. Before, ``campaigns
apply --config F --redis-url U`` was "unrecognized arguments: --redis-url" and ``campaigns
--redis-url U list`` a traceback ending in AuthenticationError against serve's embedded Redis;
the example config had no admin token. ``set NAME KEY=VALUE`` changes a campaign live; pausing
again without a reason keeps the first reason; a partial admin PUT names PATCH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ldptel.campaigns.config import load_config
from ldptel.commands.serve import embedded_redis
from ldptel.credentials import ENV, embedded_data_dir
from ldptel.store import registry
from ldptel.store.redis_client import connect

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ldptel.toml"
pytestmark = pytest.mark.integration


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The embedded Redis exactly as ``ldptel serve --config <copy of the example>`` sets it up
    (role users, the credentials file in its data directory), with the campaigns applied."""
    monkeypatch.setenv("LDPTEL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("REDIS_URL", raising=False)
    cfg = tmp_path / "ldptel.toml"
    cfg.write_text(EXAMPLE.read_text())
    data = embedded_data_dir(cfg)
    data.mkdir(parents=True)
    config = load_config(cfg)
    monkeypatch.delenv(ENV, raising=False)  # restored as it was after the test
    server = embedded_redis(config, data)  # sets $LDPTEL_REDIS_CREDENTIALS for serve's children
    os.environ.pop(ENV)
    server.start()
    try:
        registry.apply(_admin(server.url, data), config.tables)
        yield cfg, server.url
    finally:
        server.stop()


def _admin(url: str, data: Path):
    os.environ[ENV] = str(data / "redis-credentials.json")
    try:
        return connect(url, role="admin")
    finally:
        del os.environ[ENV]


def ldptel(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", ENV)}
    return subprocess.run([sys.executable, "-m", "ldptel.commands.cli", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_example_config_has_an_admin_token() -> None:
    assert load_config(EXAMPLE).server.admin_tokens


def test_campaigns_find_serves_redis(served) -> None:
    cfg, url = served
    by_config = ldptel("campaigns", "list", "--config", str(cfg))
    assert by_config.returncode == 0, by_config.stderr
    assert "homepage\tactive\tversion 1" in by_config.stdout
    # issue 35: "epsilon -" for a shuffled-fakes campaign; its mode and central target instead
    assert ("search-category\tactive\tversion 1\tfrequency\tshuffled-fakes: central epsilon 1 (delta 1e-08), "
            "no local epsilon (the true value, sealed)") in by_config.stdout, by_config.stdout


def test_campaigns_by_the_url_serve_prints(served) -> None:
    cfg, url = served
    by_url = ldptel("campaigns", "--redis-url", url, "list")  # was: AuthenticationError
    assert by_url.returncode == 0 and "homepage\tactive\tversion 1" in by_url.stdout, by_url.stderr
    after = ldptel("campaigns", "apply", "--config", str(cfg), "--redis-url", url)
    assert after.returncode == 0 and "homepage: unchanged, version 1" in after.stdout, after.stderr


def test_set_changes_a_campaign_live(served) -> None:
    cfg, url = served
    done = ldptel("campaigns", "set", "homepage", "epsilon=2", "description=every page", "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "homepage: new version, version 2 (epsilon)"
    shown = json.loads(ldptel("campaigns", "show", "homepage", "--config", str(cfg)).stdout)
    table = shown["versions"][-1]["table"]
    assert table["epsilon"] == 2 and table["description"] == "every page" and table["domain"][0] == "home"
    bad = ldptel("campaigns", "set", "homepage", "epsilon=-1", "--config", str(cfg))
    assert bad.returncode == 2 and "campaigns[homepage].epsilon" in bad.stderr
    assert ldptel("campaigns", "set", "nope", "epsilon=1", "--config", str(cfg)).returncode == 1


def test_set_central_delta_of_a_shuffled_campaign_makes_a_new_version(served) -> None:
    """The example's search-category is shuffled-fakes: its fake rate is planned from central_delta,
    so ``set central_delta=…`` makes version 2 (never an in-place change of its plan)."""
    cfg, url = served
    done = ldptel("campaigns", "set", "search-category", "central_delta=1e-9", "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith("search-category: new version, version 2 (") and "central_delta" in line, line
    shown = json.loads(ldptel("campaigns", "show", "search-category", "--config", str(cfg)).stdout)
    assert [v["table"]["central_delta"] for v in shown["versions"]] == [1e-8, 1e-9]
    same = ldptel("campaigns", "set", "search-category", "description=per batch", "--config", str(cfg))
    assert same.stdout.strip() == "search-category: updated, version 2 (description)", same.stderr


def test_no_serve_says_how_to_find_one(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LDPTEL_DATA_DIR", str(tmp_path))
    out = ldptel("campaigns", "list", "--config", str(EXAMPLE))
    assert out.returncode == 2 and "ldptel serve --config" in out.stderr and "Traceback" not in out.stderr


def test_pausing_again_keeps_the_reason(redis_client) -> None:
    registry.put(redis_client, {"name": "c", "oracle": "grr", "epsilon": 1.0, "domain_size": 4})
    registry.set_status(redis_client, "c", "paused", "data review")
    assert registry.set_status(redis_client, "c", "paused")["reason"] == "data review"
    assert registry.set_status(redis_client, "c", "active")["reason"] == ""
