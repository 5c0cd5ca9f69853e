"""Helpers for the collector tests: start ``ldptel serve`` (gunicorn) in a subprocess on a free
127.0.0.1 port, talk HTTP to it, and count what Redis stored."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from ldptel.redis_server import free_port

INGEST_TOKEN = "test-ingest-token-0001"
INGEST_TOKEN_2 = "test-ingest-token-0002"
EXPORT_TOKEN = "test-export-token-0001"
PROTOBUF = "application/x-protobuf"

CAMPAIGNS = """
[[campaigns]]
name = "grr"
oracle = "grr"
epsilon = 2.0
domain = ["apple", "banana", "cherry", "durian", "elder"]

[[campaigns]]
name = "sue"
oracle = "sue"
epsilon = 1.0
domain_size = 100

[[campaigns]]
name = "oue"
oracle = "oue"
epsilon = 1.0
domain_size = 1021

[[campaigns]]
name = "olh"
oracle = "olh"
epsilon = 1.0
domain_size = 1024
window = "1h"

[[campaigns]]
name = "hadamard"
oracle = "hadamard"
epsilon = 1.0
domain_size = 100
shards = 4

[[campaigns]]
name = "rappor"
oracle = "rappor"
bloom_bits = 60
hashes = 2
cohorts = 8
f = 0.5
p = 0.5
q = 0.75
candidates = ["a", "b", "c", "d"]
"""


def config_text(rate_limit: int = 1_000_000, max_body: int = 1 << 20, max_reports: int = 10_000,
                extra: str = "") -> str:
    return f"""
[server]
ingest_tokens = ["{INGEST_TOKEN}", "{INGEST_TOKEN_2}"]
export_tokens = ["{EXPORT_TOKEN}"]
rate_limit_per_minute = {rate_limit}
max_body_bytes = {max_body}
max_reports_per_batch = {max_reports}
{CAMPAIGNS}
{extra}
"""


@dataclass
class Collector:
    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_collector(tmp: Path, text: str, redis_url: str, workers: int = 1,
                    timeout: float = 30.0) -> Collector:
    """``ldptel serve`` on a free loopback port against ``redis_url``; waits for /healthz."""
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = tmp / "ldptel.toml"
    cfg.write_text(text)
    port = free_port()
    log_path = tmp / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ldptel.cli", "serve", "--config", str(cfg), "--redis-url", redis_url,
         "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)],
        stdout=subprocess.DEVNULL, stderr=log_path.open("wb"), env=env,
    )
    collector = Collector(proc, port, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"ldptel serve exited ({proc.returncode}):\n{collector.log()}")
        try:
            status, _ = request(collector.url, "GET", "/healthz")
            if status == 200:
                return collector
        except OSError:
            pass
        if time.monotonic() > deadline:
            collector.stop()
            raise RuntimeError(f"ldptel serve did not answer in {timeout}s:\n{collector.log()}")
        time.sleep(0.05)


def request(url: str, method: str, path: str, body: bytes | None = None,
            headers: dict | None = None, timeout: float = 15.0) -> tuple[int, object]:
    """One HTTP request; returns (status, parsed JSON or text)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    ctype = resp.getheader("Content-Type", "")
    return resp.status, json.loads(raw) if "json" in ctype else raw.decode(errors="replace")


class Poster:
    """Keep-alive connection posting batches (fast enough for property tests)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=15)

    def post(self, body: bytes, token: str | None = INGEST_TOKEN, content_type: str = PROTOBUF,
             headers: dict | None = None) -> tuple[int, object]:
        hdrs = {"Content-Type": content_type, **(headers or {})}
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        for attempt in range(2):
            try:
                self.conn.request("POST", "/v1/reports", body=body, headers=hdrs)
                resp = self.conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=15)
                if attempt:
                    raise
        if resp.getheader("Connection", "").lower() == "close":
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=15)
        ctype = resp.getheader("Content-Type", "")
        return resp.status, json.loads(raw) if "json" in ctype else raw.decode(errors="replace")

    def close(self) -> None:
        self.conn.close()


def stream_keys(client: redis.Redis) -> list[bytes]:
    return sorted(client.scan_iter(match="{ldptel:*}:reports", count=1000))


def total_entries(client: redis.Redis) -> int:
    """Entries in all report streams."""
    return sum(client.xlen(k) for k in stream_keys(client))


def stored_reports(client: redis.Redis, campaign: str | None = None) -> int:
    """Sum of the ``count`` field over the stream entries (of one campaign, or all)."""
    total = 0
    for key in stream_keys(client):
        if campaign is not None and not key.startswith(f"{{ldptel:{campaign}:".encode()):
            continue
        total += sum(int(f[b"count"]) for _, f in client.xrange(key))
    return total


def entries(client: redis.Redis, campaign: str) -> list[dict]:
    out = []
    for key in stream_keys(client):
        if key.startswith(f"{{ldptel:{campaign}:".encode()):
            out.extend(f for _, f in client.xrange(key))
    return out
