"""A small client of the export API (standard library only)::

    from ldptel.export import Client

    api = Client("https://telemetry.example.com", token="…")   # an export token
    rows = api.series("font-size", start="2026-11-01", items=["small", "large"])
    frame = api.series_frame("font-size")   # the same rows as a pandas DataFrame (needs pandas)
    top = api.heavy_hitters("search-terms", k=10)["items"]
    api.mean("session-seconds")["mean"]["estimate"]
    api.range("latency-ms", 0, 99)["estimate"]; api.quantiles("latency-ms", [0.5, 0.9])["items"]
    api.versions("font-size")["versions"]; Client.frame(top)  # any rows as a DataFrame
    api.estimates("checkout", by="platform,arm", compare="treatment")["differences"]
    api.table("checkout", by="platform")    # format=parquet as a pandas DataFrame (or as_="arrow")

Every document method takes ``window`` (None, the default: the server's, ``latest`` for a
campaign with windows and the one window of a ``window = "all"`` campaign; ``"latest"``: the
newest released window that has ended, a 409 ``no_complete_window`` ``ExportError`` on a
``window = "all"`` campaign, whose one window never ends; ``"current"``: the window in
progress; every document says ``complete``; or a window start) and ``version`` (``"latest"``,
a number, or ``"all"`` where the endpoint takes it) and returns the endpoint's JSON document
(``GET /v1/campaigns/<name>/…``; docs/http-api.md lists every key).

``series`` returns the long-form rows of ``GET /v1/campaigns/<name>/series`` (dicts with
``window_start``, ``window``, ``version``, ``item``, ``estimate``, ``std_error``, ``ci_low``,
``ci_high``, ``estimate_normalized``, ``n_reports``, ``status``; a withheld or pending window is
one row with ``item`` None). ``series_frame`` returns them as a ``pandas.DataFrame`` with
``window_start`` parsed as UTC timestamps; pandas is imported only there and is not a dependency
of ldptel (``ImportError`` naming it when absent). ``windows`` and ``estimates`` return the other
documents. Answers are revalidated with ``If-None-Match``: an unchanged document costs a 304.
An error answer raises ``ExportError`` (``status``, ``code``, ``detail``). ``table`` reads the
Parquet file of ``/estimates``, ``/mean`` or ``/series`` (``format=parquet``; its Arrow schema is
in docs/http-api.md) into a ``pyarrow.Table`` or a ``pandas.DataFrame`` (pyarrow, and pandas for
a DataFrame, imported only there).
"""

from __future__ import annotations

import importlib
import io
import json
import urllib.error
import urllib.request
from collections.abc import Iterable
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from ldptel.errors import ExportError

When = int | str | datetime | None  # epoch seconds, ISO 8601, a datetime, or no bound
Version = int | str | None  # a version number, "latest" (None: the server's default) or "all"
Document = dict[str, Any]  # a JSON document of the export API
# the columns of a series row, in order (the server's ``/series`` answers these)
__all__ = ["SERIES_COLUMNS", "Client", "Document", "ExportError", "Version", "When"]

