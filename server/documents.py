"""What every export document is computed from, and how documents are written.

The document functions of ``server/export.py`` and ``server/queries.py`` take ``(campaign,
window, params)`` and return a dict; the API views and the operator pages both call them. They
start from:

- ``find_campaign(name)``: the configured campaign (``ApiError`` 404 ``not_found``);
- ``load_released(campaign, window)``: the window's start and accumulator, or ``ApiError`` 400
  ``bad_window`` / 409 ``below_threshold`` (with both counts): nothing below the campaign's
  ``min_reports`` is ever released. Within one request a window is read from Redis once, so the
  ETag, the document and every number of a page come from one state.

and are written with ``json_text`` and ``csv_text`` (every CSV the product writes: a header row
of ``columns``, then one line per row, missing values empty; a text cell that a spreadsheet would
run as a formula gets a leading ``'``: ``csv_cell``). Numbers are printed as shortest
round-trip floats in both, so JSON and CSV agree exactly.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flask import g

from ldptel.aggregator import store
from ldptel.aggregator.decoders import Accumulator
from ldptel.config import Campaign
from ldptel.server.app import state
from ldptel.server.errors import ApiError

Window = int | str | None  # a window start, or a ``window=`` query value ("latest", "", None: newest)
Params = Mapping[str, str]  # a document's query parameters (e.g. ``request.args``)


def find_campaign(name: str) -> Campaign:
    """The configured campaign ``name`` (``ApiError`` 404 ``not_found`` otherwise)."""
    campaign = state().config.campaign(name)
    if campaign is None:
        raise ApiError(404, "not_found", f"unknown campaign {name!r}")
    return campaign


def load_released(campaign: Campaign, window: Window) -> tuple[int, Accumulator]:
    """(window start, accumulator) of ``window`` (``store.resolve_window``) once it holds at least
    ``min_reports`` reports; ``ApiError`` 400 ``bad_window`` or 409 ``below_threshold``."""
    st = state()
    try:
        start = store.resolve_window(st.redis, campaign, None if window is None else str(window))
    except store.WindowError as exc:
        raise ApiError(400, "bad_window", str(exc)) from None
    loaded: dict[tuple[str, int], tuple[Accumulator, int]] = g.setdefault("ldptel_released", {})
    if (campaign.name, start) not in loaded:
        loaded[campaign.name, start] = store.load_accumulator(st.redis, campaign, start)
    acc, n = loaded[campaign.name, start]
    if n < campaign.min_reports:
        raise ApiError(409, "below_threshold",
                       {"n_reports": n, "min_reports": campaign.min_reports, "window": start,
                        "message": f"estimates are withheld until {campaign.min_reports} "
                                   f"reports are counted ({n} so far)"})
    return start, acc


def require_kind(campaign: Campaign, kind: str, what: str) -> None:
    """``ApiError`` 400 ``bad_request`` unless ``campaign`` is of ``kind`` (``what`` completes
    "campaign 'x' is a range campaign: no …")."""
    if campaign.kind != kind:
        raise ApiError(400, "bad_request",
                       f"campaign {campaign.name!r} is a {campaign.kind} campaign: {what}")


def header(campaign: Campaign, window: int, acc: Accumulator) -> dict[str, Any]:
    """The fields every query document starts with."""
    return {"campaign": campaign.name, "kind": campaign.kind, "epsilon": campaign.epsilon,
            "n_reports": acc.n, "window": window}


def finite_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with non-finite floats as None (JSON has no NaN or infinity)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def json_text(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, allow_nan=False) + "\n"


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value: Any) -> Any:
    """One CSV cell, safe to open in a spreadsheet (OWASP's CSV-injection rule): a text cell that
    starts with ``= + - @`` TAB or CR gets a leading ``'`` unless it is a plain decimal number
    (``-12.5``, ``+3e-2``); numbers stay numbers; None is empty."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_text(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """CSV of ``rows``: a header of ``columns``, then each row's values in that order (None and
    missing values empty; every cell through ``csv_cell``). Lines end in ``\n``; a cell holding
    a CR or LF is quoted (the writer runs with a ``\r\n`` terminator, which makes it quote both,
    and each line's terminator is then cut to ``\n``)."""
    lines: list[str] = []
    writer = csv.writer(_LineSink(lines), lineterminator="\r\n")
    writer.writerow([csv_cell(c) for c in columns])
    for row in rows:
        writer.writerow([csv_cell(row.get(k)) for k in columns])
    return "".join(line[:-2] + "\n" for line in lines)


class _LineSink:
    """A file for ``csv.writer`` that keeps each written line (the writer writes a row at once)."""

    def __init__(self, lines: list[str]) -> None:
        self.write = lines.append
