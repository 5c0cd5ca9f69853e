"""Exceptions of the server package and the one renderer of API errors.

Raise ``ApiError(status, code, detail, headers)`` anywhere below a view; the handler registered by
the app factory (``app.register_error_handler(ApiError, render)``) answers it as JSON
``{"error": code, "detail": detail}`` with ``status`` and ``headers``. ``BadParameter`` is the
400 ``bad_parameter`` of a query parameter (its detail starts with the parameter's name).
``PageError`` is an operator page's HTML error (rendered by the pages blueprint).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Response, jsonify

from ldptel.errors import LdptelError

API_CSP = "default-src 'none'; frame-ancestors 'none'"  # every API answer's Content-Security-Policy


class ApiError(LdptelError):
    """An HTTP error answered as JSON ``{"error": code, "detail": detail}``."""

    def __init__(self, status: int, code: str, detail: Any = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail = status, code, detail
        self.headers: dict[str, str] = dict(headers or {})


class BadParameter(ApiError):
    """A bad query parameter: 400 ``bad_parameter``, detail ``"<name>: <message>"``."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(400, "bad_parameter", f"{name}: {message}")
        self.name = name


class PageError(LdptelError):
    """An operator page that cannot be shown: HTML error page with ``title`` and ``message``."""

    def __init__(self, status: int, title: str, message: str, back: bool = False) -> None:
        super().__init__(f"{status} {title}: {message}")
        self.status, self.title, self.message, self.back = status, title, message, back


def render(exc: ApiError) -> Response:
    """The JSON response of ``exc``."""
    resp = jsonify({"error": exc.code, "detail": exc.detail})
    resp.status_code = exc.status
    for k, v in exc.headers.items():
        resp.headers[k] = v
    return resp
