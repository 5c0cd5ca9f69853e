"""One log format for every process (``ldptel.logs``): UTC timestamps and levels on every line,
text or JSON, chosen by ``--log-format``/``--log-level`` or ``$LDPTEL_LOG_FORMAT``/``$LDPTEL_LOG_LEVEL``;
the aggregator's lines go through it; the collector's access log is optional and leaves the client
address out unless asked for."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from agg_support import aggregate_cmd, random_batches, write_config, xadd_batches
from http_support import http_request, start_collector
from ingest_support import INGEST_TOKEN

from ldptel import logs

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
                       r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+\[\d+\]: ")


def record(msg: str, *args: object, level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("ldptel.test", level, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    return rec


def test_text_and_json_formats() -> None:
    rec = record("drained %d entries", 7, entries=7)
    text = logs.formatter("text").format(rec)
    assert TEXT_LINE.match(text) and text.endswith(": drained 7 entries"), text
    doc = json.loads(logs.formatter("json").format(rec))
    assert doc["level"] == "INFO" and doc["logger"] == "ldptel.test" and doc["message"] == "drained 7 entries"
    assert doc["entries"] == 7 and doc["pid"] == os.getpid()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", doc["time"])
    try:
        raise ValueError("boom")
    except ValueError:
        rec = record("failed", level=logging.ERROR)
        rec.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(logs.formatter("json").format(rec))["exception"]
    with pytest.raises(ValueError, match="log format"):
        logs.formatter("xml")


def test_redact_url() -> None:
    assert logs.redact_url("redis://:s3cret@db.internal:6379/0") == "redis://:***@db.internal:6379/0"
    assert logs.redact_url("redis://app:s3cret@db:6379") == "redis://app:***@db:6379"
    assert logs.redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def _aggregate(tmp_path: Path, redis_client: redis.Redis, redis_url: str, args: list[str],
               env: dict[str, str]) -> list[str]:
    cfg = write_config(tmp_path / "logs.toml", [{"name": "logs", "oracle": "grr", "epsilon": 1.0,
                                                 "domain_size": 4}])
    xadd_batches(redis_client, cfg.campaigns[0], random_batches(cfg.campaigns[0], 300, 100, seed=3))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
    out = subprocess.run(aggregate_cmd(tmp_path / "logs.toml", redis_url) + args, capture_output=True,
                         text=True, timeout=60, env={**clean, **env})
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    return out.stderr.splitlines()


def test_aggregator_lines_are_json_with_time_and_level(tmp_path: Path, redis_client: redis.Redis,
                                                       redis_url: str) -> None:
    """``$LDPTEL_LOG_FORMAT=json``: every line the aggregator writes is one JSON object; the
    summary keeps its numbers (as fields too)."""
    lines = _aggregate(tmp_path, redis_client, redis_url, [], {"LDPTEL_LOG_FORMAT": "json"})
    docs = [json.loads(line) for line in lines]
    assert docs and all({"time", "level", "logger", "pid", "message"} <= set(d) for d in docs)
    drained = [d for d in docs if d["message"].startswith("drained ")]
    assert len(drained) == 1 and drained[0]["level"] == "INFO" and drained[0]["logger"] == "ldptel.aggregator"
    assert drained[0]["entries"] == 3 and drained[0]["reports"] == 300
    assert drained[0]["message"].startswith("drained 3 entries, 300 reports in ")


@pytest.mark.slow
def test_aggregator_text_lines_and_level(tmp_path: Path, redis_client: redis.Redis, redis_url: str) -> None:
    lines = _aggregate(tmp_path, redis_client, redis_url, ["--log-format", "text"],
                       {"LDPTEL_LOG_FORMAT": "json"})  # the flag wins over the variable
    assert lines and all(TEXT_LINE.match(line) for line in lines), lines
    assert any(" INFO ldptel.aggregator[" in line and ": drained 3 entries" in line for line in lines)
    redis_client.flushdb()
    assert _aggregate(tmp_path, redis_client, redis_url, ["--log-level", "warning"], {}) == []
    redis_client.flushdb()
    assert _aggregate(tmp_path, redis_client, redis_url, [], {"LDPTEL_LOG_LEVEL": "error"}) == []


def _access_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "gunicorn.access" in line]


@pytest.mark.slow
def test_collector_logs_and_access_log(tmp_path: Path, redis_url: str) -> None:
    """The server's own lines (granian's by default; gunicorn's, which serves the collector when
    the access log is on) and the access log share the format; the access log is off by default,
    and carries the client address only with ``--access-log-addresses``."""
    text = (f'[server]\ningest_tokens = ["{INGEST_TOKEN}"]\nexport_tokens = ["export-token-1"]\n'
            '[[campaigns]]\nname = "a"\noracle = "grr"\nepsilon = 1.0\ndomain_size = 4\n')
    seen: dict[str, str] = {}
    for name, env in [("off", {}), ("on", {"LDPTEL_ACCESS_LOG": "1"}),
                      ("addresses", {"LDPTEL_ACCESS_LOG": "1", "LDPTEL_ACCESS_LOG_ADDRESSES": "1"})]:
        col = start_collector(tmp_path / name, text, redis_url, env=env)
        try:
            assert http_request(col.url, "GET", "/v1/campaigns?probe=1").status == 401
        finally:
            col.stop()
        seen[name] = col.log()
    for name, log in seen.items():  # the collector: granian by default, gunicorn with the access log
        lines = [line for line in log.splitlines() if line.strip()]
        server = "_granian" if name == "off" else "gunicorn."
        assert any(server in line for line in lines), log
        assert all(TEXT_LINE.match(line) for line in lines if "gunicorn." in line or "_granian" in line), log
    assert _access_lines(seen["off"]) == []
    assert "Websockets are not supported" not in seen["off"]  # issue 35: granian said so at every start
    [line] = [ln for ln in _access_lines(seen["on"]) if "/v1/campaigns" in ln]
    assert re.search(r'\]: "GET /v1/campaigns" 401 \d+ \d+ms$', line), line  # no address, no query
    assert "127.0.0.1" not in line
    [line] = [ln for ln in _access_lines(seen["addresses"]) if "/v1/campaigns" in ln]
    assert re.search(r'\]: 127\.0\.0\.1 "GET /v1/campaigns" 401 \d+ \d+ms$', line), line
