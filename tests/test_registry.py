"""The campaign registry in Redis: versions from changed parameters, in-place changes, the CLI, and
every collector worker and aggregator following a change within 2 s without a restart."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack, write_config

from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import ConfigError
from ldptel.shuffler.worker import Shuffler
from ldptel.store import registry, tally

A = {"name": "alpha", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "min_reports": 10}


def test_put_makes_versions_only_for_randomization_parameters(redis_client: redis.Redis) -> None:
    assert registry.put(redis_client, A).action == "created"
    assert registry.put(redis_client, A).action == "unchanged"
    assert registry.revision(redis_client) == 1  # unchanged writes nothing
    change = registry.put(redis_client, {**A, "description": "colors", "min_reports": 50})
    assert (change.action, change.version, change.changed) == ("updated", 1, ["description", "min_reports"])
    change = registry.put(redis_client, {**A, "epsilon": 3.0, "description": "colors"})
    assert (change.action, change.version, change.changed) == ("new_version", 2, ["epsilon"])
    change = registry.put(redis_client, {**A, "epsilon": 3.0, "domain_size": 6, "window": "1h"})
    assert (change.action, change.version) == ("new_version", 3)
    assert change.changed == ["domain_size", "window"]
    v1, v2, v3 = registry.versions_of(registry.record(redis_client, "alpha") or {})
    assert (v1.epsilon, v1.domain_size, v2.epsilon, v3.domain_size, v3.window) == (1.0, 8, 3.0, 6, "1h")
    assert v1.superseded_at and v2.superseded_at and v3.superseded_at is None
    assert v1.min_reports == v3.min_reports == 10  # campaign-wide keys of the latest apply to all
    rev = registry.revision(redis_client)
    with pytest.raises(ConfigError, match=r"^campaigns\[alpha\]\.epsilon: "):
        registry.put(redis_client, {**A, "epsilon": -1})
    with pytest.raises(ConfigError, match=r"^campaigns\[alpha\]\.shards: cannot change"):
        registry.put(redis_client, {**A, "shards": 2})
    with pytest.raises(ConfigError, match=r"^campaigns\[alpha\]\.bogus: unknown key"):
        registry.apply(redis_client, [{**A, "epsilon": 2.0}, {**A, "bogus": 1}])
    assert registry.revision(redis_client) == rev  # nothing written for bad input (apply: none)
    record = registry.set_status(redis_client, "alpha", "paused", "maintenance")
    assert record and record["status"] == "paused"
    assert registry.set_status(redis_client, "nope", "paused") is None


def test_live_config_follows_the_registry(tmp_path: Path, redis_client: redis.Redis) -> None:
    cfg = write_config(tmp_path / "c.toml", [A, {**A, "name": "beta"}])
    live = registry.Live(cfg, redis_client, interval=0)
    assert not live.refresh() and cfg.campaign("alpha").version == 1  # empty registry: the file
    registry.apply(redis_client, cfg.tables)
    registry.put(redis_client, {**A, "epsilon": 2.0})
    registry.put(redis_client, {**A, "name": "gamma"})
    before = live.config
    assert live.refresh()
    now = live.config
    assert [(c.name, c.version) for c in now.campaigns] == [("alpha", 2), ("beta", 1), ("gamma", 1)]
    assert [c.version for c in now.versions("alpha")] == [1, 2] and now.versions("alpha")[0].epsilon == 1.0
    # a new snapshot was swapped in; whoever held the old one still sees it whole
    assert before is cfg and [(c.name, c.version) for c in cfg.campaigns] == [("alpha", 1), ("beta", 1)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        now.campaigns[0].epsilon = 9.0  # type: ignore[misc]
    assert not live.refresh() and live.config is now  # same revision: nothing reloaded


def _eventually(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
    return check()


def test_background_poller_follows_the_registry_until_stopped(tmp_path: Path,
                                                               redis_client: redis.Redis) -> None:
    cfg = write_config(tmp_path / "c.toml", [A])
    live = registry.Live(cfg, redis_client, interval=0.05)
    registry.apply(redis_client, cfg.tables)
    live.poll_in_background()
    registry.put(redis_client, {**A, "epsilon": 2.0})
    assert _eventually(lambda: live.config.campaign("alpha").version == 2)  # the poller reloaded
    poller = live._poller
    registry.stop_pollers()
    assert poller is not None and not poller.is_alive()
    registry.put(redis_client, {**A, "epsilon": 3.0})  # version 3, unseen by a stopped poller
    time.sleep(0.3)
    assert live.config.campaign("alpha").version == 2
    live.poll_in_background()  # a stopped Live polls again when asked
    assert _eventually(lambda: live.config.campaign("alpha").version == 3)
    live.stop()


def _batch(camp, values, version: int):
    b = camp.mechanism().encode_batch(np.array(values), rng=np.random.default_rng(1), campaign=camp.name)
    b.campaign_version = version
    return b


@pytest.mark.slow
def test_collector_and_aggregator_see_a_change_within_two_seconds(
        tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    a = {**A, "shuffle_min_reports": 1}  # the shuffler releases every batch at once
    cfg = write_config(tmp_path / "c.toml", [a])
    registry.apply(redis_client, cfg.tables)
    http = HttpStack(cfg, redis_url)
    worker_cfg = write_config(tmp_path / "w.toml", [a])  # the aggregator's own copy of the file
    worker = Worker(worker_cfg, redis_client)
    shuffler = Shuffler(write_config(tmp_path / "s.toml", [a]), redis_client)  # and the shuffler's
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, kwargs={"stop": stop}, daemon=True) for w in (worker, shuffler)]
    for thread in threads:
        thread.start()
    try:
        assert http.post_batch(_batch(cfg.campaign("alpha"), [1, 2, 3], 1))["accepted"] == 3
        registry.put(redis_client, {**a, "epsilon": 2.0, "domain_size": 4})
        registry.put(redis_client, {**a, "name": "delta"})
        changed = time.monotonic()
        headers = {"Content-Type": "application/x-protobuf", "Authorization": "Bearer ingest-token-for-tests"}
        v2 = registry.versions_of(registry.record(redis_client, "alpha") or {})[-1]
        delta = registry.versions_of(registry.record(redis_client, "delta") or {})[-1]
        while True:  # the collector: version 2 and the new campaign accepted
            s2 = http.request("POST", "/v1/reports", _batch(v2, [0, 3], 2).SerializeToString(), headers)[0]
            s3 = http.request("POST", "/v1/reports", _batch(delta, [5], 1).SerializeToString(), headers)[0]
            if s2 == s3 == 202:
                break
            assert s2 in (202, 400) and s3 in (202, 400)
            assert time.monotonic() - changed < 2.0, "collector did not see the change within 2 s"
            time.sleep(0.05)
        seen = time.monotonic() - changed
        while not (tally.window_counts(redis_client, v2) and tally.window_counts(redis_client, delta)):
            assert time.monotonic() - changed < 2.0 + seen, "aggregator did not count within 2 s"
            time.sleep(0.05)
        assert tally.window_counts(redis_client, v2) == {0: 2}
        assert tally.window_counts(redis_client, cfg.versions("alpha")[0]) == {0: 3}
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        http.close()


@pytest.mark.slow
def test_campaigns_cli(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ldptel.commands.cli", "campaigns",
                               "--redis-url", redis_url,
                               *args], capture_output=True, text=True, timeout=60)

    path = tmp_path / "c.toml"
    write_config(path, [A])
    out = cli("apply", "--config", str(path))
    assert out.returncode == 0 and out.stdout.strip() == "alpha: created, version 1", out.stderr
    write_config(path, [{**A, "epsilon": 2.5}])
    assert cli("apply", "--config", str(path)).stdout.splitlines() == [
        "drift: alpha.epsilon: registry 1.0 → file 2.5", "alpha: new version, version 2 (epsilon)"]
    listed = cli("list")
    assert listed.returncode == 0 and listed.stdout.split() == ["alpha", "active", "version", "2",
                                                                "frequency", "epsilon", "2.5"]
    shown = json.loads(cli("show", "alpha").stdout)
    assert [v["table"]["epsilon"] for v in shown["versions"]] == [1.0, 2.5]
    assert cli("show", "nope").returncode == 1
    path.write_text(path.read_text().replace("epsilon = 2.5", "epsilon = 0"))
    bad = cli("apply", "--config", str(path))
    assert bad.returncode == 2 and "campaigns[alpha].epsilon" in bad.stderr
    assert registry.revision(redis_client) == 2


@pytest.mark.slow
def test_a_new_process_serves_the_registry_versions_from_its_first_request(
        tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    """A restarted collector whose file already holds the new parameters must not serve them as
    version 1 (devices would label ε = 2 reports as version 1, decoded with ε = 1); and a process
    that could not read the registry answers 503 instead of the file's campaigns."""
    registry.put(redis_client, A)
    registry.put(redis_client, {**A, "epsilon": 2.0})
    cfg = write_config(tmp_path / "c.toml", [{**A, "epsilon": 2.0}])
    http = HttpStack(cfg, redis_url)
    try:
        status, _, body = http.get(f"/v1/campaigns?versions={A['name']}:1", token="ingest-token-for-tests")
        shown = json.loads(body)["campaigns"][0]
        assert status == 200 and (shown["version"], shown["epsilon"]) == (2, 2.0)
        assert [c["epsilon"] for c in shown["older_versions"]] == [1.0]
    finally:
        http.close()
    from socket import socket

    with socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{s.getsockname()[1]}"
    http = HttpStack(write_config(tmp_path / "d.toml", [A]), dead)
    try:
        status, _, body = http.get("/v1/campaigns", token="ingest-token-for-tests")
        assert status == 503 and json.loads(body)["error"] == "unavailable"
    finally:
        http.close()
