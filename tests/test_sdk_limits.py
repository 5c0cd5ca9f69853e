"""The SDK against a collector with a small ``max_body_bytes``: it learns the limits from
``GET /v1/campaigns``, never sends a body over them, splits a queued row that is too big instead of
dropping it, and a chunk that must be split does not hold up other campaigns' reports."""

from __future__ import annotations

import http.client
import socket
import socketserver
import struct
import threading
from urllib.parse import urlsplit

import pytest
from http_support import start_collector
from ingest_support import INGEST_TOKEN, config_text, entries, stored_reports

from ldptel.client import TelemetryClient

MAX_BODY = 64 << 10
MIB = 1 << 20
pytestmark = pytest.mark.collector(config_text(max_body=MAX_BODY, max_reports=800))


def make_client(collector, tmp_path, **kw) -> TelemetryClient:
    return TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite", **kw)


def test_sdk_learns_the_collector_limits(collector, tmp_path):
    client = make_client(collector, tmp_path)
    client.campaigns()
    assert (client.limits.max_body_bytes, client.limits.max_reports_per_batch) == (MAX_BODY, 800)
    client.close(flush_timeout=None)


def test_oversized_row_is_split_and_other_campaigns_are_delivered_in_one_flush(
        collector, tmp_path, redis_client):
    """One queued row of 1,000 OUE reports (d = 1021: ≈ 128 KB, twice the limit) ahead of 50 GRR
    reports: one flush delivers all 1,050 and drops nothing."""
    client = make_client(collector, tmp_path)
    mech = client.mechanism("oue")
    row = mech.encode_batch(list(range(1000)), campaign="oue", batch_id=b"")
    assert len(row.SerializeToString()) > 2 * MAX_BODY - 4096
    client.queue.append("oue", 1000, row.SerializeToString())  # a row queued under a larger limit
    for v in range(50):
        client.report("grr", v % 5)
    result = client.flush(timeout=20)
    assert (result.accepted, result.dropped, result.pending) == (1050, 0, 0), result
    assert stored_reports(redis_client, "oue") == 1000 and stored_reports(redis_client, "grr") == 50
    assert all(len(e[b"batch"]) <= MAX_BODY for e in entries(redis_client, "oue"))
    client.close()


def test_report_many_rows_fit_the_limits(collector, tmp_path, redis_client):
    client = make_client(collector, tmp_path, batch_size=1000)
    assert client.report_many("oue", [v % 1021 for v in range(3000)]) == 3000
    result = client.flush(timeout=20)
    assert (result.accepted, result.dropped, result.pending) == (3000, 0, 0), result
    got = entries(redis_client, "oue")
    assert sum(int(e[b"count"]) for e in got) == 3000
    assert all(len(e[b"batch"]) <= MAX_BODY and int(e[b"count"]) <= 800 for e in got)
    client.close()


class CuttingProxy(socketserver.ThreadingTCPServer):
    """A reverse proxy in front of the collector with a smaller body limit than the collector's,
    as a front end may have: a body over 1 MiB is read and refused with 413; a body over 8 MiB
    is not read at all: the connection is reset at once (the client's write fails)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, target: str) -> None:
        self.target, self.cuts, self.refused = urlsplit(target).netloc, 0, 0
        super().__init__(("127.0.0.1", 0), ProxyHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ProxyHandler(socketserver.StreamRequestHandler):
    server: CuttingProxy

    def handle(self) -> None:
        method, path, _ = self.rfile.readline().decode().split(" ", 2)
        headers = {}
        while (line := self.rfile.readline().decode().strip()):
            name, _, value = line.partition(":")
            headers[name.strip()] = value.strip()
        length = int(headers.get("Content-Length", 0))
        if length > 8 * MIB:
            self.server.cuts += 1
            self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        body = self.rfile.read(length) if length else None
        if length > MIB:
            self.server.refused += 1
            status, data = 413, b'{"error": "too_large", "detail": "proxy limit"}'
        else:
            conn = http.client.HTTPConnection(self.server.target, timeout=30)
            conn.request(method, path, body, {k: v for k, v in headers.items()
                                              if k in ("Authorization", "Content-Type", "Accept")})
            resp = conn.getresponse()
            status, data = resp.status, resp.read()
            conn.close()
        self.wfile.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)


def test_connection_cut_while_writing_a_large_body_splits_it(redis_url, redis_client, tmp_path):
    """The collector allows 16 MiB, a front end resets the connection of bodies over 8 MiB: the
    SDK's 10 MB chunk fails while being written (nothing stored), is split, and one flush delivers
    every report exactly once."""
    collector = start_collector(tmp_path / "c", config_text(max_body=16 * MIB, max_reports=100_000),
                                redis_url)
    proxy = CuttingProxy(collector.url)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        client = TelemetryClient(proxy.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite",
                                 batch_size=100_000)
        for _ in range(10):
            client.report_many("oue", [v % 1021 for v in range(8000)])
        result = client.flush(timeout=60)
        assert (result.accepted, result.dropped, result.pending) == (80_000, 0, 0), result
        assert proxy.cuts >= 1
        assert stored_reports(redis_client, "oue") == 80_000
        client.close(flush_timeout=None)
    finally:
        proxy.shutdown()
        proxy.server_close()
        collector.stop()
