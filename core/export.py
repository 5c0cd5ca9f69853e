"""A small client of the export API (standard library only)::

    from ldptel.export import Client

    api = Client("https://telemetry.example.com", token="…")   # an export token
    rows = api.series("font-size", start="2026-11-01", items=["small", "large"])
    frame = api.series_frame("font-size")   # the same rows as a pandas DataFrame (needs pandas)

``series`` returns the long-form rows of ``GET /v1/campaigns/<name>/series`` (dicts with
``window_start``, ``window``, ``version``, ``item``, ``estimate``, ``std_error``, ``ci_low``,
``ci_high``, ``estimate_normalized``, ``n_reports``, ``status``; a withheld or pending window is
one row with ``item`` None). ``series_frame`` returns them as a ``pandas.DataFrame`` with
``window_start`` parsed as UTC timestamps; pandas is imported only there and is not a dependency
of ldptel (``ImportError`` naming it when absent). ``windows`` and ``estimates`` return the other
documents. Answers are revalidated with ``If-None-Match``: an unchanged document costs a 304.
An error answer raises ``ExportError`` (``status``, ``code``, ``detail``).
"""

from __future__ import annotations

import importlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterable
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from ldptel.errors import ExportError

When = int | str | datetime | None  # epoch seconds, ISO 8601, a datetime, or no bound
# the columns of a series row, in order (the server's ``/series`` answers these)
__all__ = ["SERIES_COLUMNS", "Client", "ExportError", "When"]

SERIES_COLUMNS = ("window_start", "window", "version", "item", "estimate", "std_error", "ci_low",
                  "ci_high", "estimate_normalized", "n_reports", "status")




def _when(value: When) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


class Client:
    """The export API at ``url`` with an export ``token``."""

    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._cache: dict[str, tuple[str, Any]] = {}  # path → (ETag, parsed document)

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """The parsed JSON document at ``path`` (``params``: query parameters, None left out)."""
        query = urlencode({k: v for k, v in (params or {}).items() if v is not None})
        path = f"{path}?{query}" if query else path
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if path in self._cache:
            headers["If-None-Match"] = self._cache[path][0]
        req = urllib.request.Request(self.url + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                doc = json.loads(resp.read())
                etag = resp.headers.get("ETag")
        except urllib.error.HTTPError as exc:
            if exc.code == 304 and path in self._cache:
                return self._cache[path][1]
            raise _error(exc) from None
        if etag:
            self._cache[path] = (etag, doc)
        return doc

    def _campaign(self, name: str, what: str) -> str:
        return f"/v1/campaigns/{quote(name, safe='')}/{what}"

    def series(self, name: str, start: When = None, end: When = None, items: Iterable[Any] | None = None,
               version: int | None = None) -> list[dict[str, Any]]:
        """Long-form rows of the windows starting in [``start``, ``end``] (``items``: only these)."""
        params = {"from": _when(start), "to": _when(end), "version": version,
                  "items": None if items is None else ",".join(map(str, items))}
        return list(self.get(self._campaign(name, "series"), params)["rows"])

    def series_frame(self, name: str, start: When = None, end: When = None,
                     items: Iterable[Any] | None = None, version: int | None = None) -> Any:
        """``series`` as a ``pandas.DataFrame`` (``window_start`` as UTC timestamps)."""
        try:
            pd = importlib.import_module("pandas")
        except ImportError:
            raise ImportError("series_frame needs pandas (pip install pandas); series() returns "
                              "the same rows as dicts") from None
        frame = pd.DataFrame(self.series(name, start, end, items, version), columns=SERIES_COLUMNS)
        frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
        return frame

    def windows(self, name: str, start: When = None, end: When = None) -> list[dict[str, Any]]:
        """The windows with counted reports: ``window``, ``n_reports``, ``status``, …"""
        doc = self.get(self._campaign(name, "windows"), {"from": _when(start), "to": _when(end)})
        return list(doc["windows"])

    def estimates(self, name: str, window: int | str = "latest") -> dict[str, Any]:
        """The estimate document of one window (frequency campaigns)."""
        return dict(self.get(self._campaign(name, "estimates"), {"window": window}))



def _error(exc: urllib.error.HTTPError) -> ExportError:
    try:
        body = json.loads(exc.read())
        return ExportError(exc.code, str(body.get("error")), body.get("detail"))
    except (ValueError, AttributeError):
        return ExportError(exc.code, "http_error", exc.reason)
