"""gunicorn's own log lines (its error log and the optional access log) in ``ldptel.logs``'s format.

The access log is off unless ``ldptel serve --access-log``; a line is ``"GET /v1/reports" 202 17
3ms`` (method, path without the query string, status, response bytes, milliseconds) and carries
the client address only with ``--access-log-addresses``. Both logs go to stderr.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from gunicorn import glogging

from ldptel import logs

ACCESS_FORMAT = '"%(m)s %(U)s" %(s)s %(B)s %(M)sms'
ACCESS_FORMAT_WITH_ADDRESS = "%(h)s " + ACCESS_FORMAT


class GunicornLogger(glogging.Logger):
    """gunicorn's logger with ``ldptel.logs``'s formatter on its handlers, everything on stderr,
    and no per-request work when the access log is off (gunicorn would otherwise build each
    request's log fields whenever any logging config is set)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        fmt = logs.formatter(logs.current_format())
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(fmt)
                if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
                    handler.setStream(sys.stderr)

    def _compute_access_log_enabled(self) -> bool:
        return bool(self.cfg.accesslog)


def gunicorn_log_options(access_log: bool, addresses: bool) -> dict[str, Any]:
    """The gunicorn settings of ``ldptel serve``'s logging (level from ``ldptel.logs``)."""
    return {
        "logger_class": GunicornLogger,
        "loglevel": logs.current_level(),
        "errorlog": "-",
        "accesslog": "-" if access_log else None,
        "access_log_format": ACCESS_FORMAT_WITH_ADDRESS if addresses else ACCESS_FORMAT,
    }
