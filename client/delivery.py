"""Talking to the collector: one HTTP request, what an error status means for a queued chunk
(``classify``), the retry delay, and the outcome of a flush.

- 2xx: the chunk is delivered (``{"duplicate": true}``: the collector already had its batch_id);
- 401, 403 → ``STOP``: a token problem; the flush stops and the queue is kept (it is fixable);
- 413 for a chunk of several reports → ``REGROUP``: split it into smaller chunks (also done, without
  sending, for a body over the collector's ``max_body_bytes``, and after ``BodyCutOff`` on a large
  body: the connection broke while the body was being written, so nothing of it was stored);
- network errors, 408, 425, 429, 5xx → ``RETRY`` with exponential backoff and full jitter: the delay
  is uniform in [0, min(max_backoff, base·2^attempt)], at least the server's Retry-After;
- any other status (400, 404, 409, 415, 422, or 413 for a single report) → ``DROP``: retrying
  cannot fix it, so the chunk is dropped and logged.
"""

from __future__ import annotations

import enum
import json
import random
import urllib.error
import urllib.request
from dataclasses import dataclass

RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
AUTH_STATUS = frozenset({401, 403})
TOO_LARGE = 413
CONTENT_TYPE = "application/x-protobuf"


class Action(enum.Enum):
    """What ``flush`` does with a chunk after one attempt."""

    SENT = "sent"
    RETRY = "retry"
    DROP = "drop"
    REGROUP = "regroup"
    STOP = "stop"


def classify(status: int, reports: int = 1) -> Action:
    """The action for an HTTP error ``status`` answered to a chunk of ``reports`` reports (see the
    module docstring)."""
    if status in AUTH_STATUS:
        return Action.STOP
    if status == TOO_LARGE and reports > 1:
        return Action.REGROUP
    return Action.RETRY if status in RETRY_STATUS else Action.DROP


class BodyCutOff(OSError):
    """The connection broke while the request body was being written (the collector closed it):
    the collector did not receive the whole body, so it stored nothing of it."""


CUT_OFF = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class HttpStatus(Exception):
    """The collector answered a non-2xx ``status`` (with its ``body`` and Retry-After seconds)."""

    def __init__(self, status: int, body: bytes, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {body[:300]!r}")
        self.status, self.body, self.retry_after = status, body, retry_after


@dataclass
class FlushResult:
    """Outcome of one ``flush``: reports the collector accepted, reports in batches it already had
    (retries), reports dropped as invalid, reports still queued, and the last error if any."""

    accepted: int = 0
    duplicates: int = 0
    dropped: int = 0
    pending: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the queue is empty."""
        return self.pending == 0


def error_code(body: bytes) -> str | None:
    """The ``error`` of a JSON error body (``{"error": …, "detail": …}``), or None."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    code = doc.get("error") if isinstance(doc, dict) else None
    return code if isinstance(code, str) else None


@dataclass
class Attempt:
    """One attempt at a chunk: the ``action``, the ``error`` to report in the ``FlushResult``
    (None: leave it), why a dropped chunk is dropped, the server's Retry-After, and whether a
    sent batch was a duplicate."""

    action: Action
    error: str | None = None
    reason: str = ""
    retry_after: float | None = None
    duplicate: bool = False
    code: str = ""  # a dropped chunk's reason counted in ``health().dropped`` (none: not counted)
    accepted: int | None = None  # reports delivered when not the whole chunk (sealed: some stale)

    @classmethod
    def from_status(cls, exc: HttpStatus, reports: int) -> Attempt:
        return cls(classify(exc.status, reports), error=str(exc),
                   reason=f"collector answered {exc}", retry_after=exc.retry_after)


def request(url: str, token: str, timeout: float, method: str, body: bytes | None = None,
            content_type: str | None = None) -> bytes:
    """The response body of one bearer-authenticated request; ``HttpStatus`` for a non-2xx answer,
    ``BodyCutOff`` when the connection broke while the body was being written, ``OSError`` for
    other network errors and timeouts."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read()
    except urllib.error.HTTPError as exc:
        raw = exc.read() if exc.fp is not None else b""
        retry = exc.headers.get("Retry-After") if exc.headers else None
        try:
            retry_after = float(retry) if retry is not None else None
        except ValueError:
            retry_after = None
        raise HttpStatus(exc.code, raw, retry_after) from None
    except urllib.error.URLError as exc:  # urllib wraps only errors of sending the request
        if body is not None and isinstance(exc.reason, CUT_OFF):
            raise BodyCutOff(f"connection cut while sending {len(body)} bytes: {exc.reason}") from exc
        raise


def backoff(jitter: random.Random, attempt: int, base: float, cap: float,
            retry_after: float | None) -> float:
    """Full jitter: uniform in [0, min(cap, base·2^attempt)], at least min(Retry-After, cap)."""
    delay = jitter.uniform(0, min(cap, base * 2 ** min(attempt, 30)))
    if retry_after is not None:
        delay = max(delay, min(retry_after, cap))
    return delay
