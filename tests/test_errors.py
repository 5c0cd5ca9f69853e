"""One error root: every public error of the SDK, the export client and the CLI is an
``ldptel.LdptelError``. The unit part checks the classes and that ``ldptel.errors``' docstring
tree names each; the integration part raises each through a real code path (a real collector,
a real Redis) and catches it with ``except ldptel.LdptelError``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import redis
from http_support import Collector
from ingest_support import EXPORT_TOKEN, INGEST_TOKEN

import ldptel
import ldptel.client
import ldptel.errors
import ldptel.export
from ldptel import credentials
from ldptel.aggregator import store
from ldptel.campaigns.config import parse_config
from ldptel.client import configs as client_configs
from ldptel.keys import state_key
from ldptel.server import errors as server_errors
from ldptel.store import tally
from ldptel.store.redis_server import DataDirLock


def public_error_classes() -> set[type[BaseException]]:
    found: set[type[BaseException]] = set()
    for module in (ldptel, ldptel.errors, ldptel.client, ldptel.export, server_errors):
        for name in getattr(module, "__all__", dir(module)):
            obj = getattr(module, name, None)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                found.add(obj)
    return found


def test_every_public_error_derives_from_the_root_and_is_in_the_tree() -> None:
    classes = public_error_classes()
    assert len(classes) >= 16, sorted(c.__name__ for c in classes)
    tree = ldptel.errors.__doc__ or ""
    for cls in classes:
        assert issubclass(cls, ldptel.LdptelError), cls
        assert cls.__name__ in tree, f"{cls.__name__} is missing from ldptel.errors' tree"
    assert ldptel.LdptelError is ldptel.errors.LdptelError is ldptel.client.LdptelError


def caught(action: Callable[[], object]) -> type[BaseException]:
    """The class of what ``action`` raised, caught as ``ldptel.LdptelError`` (else the test fails)."""
    try:
        action()
    except ldptel.LdptelError as exc:
        return type(exc)
    raise AssertionError(f"{action} raised nothing")


def test_config_and_cli_errors(tmp_path: Path) -> None:
    assert caught(lambda: parse_config({})) is ldptel.ConfigError
    bad = tmp_path / "credentials.json"
    bad.write_text("not json")
    assert caught(lambda: credentials.load(bad)) is ldptel.CredentialsError
    held = DataDirLock(tmp_path).acquire()
    try:
        assert caught(lambda: DataDirLock(tmp_path).acquire()) is ldptel.DataDirBusy
    finally:
        held.release()
    camp = parse_config({"campaigns": [{"name": "w", "epsilon": 1.0, "domain_size": 4,
                                        "window": "1h"}]}).campaigns[0]
    assert caught(lambda: tally.resolve_window(None, camp, "12:00")) is ldptel.WindowError  # type: ignore[arg-type]
    mech = ldptel.client.create_mechanism("oue", epsilon=2.0, domain_size=64)
    batch = mech.encode_batch(np.arange(4), rng=np.random.default_rng(1))
    batch.count = 5
    assert caught(lambda: mech.checked_columns(batch)) is ldptel.InvalidReport
    cols = mech.columns(mech.encode_batch(np.arange(20), rng=np.random.default_rng(1)))
    cols["bits"] = cols["bits"].copy()
    cols["bits"][12] = 0xFF  # every bit set: no honest device
    assert caught(lambda: mech.validate_columns(cols, 20)) is ldptel.ImplausibleReport


@pytest.mark.collector(workers=1)
def test_sdk_and_export_errors(collector: Collector, tmp_path: Path, redis_url: str) -> None:
    client = ldptel.client.TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "q.db")
    assert caught(lambda: client.report("no-such-campaign", 1)) is ldptel.client.UnknownCampaign
    strict = ldptel.client.TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "s.db",
                                           max_epsilon=0.01)
    assert caught(lambda: strict.report("grr", 1)) is ldptel.client.CampaignRefused
    unreachable = ldptel.client.TelemetryClient("http://127.0.0.1:9", INGEST_TOKEN,
                                                queue_path=tmp_path / "u.db", timeout=0.5)
    assert caught(lambda: unreachable.campaigns(refresh=True)) is ldptel.client.TelemetryError
    (tmp_path / "a-file").write_text("")  # a queue path under a file: no directory can be made
    broken = ldptel.client.TelemetryClient(collector.url, INGEST_TOKEN,
                                           queue_path=tmp_path / "a-file" / "x.db")
    assert caught(lambda: broken.queue) is ldptel.client.QueueUnavailable
    retired = {"grr": {"version": 1, "status": "retired", "reason": "done"}}
    assert caught(lambda: client_configs.config_for("grr", retired, 1)) is ldptel.client.VersionClosed
    export = ldptel.export.Client(collector.url, "wrong-export-token")
    assert caught(lambda: export.estimates("grr")) is ldptel.ExportError
    good = ldptel.export.Client(collector.url, EXPORT_TOKEN)
    assert caught(lambda: good.estimates("no-such-campaign")) is ldptel.ExportError
    for c in (client, strict, unreachable, broken):
        c.close(flush_timeout=0)


def test_aggregator_state_mismatch(redis_client: redis.Redis) -> None:
    cfg = parse_config({"campaigns": [{"name": "m", "oracle": "grr", "epsilon": 1.0, "domain_size": 4}]})
    camp = cfg.campaigns[0]
    redis_client.hset(state_key("m", 0), "acc:0:x", b"not an accumulator")
    template = store.new_accumulator(camp)
    assert caught(lambda: store.check_state(redis_client, camp, 0, template)) is ldptel.StateMismatch
