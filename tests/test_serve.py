"""``ldptel serve``: a bad config exits non-zero with a message naming the key; without a Redis
URL it starts the embedded Redis (printing its URL), keeps its data across restarts, and stops it
on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import pytest
import redis
from http_support import Poster, embedded_redis_client, start_collector
from ingest_support import INGEST_TOKEN, config_text

from ldptel import keys
from ldptel.client import create_mechanism
from ldptel.store.redis_server import free_port

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
# the same path in-process (``ldptel.commands.cli.main``), cheaper
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
    return subprocess.Popen([sys.executable, "-m", "ldptel.commands.cli", "serve",
                             "--config", str(config), *args],
                            env=env, **kw)


@pytest.mark.slow  # one process per case; test_more_bad_configs covers the same path in-process
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
    from ldptel.commands.cli import main

    text, key = MORE_BAD_CONFIGS[case]
    cfg = tmp_path / "bad.toml"
    if text is not None:
        cfg.write_text(text)
    assert main(["serve", "--config", str(cfg), "--redis-url", "redis://127.0.0.1:1/0"]) == 2
    assert key in capsys.readouterr().err


@pytest.mark.slow
def test_embedded_redis_lifecycle(tmp_path):
    mech = create_mechanism("olh", epsilon=1.0, domain_size=1024)
    url = None
    for run in range(2):
        col = start_collector(tmp_path, config_text(), None, workers=1, stdout=subprocess.PIPE,
                              env={"LDPTEL_DATA_DIR": str(tmp_path / "data")})
        try:
            line = col.proc.stdout.readline()
            assert "embedded Redis at redis://127.0.0.1:" in line, line
            url = line.split(" at ")[1].split()[0]
            with pytest.raises(redis.AuthenticationError):  # the default user has a password
                redis.Redis.from_url(url).ping()
            client = embedded_redis_client(tmp_path / "data", url)  # each process on its role
            # the AOF kept the first run's batch (in ingress, or shuffled into the analysis stream:
            # 5 reports make one batch there too; the reader may count entries, not read them)
            assert client.xlen(keys.ingress_key("olh")) + client.xlen(keys.stream_key("olh")) == run
            poster = Poster(col.url)
            batch = mech.encode_batch(np.arange(5), rng=np.random.default_rng(run), campaign="olh")
            assert poster.post(batch.SerializeToString(), token=INGEST_TOKEN)[0] == 202
            poster.close()
            client.close()
        finally:
            col.proc.send_signal(signal.SIGTERM)
            assert col.proc.wait(timeout=30) == 0
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    assert list((tmp_path / "data").iterdir())[0].name.startswith("redis-ldptel-")
