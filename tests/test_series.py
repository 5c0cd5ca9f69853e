"""``/windows`` and ``/series`` through the real app over HTTP: reports stored in three windows
of an hourly campaign (one below ``min_reports``), counted and published by the real worker, and
read back as windows and long-form series rows that agree exactly with ``/estimates``."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import redis
from agg_support import HttpStack, random_batches, write_config, xadd_batches

from ldptel import keys
from ldptel.aggregator.worker import Worker
from ldptel.server.series import SERIES_COLUMNS, WINDOW_COLUMNS

HOURLY = {"name": "hourly", "oracle": "grr", "epsilon": 2.0, "domain": ["a", "b", "c", "d"],
          "window": "1h", "min_reports": 300}
HH = {"name": "words", "kind": "heavy_hitters", "epsilon": 4.0, "max_length": 2, "levels": 2, "width": 4,
      "min_reports": 100, "window": "1h"}
RANGE = {"name": "lat", "kind": "range", "epsilon": 2.0, "domain_size": 16, "min_reports": 100,
         "window": "1h"}
COUNTS = {3600: 600, 7200: 100, 10800: 400}  # reports per window; 7200 is withheld (< 300)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str):
    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    cfg = write_config(tmp_path_factory.mktemp("series") / "c.toml", [HOURLY, HH, RANGE])
    for seed, (window, n) in enumerate(COUNTS.items()):
        for camp in cfg.campaigns:
            rng = np.random.default_rng(seed)
            if camp.kind == "heavy_hitters":
                batches = [camp.mechanism().encode_batch(["ab"] * n, rng=rng, campaign=camp.name)]
            elif camp.kind == "range":
                batches = [camp.mechanism().encode_batch([3] * n, rng=rng, campaign=camp.name)]
            else:
                batches = random_batches(camp, n, 100, seed=seed)
            xadd_batches(r, camp, batches, window=window)
    Worker(cfg, r).run(once=True)
    s = HttpStack(cfg, redis_url)
    try:
        yield s, r
    finally:
        s.close()
        r.close()


def get_json(s: HttpStack, path: str, **kw) -> tuple[int, dict, dict]:
    status, headers, body = s.get(path, **kw)
    return status, headers, json.loads(body)


def test_windows_lists_counts_and_release(stack) -> None:
    s, _ = stack
    status, headers, doc = get_json(s, "/v1/campaigns/hourly/windows")
    assert status == 200 and headers["etag"]
    assert {k: doc[k] for k in ("campaign", "window_length", "window_seconds", "min_reports", "version")} == {
        "campaign": "hourly", "window_length": "1h", "window_seconds": 3600, "min_reports": 300, "version": 1}
    got = [(w["window"], w["window_start"], w["n_reports"], w["status"]) for w in doc["windows"]]
    assert got == [(3600, "1970-01-01T01:00:00Z", 600, "released"),
                   (7200, "1970-01-01T02:00:00Z", 100, "withheld"),
                   (10800, "1970-01-01T03:00:00Z", 400, "released")]
    assert doc["windows"][1]["decoded_at"] is None and doc["windows"][0]["decoded_at"] > 0
    status, _, body = s.get("/v1/campaigns/hourly/windows?format=csv")
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert status == 200 and tuple(rows[0]) == WINDOW_COLUMNS and len(rows) == 4
    assert rows[2] == ["1970-01-01T02:00:00Z", "7200", "1", "100", "withheld", "", "true"]
    assert all(w["complete"] is True for w in doc["windows"])  # every window ended (in 1970)


def test_series_rows_are_the_published_estimates(stack) -> None:
    s, _ = stack
    status, _, doc = get_json(s, "/v1/campaigns/hourly/series")
    assert status == 200
    rows = doc["rows"]
    assert [r["window"] for r in rows] == [3600] * 4 + [7200] + [10800] * 4
    withheld = rows[4]
    assert withheld["status"] == "withheld" and withheld["item"] is None and withheld["estimate"] is None
    assert withheld["n_reports"] == 100
    for w in (3600, 10800):
        est = get_json(s, f"/v1/campaigns/hourly/estimates?window={w}")[2]
        mine = [r for r in rows if r["window"] == w]
        assert [r["item"] for r in mine] == ["a", "b", "c", "d"]
        for r, it in zip(mine, est["items"], strict=True):
            numbers = ("estimate", "std_error", "ci_low", "ci_high", "estimate_normalized")
            assert {k: r[k] for k in numbers} == {k: it[k] for k in numbers}
            assert r["n_reports"] == COUNTS[w] and r["status"] == "released" and r["version"] == 1
    # CSV: the same rows, in SERIES_COLUMNS order
    status, headers, body = s.get("/v1/campaigns/hourly/series?format=csv")
    lines = list(csv.reader(io.StringIO(body.decode())))
    assert status == 200 and headers["content-type"].startswith("text/csv")
    assert tuple(lines[0]) == SERIES_COLUMNS and len(lines) == len(rows) + 1
    for line, r in zip(lines[1:], rows, strict=True):
        assert line == ["" if r[c] is None else str(r[c]).lower() if isinstance(r[c], bool) else str(r[c])
                        for c in SERIES_COLUMNS]


def test_series_filters(stack) -> None:
    s, _ = stack
    rows = get_json(s, "/v1/campaigns/hourly/series?from=7200&items=b,d")[2]["rows"]
    assert [(r["window"], r["item"]) for r in rows] == [(7200, None), (10800, "b"), (10800, "d")]
    rows = get_json(s, "/v1/campaigns/hourly/series?from=1970-01-01T01:00:00Z&to=1970-01-01T02:30")[2]["rows"]
    assert {r["window"] for r in rows} == {3600, 7200}
    assert get_json(s, "/v1/campaigns/hourly/series?from=20000")[2]["rows"] == []
    rows = get_json(s, "/v1/campaigns/words/series")[2]["rows"]
    assert [r["item"] for r in rows if r["window"] == 3600][0] == "ab"
    rows = get_json(s, "/v1/campaigns/lat/series?items=3,9")[2]["rows"]
    assert [(r["window"], r["item"]) for r in rows] == [(w, v) for w in COUNTS for v in (3, 9)]
    for r in rows:  # every device reported 3
        assert abs(r["estimate"] - (COUNTS[r["window"]] if r["item"] == 3 else 0)) <= 4 * r["std_error"]


def test_pending_window_is_marked(stack) -> None:
    s, r = stack
    saved = r.dump(keys.published_key("hourly", 10800))
    r.delete(keys.published_key("hourly", 10800))
    try:
        rows = get_json(s, "/v1/campaigns/hourly/series?from=10800")[2]["rows"]
        assert rows == [{"window_start": "1970-01-01T03:00:00Z", "window": 10800, "version": 1, "item": None,
                         "estimate": None, "std_error": None, "ci_low": None, "ci_high": None,
                         "estimate_normalized": None, "n_reports": 400, "status": "pending",
                         "complete": True}]
    finally:
        r.restore(keys.published_key("hourly", 10800), 0, saved)


def test_unknown_version_is_404(stack) -> None:
    status, _, doc = get_json(stack[0], "/v1/campaigns/hourly/series?version=2")
    assert status == 404 and doc["error"] == "not_found" and "no version 2" in doc["detail"], doc


@pytest.mark.parametrize("query, param", [
    ("from=yesterday", "from"), ("to=2026-13-01", "to"), ("from=7200&to=3600", "from"),
    ("version=x", "version"), ("format=xml", "format"),
])
def test_bad_parameters(stack, query: str, param: str) -> None:
    status, _, doc = get_json(stack[0], f"/v1/campaigns/hourly/series?{query}")
    assert status == 400 and doc["error"] == "bad_parameter" and doc["detail"].startswith(f"{param}:"), doc


def test_errors_and_etag(stack) -> None:
    s, _ = stack
    assert get_json(s, "/v1/campaigns/lat/series")[0] == 400  # items required for range
    assert get_json(s, "/v1/campaigns/lat/series?items=16")[0] == 400
    assert get_json(s, "/v1/campaigns/nope/series")[0] == 404
    assert s.get("/v1/campaigns/hourly/windows", token=None)[0] == 401
    for path in ("/v1/campaigns/hourly/series?items=a", "/v1/campaigns/hourly/windows"):
        status, headers, body = s.get(path)
        assert s.get(path, headers={"If-None-Match": headers["etag"]})[:1] == (304,)
        assert s.get(path, headers={"If-Modified-Since": "Fri, 01 Jan 2100 00:00:00 GMT"})[0] == 200
        other = s.get(path + "&x=1" if "?" in path else path + "?x=1")[1]["etag"]
        assert other != headers["etag"]
    # the same query on the two endpoints: different documents, different ETags
    windows, series = (s.get(f"/v1/campaigns/hourly/{what}") for what in ("windows", "series"))
    assert windows[1]["etag"] != series[1]["etag"]
    assert "windows" in json.loads(windows[2]) and "rows" in json.loads(series[2])


def test_export_client(stack) -> None:
    """``ldptel.export.Client`` over real HTTP: the same rows as the endpoint, revalidated with
    the ETag, errors as ``ExportError``; a DataFrame when pandas is importable."""
    import importlib.util

    from ldptel.export import Client, ExportError

    s, _ = stack
    api = Client(s.url, "export-token-for-tests")
    rows = api.series("hourly", start=7200, items=["b", "d"])
    assert rows == get_json(s, "/v1/campaigns/hourly/series?from=7200&items=b,d")[2]["rows"]
    assert api.series("hourly", start=7200, items=["b", "d"]) == rows  # answered 304, from the cache
    assert len(api._cache) == 1
    assert [w["status"] for w in api.windows("hourly")] == ["released", "withheld", "released"]
    assert api.estimates("hourly", window=3600)["n_reports"] == 600
    with pytest.raises(ExportError) as err:
        api.series("nope")
    assert err.value.status == 404 and err.value.code == "not_found"
    with pytest.raises(ExportError) as err:
        Client(s.url, "wrong-token-123").windows("hourly")
    assert err.value.status == 401
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(ImportError, match="pandas"):
            api.series_frame("hourly")
    else:
        frame = api.series_frame("hourly", start=7200, items=["b", "d"])
        assert list(frame["item"].fillna("-")) == ["-", "b", "d"]
        assert str(frame["window_start"].dt.tz) == "UTC"
