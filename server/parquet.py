"""``format=parquet`` of ``/estimates``, ``/mean`` and ``/series`` (issue 28): the answer's long rows
as one Parquet file (``pyarrow``, the server extra; imported on first use) with the Arrow schema
``schema(dims)``:

=====================  ===========================  ==============================================
column                 type                         meaning
=====================  ===========================  ==============================================
window_start           timestamp[ms, UTC], nullable the window's start (null: ``window = "all"``)
window_end             timestamp[ms, UTC], nullable its end (exclusive)
window                 int64                        the window's start, epoch s (0 for "all")
version                int32                        the campaign version
<dimension> …          string, nullable             one column per dimension of ``by`` (none
                                                    without ``by``)
value                  string, nullable             the item (its label as text; numeric
                                                    campaigns: ``mean`` or ``sum``); null for a
                                                    withheld window or cell
estimate, std_error,   float64, nullable            the estimate (devices; numeric: the mean or
ci_low, ci_high                                     the sum), its std error and 95 % CI
estimate_normalized    float64, nullable            Norm-Sub count (frequency kinds only)
n_reports              int64, nullable              reports of the window (or cell)
status                 string                       ``released``, ``withheld`` or ``pending``
epsilon_local          float64                      ε of one report (``privacy.epsilon_report``)
epsilon_central        float64, nullable            central ε the document states, if any (a
                                                    shuffled mode: U, certified)
epsilon_central_lower  float64, nullable            its lower bound L (an explicit attack reaches
                                                    it: "central ε between L and U"), if stated
complete               bool                         whether the window had ended when the file
                                                    was made (false: the window in progress,
                                                    and a ``window = "all"`` campaign's one
                                                    window, which never ends)
=====================  ===========================  ==============================================
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ldptel.server.errors import BadParameter

FIXED_HEAD = ("window_start", "window_end", "window", "version")
FIXED_TAIL = ("value", "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized", "n_reports",
              "status", "epsilon_local", "epsilon_central", "epsilon_central_lower", "complete")
MIMETYPE = "application/vnd.apache.parquet"


def _pyarrow() -> Any:
    try:
        return importlib.import_module("pyarrow")
    except ImportError:
        raise BadParameter("format", "parquet needs pyarrow on the server (pip install 'ldptel[server]')") \
            from None


def columns(dims: Sequence[str]) -> tuple[str, ...]:
    return (*FIXED_HEAD, *dims, *FIXED_TAIL)


def schema(dims: Sequence[str]) -> Any:
    """The Arrow schema of a file with the dimension columns ``dims`` (module docstring)."""
    pa = _pyarrow()
    ts = pa.timestamp("ms", tz="UTC")  # Parquet has no second unit: ms is what a file holds
    types = {"window_start": ts, "window_end": ts, "window": pa.int64(), "version": pa.int32(),
             "value": pa.string(), "n_reports": pa.int64(), "status": pa.string(), "complete": pa.bool_()}
    return pa.schema([pa.field(c, types.get(c, pa.string() if c in dims else pa.float64()),
                               nullable=c not in ("window", "version", "status", "epsilon_local", "complete"))
                      for c in columns(dims)])


def row(window: int, window_seconds: int, version: int, privacy: Mapping[str, Any] | None,
        status: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """One file row: the window's columns, then ``values`` (an estimate row, its dimensions and
    ``n_reports`` and ``complete``; ``statistic`` becomes ``value``), the status and the ε of
    ``privacy``."""
    privacy = privacy or {}
    out = {"window_start": 1000 * window if window_seconds else None,
           "window_end": 1000 * (window + window_seconds) if window_seconds else None,
           "window": window, "version": version, "status": status,
           "epsilon_local": privacy.get("epsilon_report"), "epsilon_central": privacy.get("central_epsilon"),
           "epsilon_central_lower": privacy.get("central_epsilon_lower")}
    out.update(values)
    if "statistic" in out:
        out["value"] = out.pop("statistic")
    if out.get("value") is not None:
        out["value"] = str(out["value"])
    return out


def parquet_bytes(rows: Iterable[Mapping[str, Any]], dims: Sequence[str]) -> bytes:
    """``rows`` (``row``) as a Parquet file of ``schema(dims)``."""
    pa = _pyarrow()
    pq = importlib.import_module("pyarrow.parquet")
    cols = columns(dims)
    listed = list(rows)
    data = {c: [r.get(c) for r in listed] for c in cols}
    table = pa.Table.from_pydict(data, schema=schema(dims))
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


__all__ = ["MIMETYPE", "columns", "parquet_bytes", "row", "schema"]
