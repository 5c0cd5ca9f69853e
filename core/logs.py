"""Logging of every ldptel process: one line per record on stderr, as text or as JSON.

``ldptel <command> --log-format text|json --log-level debug|info|warning|error`` (defaults from
``$LDPTEL_LOG_FORMAT`` / ``$LDPTEL_LOG_LEVEL``, else ``text`` / ``info``). ``configure`` installs
the one handler on the root logger and exports both variables, so child processes (the
aggregator ``ldptel serve`` starts, gunicorn's workers) log the same way.

- text: ``2026-11-23T09:50:01.123Z INFO ldptel.aggregator[1234]: message``
- json: ``{"time": "2026-11-23T09:50:01.123Z", "level": "INFO", "logger": "ldptel.aggregator",
  "pid": 1234, "message": "…", …}`` plus any ``extra={…}`` fields of the record.

Timestamps are UTC with millisecond precision. No client address is ever logged by ldptel's own
loggers; the collector's optional access log (``ldptel serve --access-log``) leaves it out unless
``--access-log-addresses`` is given.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import urllib.parse
from typing import Any

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
ENV_FORMAT = "LDPTEL_LOG_FORMAT"
ENV_LEVEL = "LDPTEL_LOG_LEVEL"
_HANDLER_NAME = "ldptel"
# attributes every LogRecord has; anything else on a record came from ``extra=`` (json output)
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> <logger>[<pid>]: <message>`` (and the traceback, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        head = f"{_timestamp(record)} {record.levelname} {record.name}[{record.process}]"
        line = f"{head}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, pid, message, the record's extra fields,
    and ``exception`` (the traceback) if any."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {"time": _timestamp(record), "level": record.levelname, "logger": record.name,
                               "pid": record.process, "message": record.getMessage()}
        doc.update((k, v) for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_"))
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


def formatter(fmt: str) -> logging.Formatter:
    """The formatter of ``fmt`` (one of ``FORMATS``)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return JsonFormatter() if fmt == "json" else TextFormatter()


def current_format() -> str:
    """The format in force: ``$LDPTEL_LOG_FORMAT`` (what ``configure`` exported), else text."""
    fmt = os.environ.get(ENV_FORMAT, "text").lower()
    return fmt if fmt in FORMATS else "text"


def current_level() -> str:
    level = os.environ.get(ENV_LEVEL, "info").lower()
    return level if level in LEVELS else "info"


def configure(fmt: str, level: str) -> None:
    """Send every record at ``level`` or above to stderr in format ``fmt`` (one handler on the root
    logger, replacing the one a previous call installed); export ``$LDPTEL_LOG_FORMAT`` and
    ``$LDPTEL_LOG_LEVEL`` for child processes."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)  # only its own: a host's handlers (pytest's capture) stay
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # its request lines carry addresses
    os.environ[ENV_FORMAT], os.environ[ENV_LEVEL] = fmt, level


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-format`` and ``--log-level``, defaulting to the environment variables."""
    parser.add_argument("--log-format", choices=FORMATS, default=current_format(),
                        help=f"log lines on stderr as text or JSON "
                             f"(default: %(default)s; set by ${ENV_FORMAT})")
    parser.add_argument("--log-level", choices=LEVELS, default=current_level(),
                        help=f"lowest level logged (default: %(default)s; set by ${ENV_LEVEL})")


def redact_url(url: str) -> str:
    """``url`` without its password (``redis://:secret@host`` → ``redis://:***@host``), for logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
