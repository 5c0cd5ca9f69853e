"""``ldptel serve``: a bad config exits non-zero with a message naming the key; without a Redis
URL it starts the embedded Redis (printing its URL), keeps its data across restarts, and stops it
on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import redis
from ingest_support import INGEST_TOKEN, Poster, config_text, request

from ldptel import keys
from ldptel.client import create_mechanism
from ldptel.redis_server import free_port

GOOD_CAMPAIGN = '[[campaigns]]\nname = "ok"\noracle = "grr"\nepsilon = 1.0\ndomain_size = 4\n'
# run as a real `ldptel serve` process
BAD_CONFIGS = {
    "unknown key": ('[server]\ningest_tokens = ["abcdefgh"]\ncolour = "red"\n' + GOOD_CAMPAIGN,
                    "server.colour"),
    "missing epsilon": ('[[campaigns]]\nname = "ok"\noracle = "olh"\ndomain_size = 8\n',
                        "campaigns[ok].epsilon"),
    "bad name": ('[[campaigns]]\nname = "Bad Name!"\nepsilon = 1.0\ndomain_size = 8\n',
                 "campaigns[0].name"),
    "bad domain": ('[[campaigns]]\nname = "ok"\nepsilon = 1.0\ndomain = ["a"]\n', "campaigns[ok].domain"),
}
# the same path in-process (``ldptel.cli.main``), cheaper
MORE_BAD_CONFIGS = {
    "unknown campaign key": (GOOD_CAMPAIGN + "bloom = 3\n", "campaigns[ok].bloom"),
    "bad domain size": ('[[campaigns]]\nname = "ok"\nepsilon = 1.0\ndomain_size = 1\n',
                        "campaigns[ok].domain_size"),
    "epsilon too large": ('[[campaigns]]\nname = "ok"\nepsilon = 11\ndomain_size = 8\n',
                          "campaigns[ok].epsilon"),
    "short token": ('[server]\ningest_tokens = ["abc"]\n' + GOOD_CAMPAIGN, "server.ingest_tokens"),
    "not toml": ("[[campaigns]\n", "not valid TOML"),
    "missing file": (None, "file not found"),
}


def serve(config, *args, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "ldptel.cli", "serve", "--config", str(config), *args],
                            env=env, **kw)


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_exits_naming_the_key(case, tmp_path):
    text, key = BAD_CONFIGS[case]
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    proc = serve(cfg, "--redis-url", "redis://127.0.0.1:1/0", "--port", str(free_port()),
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, (out, err)
    assert key in err and "config error" in err


@pytest.mark.parametrize("case", sorted(MORE_BAD_CONFIGS))
def test_more_bad_configs(case, tmp_path, capsys):
    from ldptel.cli import main

    text, key = MORE_BAD_CONFIGS[case]
    cfg = tmp_path / "bad.toml"
    if text is not None:
        cfg.write_text(text)
    assert main(["serve", "--config", str(cfg), "--redis-url", "redis://127.0.0.1:1/0"]) == 2
    assert key in capsys.readouterr().err


def test_embedded_redis_lifecycle(tmp_path):
    cfg = tmp_path / "ldptel.toml"
    cfg.write_text(config_text())
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL",) and not k.startswith("LDPTEL_")}
    env["LDPTEL_DATA_DIR"] = str(tmp_path / "data")
    mech = create_mechanism("olh", epsilon=1.0, domain_size=1024)
    url = None
    for run in range(2):
        port = free_port()
        proc = serve(cfg, "--port", str(port), "--workers", "1", env=env, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, text=True)
        try:
            line = proc.stdout.readline()
            assert "embedded Redis at redis://127.0.0.1:" in line, line
            url = line.split(" at ")[1].split()[0]
            deadline = time.monotonic() + 30
            while True:
                try:
                    if request(f"http://127.0.0.1:{port}", "GET", "/healthz")[0] == 200:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            client = redis.Redis.from_url(url)
            assert client.xlen(keys.stream_key("olh")) == run  # the AOF kept the first run's batch
            poster = Poster(f"http://127.0.0.1:{port}")
            batch = mech.encode_batch(np.arange(5), rng=np.random.default_rng(run), campaign="olh")
            assert poster.post(batch.SerializeToString(), token=INGEST_TOKEN)[0] == 202
            poster.close()
            client.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    assert list((tmp_path / "data").iterdir())[0].name.startswith("redis-ldptel-")
