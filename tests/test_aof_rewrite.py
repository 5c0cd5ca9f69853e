"""The embedded Redis's AOF is rewritten by ``ldptel serve`` (``server.serve.RedisChild``): the
AOF logs every write, so ingress batches the shuffler deleted stay on disk — whole, with their
batch ids — until a rewrite writes only the current data."""

from __future__ import annotations

import os
import time

import pytest
import redis

from ldptel.commands.serve import RedisChild
from ldptel.store.redis_server import EmbeddedRedis

MARKER = os.urandom(16).hex().encode()  # stands for a batch id inside an ingress batch


def _aof(data_dir) -> bytes:
    return b"".join(p.read_bytes() for p in data_dir.glob("appendonly*"))


def _wait_rewritten(r: redis.Redis, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        info = r.info("persistence")
        if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
            assert info["aof_last_bgrewrite_status"] == "ok", info
            return
        assert time.monotonic() < deadline, info
        time.sleep(0.05)


@pytest.mark.integration  # its own Redis
def test_a_deleted_ingress_entry_leaves_the_aof_at_the_rewrite(tmp_path) -> None:
    embedded = EmbeddedRedis(data_dir=tmp_path)
    child = RedisChild(embedded, rewrite_every=3600)
    child.start()
    try:
        r = redis.Redis.from_url(embedded.url)
        r.xadd("{ldptel:c:0}:ingress", {"batch": MARKER, "window": 0, "count": 1}, id="0-1")
        r.set("kept", "still here")
        r.xdel("{ldptel:c:0}:ingress", "0-1")
        time.sleep(1.2)  # appendfsync everysec
        child.check()  # not due: nothing rewritten
        assert MARKER in _aof(tmp_path)  # deleted from memory, still on disk (the control)
        child._next_rewrite = time.monotonic()  # due now
        child.check()
        _wait_rewritten(r)
        assert MARKER not in _aof(tmp_path)
        assert r.get("kept") == b"still here"
    finally:
        child.stop()
