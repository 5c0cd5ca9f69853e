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
from dataclasses import dataclass, field
from typing import cast

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
    HOLD = "hold"  # the campaign is paused: its reports stay queued, the flush goes on without them


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


# the collector's campaigns digest, on every ingest answer (headers are looked up lower-case)
HINT_HEADER = "ldptel-campaigns"


class HttpStatus(Exception):
    """The collector answered a non-2xx ``status`` (with its ``body``, Retry-After seconds and
    headers). The message holds the decoded JSON error (``HTTP 409 campaign_paused: {…}``), never
    a bytes repr; ``code`` and ``detail`` are its ``error`` and ``detail``."""

    def __init__(self, status: int, body: bytes, retry_after: float | None,
                 headers: dict[str, str] | None = None) -> None:
        self.status, self.body, self.retry_after = status, body, retry_after
        self.headers = headers or {}
        self.code, self.detail = decode_error(body)
        super().__init__(describe(status, self.code, self.detail, body))


def decode_error(body: bytes) -> tuple[str | None, object]:
    """(``error``, ``detail``) of a JSON error body (``{"error": …, "detail": …}``), else
    (None, the body as text)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None, body.decode("utf-8", "replace")
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return doc["error"], doc.get("detail")
    return None, doc


def describe(status: int, code: str | None, detail: object, body: bytes) -> str:
    """``HTTP <status> <code>: <detail>`` (the detail as JSON when it is not text), at most ~300
    characters of detail."""
    if code is None and not body:
        return f"HTTP {status}"
    text = detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False)
    if len(text) > 300:
        text = text[:300] + "…"
    return f"HTTP {status} {code}: {text}" if code else f"HTTP {status}: {text}"


@dataclass
class FlushResult:
    """Outcome of one ``flush``: reports the collector accepted, reports in batches it already had
    (retries), reports dropped as invalid, reports still queued (``held``: of them, those of
    paused campaigns), and the last error if any."""

    accepted: int = 0
    duplicates: int = 0
    dropped: int = 0
    pending: int = 0
    error: str | None = None
    # reports of paused campaigns (``409 campaign_paused``), by campaign: they stay queued and are
    # sent once the campaign resumes; they never hold up the other campaigns nor the flush
    held: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the queue is empty."""
        return self.pending == 0


def error_code(body: bytes) -> str | None:
    """The ``error`` of a JSON error body (``{"error": …, "detail": …}``), or None."""
    return decode_error(body)[0]


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


class AnswerTooLarge(OSError):
    """An answer longer than the caller's ``max_bytes``: refused while reading (not kept)."""


ERROR_BODY_BYTES = 64 << 10  # of an error answer, at most this much is read


def request(url: str, token: str, timeout: float, method: str, body: bytes | None = None,
            content_type: str | None = None, headers_seen: dict[str, str] | None = None,
            max_bytes: int | None = None, authorization: str | None = None,
            accept: str = "application/json") -> bytes:
    """The response body of one bearer-authenticated request; ``HttpStatus`` for a non-2xx answer,
    ``BodyCutOff`` when the connection broke while the body was being written, ``AnswerTooLarge``
    for an answer over ``max_bytes`` (read no further), ``OSError`` for other network errors and
    timeouts. ``headers_seen``, if given, receives the answer's headers (of an error answer too), by
    lower-case name. ``authorization``: the whole ``Authorization`` value instead of the bearer
    token (a Privacy Pass token, ``PrivateToken token="…"``; issue 37)."""
    headers = {"Accept": accept}
    auth = authorization or (f"Bearer {token}" if token else None)
    if auth:
        headers["Authorization"] = auth
    if content_type:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            if headers_seen is not None:
                headers_seen.update((k.lower(), v) for k, v in resp.headers.items())
            if max_bytes is None:
                return cast("bytes", resp.read())
            if resp.length is not None and resp.length > max_bytes:
                raise AnswerTooLarge(f"the answer is {resp.length} bytes, over {max_bytes}")
            data = resp.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise AnswerTooLarge(f"the answer is over {max_bytes} bytes")
            return cast("bytes", data)
    except urllib.error.HTTPError as exc:
        raw = exc.read(ERROR_BODY_BYTES) if exc.fp is not None else b""
        answer = {k.lower(): v for k, v in exc.headers.items()} if exc.headers else {}
        if headers_seen is not None:
            headers_seen.update(answer)
        retry = answer.get("retry-after")
        try:
            retry_after = float(retry) if retry is not None else None
        except ValueError:
            retry_after = None
        raise HttpStatus(exc.code, raw, retry_after, answer) from None
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
