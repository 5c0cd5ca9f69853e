"""Shared fixtures: one real Redis per test session (the embedded server, or ``REDIS_URL``)."""

from __future__ import annotations

import os

import pytest
import redis

from ldptel.redis_server import EmbeddedRedis


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory):
    """URL of a real Redis: ``REDIS_URL`` if set, else an embedded server for the session."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    server = EmbeddedRedis(data_dir=tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_client(redis_url: str):
    """A client on the session Redis, flushed before each test."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()
