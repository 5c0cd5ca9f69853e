"""Oversized request bodies: a client that writes the whole body before reading the answer (urllib,
as the SDK) reads the collector's 413 for bodies up to 64 MiB, under gunicorn and under the
Werkzeug server; nothing is stored."""

from __future__ import annotations

import json
import tomllib
import urllib.error
import urllib.request

import pytest
from agg_support import HttpStack
from ingest_support import INGEST_TOKEN, PROTOBUF, config_text, total_entries

from ldptel.campaigns.config import parse_config

MIB = 1 << 20


def post_with_urllib(url: str, size: int) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/v1/reports", data=b"\x00" * size, method="POST", headers={
        "Content-Type": PROTOBUF, "Authorization": f"Bearer {INGEST_TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("size", [16 * MIB, 64 * MIB])
def test_urllib_reads_the_413_of_a_large_body_from_gunicorn(size, collector, redis_client):
    assert post_with_urllib(collector.url, size) == (413, {
        "error": "too_large", "detail": f"request body exceeds {MIB} bytes"})
    assert total_entries(redis_client) == 0


def test_urllib_reads_the_413_of_a_large_body_from_werkzeug(redis_url, redis_client):
    stack = HttpStack(parse_config(tomllib.loads(config_text())), redis_url)
    try:
        status, data = post_with_urllib(stack.url, 16 * MIB)
    finally:
        stack.close()
    assert (status, data["error"]) == (413, "too_large")
    assert total_entries(redis_client) == 0
