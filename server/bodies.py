"""Reading a request body within a limit (``BodyGuard``: at most a few unfinished bodies per
client address), and draining the body of a refused request.

**Unfinished bodies per address** (issue 34, item 1). The WSGI servers hand a request to one of a
worker's app threads as soon as its head has arrived, and ``wsgi.input.read`` then blocks that
thread until the body arrives; neither granian nor gunicorn can bound that wait, and an app thread
that gives up does not help (granian keeps the thread until the body ends or the client closes:
measured). A client holding the ingest token (it ships in every app) could send a few
``POST /v1/reports`` heads, stall the bodies, and so take every app thread: ``POST /v1/reports``
and ``/healthz`` timed out for everyone. So the collector reads a body through ``BodyGuard``:
each client address (``server.addresses``: the peer, or the forwarded address behind
``trusted_proxies``; an IPv6 address by its /64) may have at most ``[server]
max_unfinished_bodies_per_address`` bodies being read at once in one process, and the next request
of that address is answered 429 ``too_many_unfinished_bodies`` at once, before any read, with
``Connection: close``. With many more app threads than that (``commands.granian_pool.THREADS``:
a thread waiting for a body costs no CPU), one address cannot take a worker, and the collector
keeps answering. The deadline on a slow body is the reverse proxy's (``deploy/nginx.conf``: the
whole body read, within ``client_body_timeout``, before the collector sees the request).
"""

from __future__ import annotations

import threading
from typing import Any

from flask import request
from werkzeug.wsgi import get_content_length

from ldptel.server.validation import Rejection

DRAIN_LIMIT = 64 << 20  # bytes read and discarded at most from a refused request's body
_BLOCK = 64 << 10


def read_body(limit: int) -> bytes:
    """The request body, at most ``limit`` bytes, else 413 (``read_environ``)."""
    return read_environ(request.environ, limit)


def read_environ(environ: dict[str, Any], limit: int) -> bytes:
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


class BodyGuard:
    """Body reads with a cap of unfinished bodies per client address (module docstring); one
    per process (thread-safe)."""

    def __init__(self, per_address: int) -> None:
        self.per_address = per_address
        self._lock = threading.Lock()
        self._unfinished: dict[str, int] = {}  # address → bodies being read now

    def read(self, environ: dict[str, Any], limit: int, address: str) -> bytes:
        """``read_environ(environ, limit)`` (413 over ``limit``), or 429 at once when ``address``
        already has ``per_address`` bodies being read in this process."""
        with self._lock:
            held = self._unfinished.get(address, 0)
            if held >= self.per_address:
                raise Rejection(429, "too_many_unfinished_bodies", f"{held} request bodies from this "
                                "address are still arriving; finish or close them first", "unfinished_bodies")
            self._unfinished[address] = held + 1
        try:
            return read_environ(environ, limit)
        finally:
            with self._lock:
                left = self._unfinished.get(address, 1) - 1
                if left > 0:
                    self._unfinished[address] = left
                else:
                    self._unfinished.pop(address, None)

    def unfinished(self) -> int:
        """Bodies being read in this process now."""
        with self._lock:
            return sum(self._unfinished.values())


def drain_unread_body(limit: int = DRAIN_LIMIT) -> bool:
    """``drain_environ`` of the current Flask request."""
    return drain_environ(request.environ, limit)


def drain_environ(environ: dict[str, Any], limit: int = DRAIN_LIMIT) -> bool:
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


__all__ = ["DRAIN_LIMIT", "BodyGuard", "drain_environ", "drain_unread_body", "read_body",
           "read_environ"]