SERIES_COLUMNS = ("window_start", "window", "version", "item", "estimate", "std_error", "ci_low",
                  "ci_high", "estimate_normalized", "n_reports", "status", "complete")


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
        return self._get(path, params, json.loads)

    def get_bytes(self, path: str, params: dict[str, Any] | None = None) -> bytes:
        """The raw body at ``path`` (a CSV or Parquet file: ``format=`` in ``params``)."""
        return bytes(self._get(path, params, bytes))

    def _get(self, path: str, params: dict[str, Any] | None, parse: Any) -> Any:
        query = urlencode({k: v for k, v in (params or {}).items() if v is not None})
        path = f"{path}?{query}" if query else path
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if path in self._cache:
            headers["If-None-Match"] = self._cache[path][0]
        req = urllib.request.Request(self.url + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                doc = parse(resp.read())
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
               version: Version = None) -> list[dict[str, Any]]:
        """Long-form rows of the windows starting in [``start``, ``end``] (``items``: only these;
        ``version="all"``: every version's rows, each with its ``version``)."""
        params = {"from": _when(start), "to": _when(end), "version": version,
                  "items": None if items is None else ",".join(map(str, items))}
        return list(self.get(self._campaign(name, "series"), params)["rows"])

    def series_frame(self, name: str, start: When = None, end: When = None,
                     items: Iterable[Any] | None = None, version: Version = None) -> Any:
        """``series`` as a ``pandas.DataFrame`` (``window_start`` as UTC timestamps)."""
        pd = _pandas("series_frame")
        frame = pd.DataFrame(self.series(name, start, end, items, version), columns=SERIES_COLUMNS)
        frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
        return frame

    def windows(self, name: str, start: When = None, end: When = None,
                version: Version = None) -> list[dict[str, Any]]:
        """The windows with counted reports: ``window``, ``window_start``, ``version``,
        ``n_reports``, ``status``, ``decoded_at``."""
        doc = self.get(self._campaign(name, "windows"),
                       {"from": _when(start), "to": _when(end), "version": version})
        return list(doc["windows"])

    def estimates(self, name: str, window: int | str | None = None, version: Version = None,
                  by: str | Iterable[str] | None = None, compare: str | None = None) -> Document:
        """The estimate document of one window (frequency campaigns): ``items`` with
        ``value``, ``estimate``, ``std_error``, ``ci_low``, ``ci_high``, ``estimate_normalized``;
        ``version="all"`` combines the versions that share the domain. ``by`` (dimension names):
        ``cells``, the estimates of each combination of their values; ``compare`` (an arm of the
        experiment, with ``by`` holding it): ``differences`` against the control."""
        return self._doc(name, "estimates", window, version, by=_names(by), compare=compare)

    def mean(self, name: str, window: int | str | None = None, version: Version = None,
             by: str | Iterable[str] | None = None, compare: str | None = None) -> Document:
        """The mean document of a numeric campaign: ``mean`` and ``sum``, each with
        ``estimate``, ``std_error``, ``ci_low``, ``ci_high`` (``by``, ``compare``: as
        ``estimates``)."""
        return self._doc(name, "mean", window, version, by=_names(by), compare=compare)

    def table(self, name: str, what: str = "estimates", as_: str = "pandas", window: int | str | None = None,
              version: Version = None, by: str | Iterable[str] | None = None, start: When = None,
              end: When = None) -> Any:
        """The Parquet file of ``what`` (``estimates``, ``mean`` or ``series``; ``format=parquet``)
        as a ``pandas.DataFrame`` (``as_="pandas"``) or a ``pyarrow.Table`` (``as_="arrow"``):
        one row per value (and cell of ``by``, and window for ``series``)."""
        if what not in ("estimates", "mean", "series") or as_ not in ("pandas", "arrow"):
            raise ValueError("what is estimates, mean or series; as_ is pandas or arrow")
        params = {"format": "parquet", "version": version, "by": _names(by)}
        if what == "series":
            params.update({"from": _when(start), "to": _when(end)})
        else:
            params["window"] = window  # None: the server's default
        data = self.get_bytes(self._campaign(name, what), params)
        table = _module("pyarrow.parquet", "table").read_table(io.BytesIO(data))
        return table if as_ == "arrow" else table.to_pandas()

    def heavy_hitters(self, name: str, k: int | None = None, window: int | str | None = None,
                      version: Version = None) -> Document:
        """The ``k`` most frequent strings of a heavy-hitter campaign (``items``: ``value``,
        ``estimate``, ``std_error``, ``ci_low``, ``ci_high``), most frequent first; in a shuffled
        mode ``privacy`` also states the release claim (``central_epsilon`` U,
        ``central_epsilon_lower`` L, ``batches``)."""
        return self._doc(name, "heavy-hitters", window, version, k=k)

    def range(self, name: str, lo: int, hi: int, window: int | str | None = None,
              version: Version = None) -> Document:
        """Devices with a value in [``lo``, ``hi``] of a range campaign: ``estimate``,
        ``std_error``, ``ci_low``, ``ci_high``."""
        return self._doc(name, "range", window, version, lo=lo, hi=hi)

    def quantiles(self, name: str, q: Iterable[float] = (0.5, 0.9, 0.99), window: int | str | None = None,
                  version: Version = None) -> Document:
        """Quantiles of a range campaign (``items``: ``q``, ``value``, ``ci_low``, ``ci_high``)."""
        return self._doc(name, "quantiles", window, version, q=",".join(map(str, q)))

    def versions(self, name: str) -> Document:
        """Every version of the campaign (``versions``: ``version``, ``status``,
        ``superseded_at``, ``accepted_until``, ``n_reports``, ``config``)."""
        return dict(self.get(self._campaign(name, "versions")))

    def _doc(self, name: str, what: str, window: int | str | None, version: Version,
             **params: Any) -> Document:
        query = {"window": window, "version": version, **params}
        return dict(self.get(self._campaign(name, what), query))

    @staticmethod
    def frame(rows: Iterable[dict[str, Any]]) -> Any:
        """Rows (``series``, a document's ``items``) as a ``pandas.DataFrame`` (needs pandas;
        ``window_start`` parsed as UTC timestamps when present)."""
        pd = _pandas("frame")
        frame = pd.DataFrame(list(rows))
        if "window_start" in frame:
            frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
        return frame


def _pandas(what: str) -> Any:
    return _module("pandas", what)


def _module(name: str, what: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        package = name.split(".")[0]
        raise ImportError(f"{what} needs {package} (pip install {package}); the other methods return "
                          "the same rows as dicts") from None


def _names(by: str | Iterable[str] | None) -> str | None:
    return by if by is None or isinstance(by, str) else ",".join(by)


def _error(exc: urllib.error.HTTPError) -> ExportError:
    try:
        body = json.loads(exc.read())
        return ExportError(exc.code, str(body.get("error")), body.get("detail"))
    except (ValueError, AttributeError):
        return ExportError(exc.code, "http_error", exc.reason)
