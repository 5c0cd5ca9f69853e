"""A background thread (``server.background.ProcessThread``: the collector app's metrics flusher
and health probe) ends once its object is gone, so an app a test drops stops reading Redis. 100
dropped apps' 200 threads once slowed every later test of a pytest-xdist worker (a tracemalloc
test took 153 s instead of 10 s)."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

from agg_support import write_config

from ldptel.server.app import create_app
from ldptel.server.background import ProcessThread


class Owner:
    def __init__(self, name: str) -> None:
        self.rounds = 0
        self.thread = ProcessThread(self.round, name)
        self.thread.ensure()

    def round(self) -> float:
        self.rounds += 1
        return 0.01


def _alive(name: str) -> int:
    return sum(t.name == name for t in threading.enumerate())


def _ended(name: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        gc.collect()
        if _alive(name) == 0:
            return True
        time.sleep(0.02)
    return False


def test_a_round_thread_runs_while_its_object_lives_and_ends_after() -> None:
    owner = Owner("test-rounds")
    owner.thread.ensure()  # once per process: no second thread
    time.sleep(0.2)
    seen = owner.rounds
    time.sleep(0.2)
    assert _alive("test-rounds") == 1 and owner.rounds > seen > 3  # still going while it lives
    del owner
    assert _ended("test-rounds", 2.0)


def test_a_dropped_app_stops_its_metrics_and_probe_threads(tmp_path: Path, redis_url: str) -> None:
    before = {t.ident for t in threading.enumerate()}
    cfg = write_config(tmp_path / "c.toml", [{"name": "c", "oracle": "grr", "epsilon": 1.0,
                                              "domain_size": 2}])
    app = create_app(cfg, redis_url)
    state = app.extensions["ldptel"]
    if state.live is not None:
        state.live.stop()  # the registry poller has its own stop (``AppServer.close``)
    ours = [t for t in threading.enumerate()
            if t.ident not in before and t.name in ("ldptel-metrics", "ldptel-probe")]
    assert sorted(t.name for t in ours) == ["ldptel-metrics", "ldptel-probe"]
    del app, state
    deadline = time.monotonic() + 10.0  # the probe wakes every REFRESH_S
    while time.monotonic() < deadline and any(t.is_alive() for t in ours):
        gc.collect()
        time.sleep(0.1)
    assert not [t.name for t in ours if t.is_alive()]
