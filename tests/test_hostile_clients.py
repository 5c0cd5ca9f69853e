"""A client holding the ingest token (it ships in every app) against a real ``ldptel serve``
(granian, two workers) on the session Redis, over real sockets, each client from its own loopback
source address (127.0.0.x: the collector tells them apart as it tells devices apart):

- stalled bodies (issue 34, item 1): 50 connections (from 21 addresses) that send a
  ``POST /v1/reports`` head and never the body leave ``/healthz`` and an honest device's
  ``POST /v1/reports`` answering within 1 s; an address with
  ``max_unfinished_bodies_per_address`` bodies still arriving gets 429 for the next at once;
- a flooder (item 7): one address posting at full speed with the shared token leaves an honest
  device of another address 0 of 20 requests refused, and the flood is refused per address
  (``rate_limit_per_address_per_minute``), not out of the token's shared budget.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from http_support import Collector, start_collector
from ingest_support import INGEST_TOKEN, PROTOBUF, config_text

from ldptel.client import create_mechanism

PER_ADDRESS = 4  # max_unfinished_bodies_per_address (the default)
TOKEN_LIMIT = 3000  # rate_limit_per_minute: a flood at full speed spends it within seconds
ADDRESS_LIMIT = 600  # rate_limit_per_address_per_minute (the default)
HONEST, FLOODER, STALLER = "127.0.0.1", "127.0.0.2", "127.0.0.3"


def _loopback_aliases() -> bool:
    try:
        with socket.socket() as s:
            s.bind((FLOODER, 0))
        return True
    except OSError:
        return False


pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not _loopback_aliases(), reason="no 127.0.0.2 on this machine's loopback")]


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    text = config_text(rate_limit=TOKEN_LIMIT, per_address=None)  # the per-address defaults
    c = start_collector(tmp_path_factory.mktemp("hostile"), text, redis_url, workers=2)
    yield c
    c.stop()


def batch(n: int = 2) -> bytes:
    mech = create_mechanism("grr", epsilon=2.0, domain_size=5)
    rng = np.random.default_rng()
    return mech.encode_batch(rng.integers(0, 5, n), rng=rng, campaign="grr").SerializeToString()


def connect(port: int, source: str, timeout: float = 5.0) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))


def post(conn: http.client.HTTPConnection, body: bytes) -> int:
    conn.request("POST", "/v1/reports", body=body,
                 headers={"Content-Type": PROTOBUF, "Authorization": f"Bearer {INGEST_TOKEN}"})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def healthz(conn: http.client.HTTPConnection) -> int:
    conn.request("GET", "/healthz")
    resp = conn.getresponse()
    resp.read()
    return resp.status


def stalled(port: int, source: str) -> socket.socket:
    """A connection that sent a ``POST /v1/reports`` head (and 2 of its 1,000 body bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    s.sendall(f"POST /v1/reports HTTP/1.1\r\nHost: collector\r\nAuthorization: Bearer {INGEST_TOKEN}\r\n"
              f"Content-Type: {PROTOBUF}\r\nContent-Length: 1000\r\n\r\n\n\x03".encode())
    return s


def timed(call) -> tuple[object, float]:
    t0 = time.monotonic()
    out = call()
    return out, time.monotonic() - t0


def test_stalled_bodies_leave_the_collector_answering(stack: Collector) -> None:
    # 30 from one address (4 per process wait for their bodies, the others are refused at once)
    # and 20 from 20 others (each waits, holding one of the 2 × 32 app threads)
    socks = [stalled(stack.port, STALLER) for _ in range(30)]
    socks += [stalled(stack.port, f"127.0.0.{10 + i}") for i in range(20)]
    try:
        time.sleep(0.5)  # every head has reached the collector
        for _ in range(4):  # fresh connections land on either worker
            conn = connect(stack.port, HONEST, timeout=5)
            try:
                (status, took) = timed(lambda: healthz(conn))  # noqa: B023
                assert status == 200 and took < 1.0, (status, took)
                (status, took) = timed(lambda: post(conn, batch()))  # noqa: B023
                assert status == 202 and took < 1.0, (status, took)
            finally:
                conn.close()
        # beyond the per-address cap, the stalled requests were refused at once (429), before
        # any thread waited for their bodies
        answers = []
        for s in socks[:30]:
            s.settimeout(0.2)
            try:
                answers.append(s.recv(200).split(b" ", 2)[1])
            except TimeoutError:
                answers.append(b"waiting")
        assert answers.count(b"429") >= 30 - 2 * PER_ADDRESS, answers
    finally:
        for s in socks:
            s.close()


def test_a_flood_with_the_shared_token_leaves_honest_devices_served(stack: Collector) -> None:
    stop = threading.Event()
    flooded: dict[int, int] = {}

    def flood() -> None:
        conn = connect(stack.port, FLOODER)
        body = batch(1)  # the same batch again and again: a duplicate costs the collector little
        while not stop.is_set():
            try:
                status = post(conn, body)
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = connect(stack.port, FLOODER)
                continue
            flooded[status] = flooded.get(status, 0) + 1
        conn.close()

    floods = [threading.Thread(target=flood) for _ in range(3)]
    for t in floods:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while sum(flooded.values()) < 1.5 * TOKEN_LIMIT and time.monotonic() < deadline:
            time.sleep(0.1)  # enough to spend the token's whole budget, had it been counted
        honest = connect(stack.port, HONEST)
        statuses = []
        for _ in range(20):
            statuses.append(post(honest, batch()))
            time.sleep(0.05)
        honest.close()
    finally:
        stop.set()
        for t in floods:
            t.join()
    assert statuses.count(202) == 20, statuses
    assert sum(flooded.values()) >= 1.5 * TOKEN_LIMIT, flooded
    # the flood was refused per address: at most the limit of each of the two worker processes
    assert flooded.get(202, 0) <= 2 * ADDRESS_LIMIT, flooded
    assert flooded.get(429, 0) > 0, flooded
