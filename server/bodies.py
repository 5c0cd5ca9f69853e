"""Reading a request body within a limit and a deadline (``BodyGuard``), and draining the body of
a refused request.

**Deadline and cap per address** (issue 34, item 1). The WSGI servers hand a request to one of a
worker's few app threads as soon as its head has arrived, and ``wsgi.input.read`` then blocks that
thread until the body does; neither granian nor gunicorn can bound that wait. A client holding
the ingest token (it ships in every app) could send a few ``POST /v1/reports`` heads, stall their
bodies, and so take every app thread: ``POST /v1/reports`` and ``/healthz`` timed out for
everyone. So the collector reads a body through ``BodyGuard``:

- while at most ``DIRECT_READS`` bodies are being read in the process (the usual case: a body
  arrives with its head or just after), the app thread reads its body itself, as before: no
  thread hand-off on the hot path. Beyond that, the read runs in a helper thread (a pool that
  grows only while reads are stalled) and the app thread waits for it at most ``[server]
  body_timeout_seconds``; a body that has not arrived by then is answered 408 ``body_timeout``
  with ``Connection: close`` and the app thread is free again (the helper stays with the
  stalled connection until the client sends the rest or goes away). So stalled bodies hold at
  most ``DIRECT_READS`` app threads of a process for longer than the deadline (the server's app
  threads are many more: ``commands.granian_pool.THREADS``), and every other request finds one;
- each client address (``server.addresses``) may have at most ``[server]
  max_unfinished_bodies_per_address`` bodies being read at once in one process, stalled helpers
  included; the next request of that address is answered 429 ``too_many_unfinished_bodies`` at
  once, before its body is read, so one address never holds more than that many threads.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from flask import request
from werkzeug.wsgi import get_content_length

from ldptel.server.validation import Rejection

DRAIN_LIMIT = 64 << 20  # bytes read and discarded at most from a refused request's body
_BLOCK = 64 << 10


def read_body(limit: int) -> bytes:
    """The request body, at most ``limit`` bytes, else 413 (``read_environ``)."""
    return read_environ(request.environ, limit)


def read_environ(environ: dict, limit: int) -> bytes:
    """The body of the WSGI request ``environ``, at most ``limit`` bytes, else 413. With a
    Content-Length (checked against ``limit`` by the caller) exactly that many bytes are read; a
    chunked body (no length) is read from the server-terminated input up to ``limit`` + 1 bytes,
    so one byte too many is detected exactly; neither: no body."""
    length = get_content_length(environ)
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    if length is not None:
        if length > limit:
            raise Rejection(413, "too_large", f"request body exceeds {limit} bytes", "body_too_large")
        parts, left = [], length
        while left > 0:
            part = stream.read(left)
            if not part:
                break
            parts.append(part)
            left -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)
    if "wsgi.input_terminated" not in environ:
        return b""
    parts, size = [], 0
    while size <= limit:
        part = stream.read(limit + 1 - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    if size > limit:
        raise Rejection(413, "too_large", f"request body exceeds {limit} bytes", "body_too_large")
    return b"".join(parts)


MAX_HELPERS = 4096  # helper threads at most per process (stalled reads; each address holds a few)
DIRECT_READS = 8  # bodies read by their app thread at most at once per process; beyond: the helpers


class BodyGuard:
    """Body reads with a deadline and a cap of unfinished bodies per client address (module
    docstring); one per process (thread-safe)."""

    def __init__(self, timeout: float, per_address: int) -> None:
        self.timeout, self.per_address = timeout, per_address
        self._lock = threading.Lock()
        self._unfinished: dict[str, int] = {}  # address → bodies being read (helpers still busy)
        self._reading = 0  # bodies being read in this process (direct and helpers)
        self._pool: ThreadPoolExecutor | None = None

    def _helpers(self) -> ThreadPoolExecutor:
        if self._pool is None:  # made in the worker that reads (never inherited over a fork)
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(MAX_HELPERS, thread_name_prefix="ldptel-body")
        return self._pool

    def read(self, environ: dict, limit: int, address: str) -> bytes:
        """``read_environ(environ, limit)`` within the deadline: 408 after it, 429 when
        ``address`` already has ``per_address`` bodies being read, 413 over ``limit``."""
        with self._lock:
            held = self._unfinished.get(address, 0)
            if held >= self.per_address:
                raise Rejection(429, "too_many_unfinished_bodies", f"{held} request bodies from this "
                                "address are still arriving; finish or close them first", "unfinished_bodies")
            self._unfinished[address] = held + 1
            self._reading += 1
            direct = self._reading <= DIRECT_READS
        if direct:
            try:
                return read_environ(environ, limit)
            finally:
                self._done(address)
        try:
            future = self._helpers().submit(read_environ, environ, limit)
        except BaseException:
            self._done(address)
            raise
        future.add_done_callback(lambda _: self._done(address))
        try:
            return future.result(self.timeout)
        except FutureTimeout:
            raise Rejection(408, "body_timeout", f"the request body did not arrive within {self.timeout:g} s",
                            "body_timeout") from None

    def _done(self, address: str) -> None:
        with self._lock:
            self._reading -= 1
            left = self._unfinished.get(address, 1) - 1
            if left > 0:
                self._unfinished[address] = left
            else:
                self._unfinished.pop(address, None)

    def unfinished(self) -> int:
        """Bodies being read in this process now (stalled helpers included)."""
        with self._lock:
            return self._reading


def drain_unread_body(limit: int = DRAIN_LIMIT) -> bool:
    """``drain_environ`` of the current Flask request."""
    return drain_environ(request.environ, limit)


def drain_environ(environ: dict, limit: int = DRAIN_LIMIT) -> bool:
    """Read and discard the body of a request whose body was not read (at most ``limit`` bytes).
    True when the body was read to its end, so the answer can be sent on a reusable connection;
    False when it is longer than ``limit`` (answer with ``Connection: close``)."""
    env = environ
    stream = env.get("wsgi.input")
    length = get_content_length(env)
    if stream is None:
        return True
    if length is None and not env.get("wsgi.input_terminated"):
        return "HTTP_TRANSFER_ENCODING" not in env  # no body, or one we cannot delimit
    if length is not None and length > limit:
        return False
    left = limit if length is None else length
    while left > 0:
        part = stream.read(min(_BLOCK, left))
        if not part:
            return True
        left -= len(part)
    return length is not None or not stream.read(1)


__all__ = ["DIRECT_READS", "DRAIN_LIMIT", "BodyGuard", "drain_environ", "drain_unread_body", "read_body",
           "read_environ"]
