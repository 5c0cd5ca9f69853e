"""Downloads of the campaign page, for signed-in users: the export API's documents of the page's
window, written with the one JSON and CSV writer (``server/documents.py``; CSV files end with the
``window`` and ``n_reports`` columns, as the API's).

``/campaigns/<name>/download/<what>``: ``estimates.csv|json`` (frequency),
``heavy-hitters.csv|json``, ``quantiles.json`` (with ``q=``) and ``cdf.csv`` (range), ``mean.csv|json``
(numeric). The query
string is the document's parameters (``window``, ``q``); the estimates carry the API's ``ETag``,
``Last-Modified`` and ``X-Ldptel-*`` headers (and answer 304 as it does); errors are the API's
(JSON 400/409).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Response

from ldptel.campaigns.config import Campaign
from ldptel.server import export, means, queries
from ldptel.server.documents import Params, Published, Window, conditional_response, document_csv, json_text
from ldptel.server.errors import ApiError, PageError


@dataclass(frozen=True)
class Download:
    kind: str  # the campaign kind that has it
    document: Callable[[Campaign, Window, Params], dict[str, Any]]
    formats: tuple[str, ...]
    suffix: str  # of the file name, before the window
    columns: tuple[str, ...] = ()  # CSV columns of the document's ``items``
    validators: Callable[[Campaign, Window], tuple[int, Published, dict[str, str]]] | None = None  # ETag & co
    # the CSV rows of a document (default: items)
    rows: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None


DOWNLOADS = {
    "estimates": Download("frequency", export.estimates, ("csv", "json"), "", export.ITEM_COLUMNS,
                          export.validators),
    "heavy-hitters": Download("heavy_hitters", queries.heavy_hitters, ("csv", "json"), "-heavy-hitters",
                              queries.HEAVY_HITTER_COLUMNS),
    "quantiles": Download("range", queries.quantiles, ("json",), "-quantiles"),
    "cdf": Download("range", queries.cdf, ("csv",), "-cdf", queries.CDF_COLUMNS),
    "mean": Download("numeric", means.mean, ("csv", "json"), "-mean", means.MEAN_COLUMNS,
                     means.mean_validators, means.mean_rows),
}


def download(c: Campaign, what: str, args: Params) -> Response:
    """The file ``what`` (``<name>.<format>``) of campaign ``c``; ``PageError`` 404 if it has none."""
    name, _, fmt = what.rpartition(".")
    d = DOWNLOADS.get(name)
    if d is None or d.kind != c.estimate_kind or fmt not in d.formats:
        raise PageError(404, "No such download", f"Campaign “{c.name}” has no download “{what}”.", back=True)
    window: Window = args.get("window")
    filename = f"{c.name}{d.suffix}-{args.get('window', 'latest')}.{fmt}"
    mimetype = "text/csv" if fmt == "csv" else "application/json"

    def body(doc: dict[str, Any]) -> str:
        if fmt == "json":
            return json_text(doc)
        return document_csv(doc, d.rows(doc) if d.rows is not None else doc["items"], d.columns)

    try:
        if d.validators is None:
            doc = d.document(c, window, args)
        else:
            window, pub, headers = d.validators(c, window)
    except ApiError as exc:
        exc.headers["Vary"] = "Cookie"
        raise
    if d.validators is None:
        return Response(body(doc), mimetype=mimetype, headers={
            "Vary": "Cookie", "Content-Disposition": f'attachment; filename="{filename}"'})
    headers["Vary"] = "Cookie"
    return conditional_response(pub.etag, pub.decoded_at, headers, lambda: body(d.document(c, window, args)),
                                mimetype, attachment=filename)
