"""Reading a request body within a limit, and draining the body of a refused request.

A client such as urllib writes the whole body before it reads the answer. If the server answers
and closes the connection while the body is still arriving, the client's write fails (EPIPE /
ECONNRESET) and it never sees the answer. So a refused request's unread body is read and
discarded — at socket speed, 64 KiB at a time, never buffered — up to ``DRAIN_LIMIT`` bytes; the
answer then reaches the client and the connection stays usable. A body larger than that is not
drained and the answer carries ``Connection: close`` (the client may see a connection error).
"""

from __future__ import annotations

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


__all__ = ["DRAIN_LIMIT", "drain_environ", "drain_unread_body", "read_body", "read_environ"]
