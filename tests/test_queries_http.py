"""Heavy-hitter, range and quantile endpoints through the real app over HTTP: reports POSTed to
the collector (which validates them with the mechanisms' ``validate_columns``), drained by the
real worker into the embedded Redis, read back from ``server/queries.py``."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import redis
from agg_support import HttpStack, shuffle_once, write_config

from ldptel.aggregator.worker import Worker

HH = {"name": "search", "kind": "heavy_hitters", "epsilon": 4.0, "max_length": 8, "levels": 8,
      "width": 16, "min_reports": 1000}
HAAR = {"name": "latency", "kind": "range", "epsilon": 2.0, "domain_size": 64, "min_reports": 1000}
TREE = {"name": "latency-tree", "kind": "range", "epsilon": 2.0, "domain_size": 64,
        "method": "hierarchical", "min_reports": 1000}
SMALL = {"name": "small", "kind": "range", "epsilon": 2.0, "domain_size": 64, "min_reports": 50_000}
WORDS = np.array(["checkout", "search", "home", "cart", "x"], dtype=object)
N = 12_000


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str):
    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    cfg = write_config(tmp_path_factory.mktemp("q") / "c.toml", [HH, HAAR, TREE, SMALL])
    s = HttpStack(cfg, redis_url)
    rng = np.random.default_rng(7)
    words = WORDS[rng.choice(WORDS.size, N, p=[0.35, 0.25, 0.2, 0.15, 0.05])]
    values = np.clip(rng.normal(20, 8, N).round(), 0, 63).astype(np.int64)
    truth = {"words": dict(zip(*np.unique(words, return_counts=True), strict=True)),
             "cum": np.concatenate(([0], np.cumsum(np.bincount(values, minlength=64))))}
    for camp in cfg.campaigns:
        mech = camp.mechanism()
        data = words if camp.kind == "heavy_hitters" else values
        for start in range(0, N, 2000):
            batch = mech.encode_batch(data[start:start + 2000], rng=rng, campaign=camp.name)
            assert s.post_batch(batch)["accepted"] == len(data[start:start + 2000])
    shuffle_once(cfg, r)
    Worker(cfg, r).run(once=True)
    try:
        yield s, truth
    finally:
        s.close()
        r.close()


def get_json(s: HttpStack, path: str, **kw) -> tuple[int, dict]:
    status, _, body = s.get(path, **kw)
    return status, json.loads(body)


def test_heavy_hitters_endpoint(stack) -> None:
    s, truth = stack
    status, doc = get_json(s, "/v1/campaigns/search/heavy-hitters?k=3")
    assert status == 200, doc
    assert doc["n_reports"] == N and doc["kind"] == "heavy_hitters" and len(doc["items"]) == 3
    assert [row["value"] for row in doc["items"]] == ["checkout", "search", "home"]
    for row in doc["items"]:
        assert abs(row["estimate"] - truth["words"][row["value"]]) <= 4 * row["std_error"]
        assert row["ci_low"] < row["estimate"] < row["ci_high"]
    status, doc = get_json(s, "/v1/campaigns/search/heavy-hitters")
    assert status == 200 and {"checkout", "search", "home", "cart"} <= {r["value"] for r in doc["items"]}


def test_range_and_quantile_endpoints(stack) -> None:
    s, truth = stack
    cum = truth["cum"]
    for name in ("latency", "latency-tree"):
        status, doc = get_json(s, f"/v1/campaigns/{name}/range?lo=10&hi=25")
        assert status == 200, doc
        assert doc["n_reports"] == N and (doc["lo"], doc["hi"]) == (10, 25)
        assert abs(doc["estimate"] - (cum[26] - cum[10])) <= 4 * doc["std_error"]
        status, doc = get_json(s, f"/v1/campaigns/{name}/quantiles?q=0.5,0.9")
        assert status == 200, doc
        assert [row["q"] for row in doc["items"]] == [0.5, 0.9]
        for row in doc["items"]:
            x, q = row["value"], row["q"]
            err = max(0.0, cum[x] / N - q, q - cum[x + 1] / N)
            assert err <= 4 * row["rank_std_error"], row


@pytest.mark.parametrize("path, param", [
    ("/v1/campaigns/search/heavy-hitters?k=abc", "k"),
    ("/v1/campaigns/search/heavy-hitters?k=0", "k"),
    ("/v1/campaigns/search/heavy-hitters?k=17", "k"),
    ("/v1/campaigns/latency/range?hi=5", "lo"),
    ("/v1/campaigns/latency/range?lo=-1&hi=5", "lo"),
    ("/v1/campaigns/latency/range?lo=1&hi=64", "hi"),
    ("/v1/campaigns/latency/range?lo=9&hi=5", "lo"),
    ("/v1/campaigns/latency/range?lo=1.5&hi=5", "lo"),
    ("/v1/campaigns/latency/quantiles", "q"),
    ("/v1/campaigns/latency/quantiles?q=0.5,1.5", "q"),
    ("/v1/campaigns/latency/quantiles?q=0.5,median", "q"),
    ("/v1/campaigns/latency/quantiles?q=nan", "q"),
])
def test_bad_parameters_400_naming_the_parameter(stack, path: str, param: str) -> None:
    status, doc = get_json(stack[0], path)
    assert status == 400 and doc["error"] == "bad_parameter"
    assert doc["detail"].startswith(f"{param}:"), doc


def test_errors(stack) -> None:
    s, _ = stack
    status, doc = get_json(s, "/v1/campaigns/small/range?lo=0&hi=5")
    assert status == 409 and doc["detail"]["n_reports"] == N and doc["detail"]["min_reports"] == 50_000
    status, doc = get_json(s, "/v1/campaigns/small/quantiles?q=0.5")
    assert status == 409
    assert get_json(s, "/v1/campaigns/latency/heavy-hitters")[0] == 400
    assert get_json(s, "/v1/campaigns/search/range?lo=0&hi=1")[0] == 400
    assert get_json(s, "/v1/campaigns/nope/quantiles?q=0.5")[0] == 404
    assert get_json(s, "/v1/campaigns/latency/range?lo=0&hi=1&window=abc")[0] == 400
    assert s.get("/v1/campaigns/latency/range?lo=0&hi=1", token=None)[0] == 401
    assert s.get("/v1/campaigns/latency/range?lo=0&hi=1", token="wrong-token-123")[0] == 401


def test_conditional_answers(stack) -> None:
    """Every query endpoint answers 304 to its publication's ETag (alone, in a list, or "*") and
    validates its parameters first (400 even with a matching ETag); a repeated 200 is the same
    body, and another URL of the same publication gets its own document (a body is kept per URL
    and publication, never shared between URLs)."""
    s, _ = stack
    for path in ("/v1/campaigns/search/heavy-hitters?k=3", "/v1/campaigns/latency/range?lo=10&hi=25",
                 "/v1/campaigns/latency/quantiles?q=0.5"):
        status, headers, body = s.get(path)
        assert status == 200 and headers["etag"].startswith('"')
        for inm in (headers["etag"], f'"other", {headers["etag"]}', "*"):
            assert s.get(path, headers={"If-None-Match": inm})[:3:2] == (304, b""), inm
        assert s.get(path, headers={"If-None-Match": '"other"'})[::2] == (200, body)
        assert s.get(path)[::2] == (200, body)
    _, h3, b3 = s.get("/v1/campaigns/search/heavy-hitters?k=3")
    _, h2, b2 = s.get("/v1/campaigns/search/heavy-hitters?k=2")
    assert h2["etag"] == h3["etag"]
    assert [len(json.loads(b)["items"]) for b in (b2, b3)] == [2, 3]
    _, _, lo = s.get("/v1/campaigns/latency/range?lo=11&hi=25")
    assert json.loads(lo)["lo"] == 11
    assert s.get("/v1/campaigns/search/heavy-hitters?k=0", headers={"If-None-Match": h3["etag"]})[0] == 400
    assert s.get("/v1/campaigns/latency/range?lo=5&hi=1", headers={"If-None-Match": "*"})[0] == 400


@pytest.mark.parametrize("path, columns", [
    ("/v1/campaigns/search/heavy-hitters?k=3", ("value", "estimate", "std_error", "ci_low", "ci_high",
                                                "estimate_normalized", "z_score", "levels_used")),
    ("/v1/campaigns/latency/range?lo=10&hi=25", ("lo", "hi", "estimate", "std_error", "ci_low", "ci_high")),
    ("/v1/campaigns/latency-tree/quantiles?q=0.5,0.9", ("q", "value", "rank_std_error", "value_ci_low",
                                                         "value_ci_high")),
])
def test_csv_on_every_query_endpoint(stack, path: str, columns: tuple[str, ...]) -> None:
    """``format=csv`` answers CSV with the JSON document's rows and numbers, then window and
    n_reports (``/heavy-hitters?format=csv`` used to answer JSON); the same ETag and 304."""
    s, _ = stack
    status, headers, body = s.get(path)
    doc = json.loads(body)
    rows = doc.get("items", [doc])
    status, csv_headers, csv_body = s.get(path + "&format=csv")
    assert status == 200 and csv_headers["content-type"].startswith("text/csv"), csv_body[:200]
    got = list(csv.reader(io.StringIO(csv_body.decode())))
    assert tuple(got[0]) == (*columns, "window", "n_reports", "complete") and len(got) == len(rows) + 1
    for line, row in zip(got[1:], rows, strict=True):
        assert line == [str(row[c]) for c in columns] + [str(doc["window"]), str(N), "false"]  # "all"
    assert csv_headers["etag"] == headers["etag"]
    assert s.get(path + "&format=csv", headers={"If-None-Match": headers["etag"]})[0] == 304
    status, err = get_json(s, path + "&format=xml")
    assert status == 400 and err["detail"].startswith("format:")


def test_export_client_helpers(stack) -> None:
    """``ldptel.export.Client``'s typed helpers against the real server (issue 25: the client
    had only ``estimates``, ``series`` and ``windows``): each returns the endpoint's document."""
    import importlib.util

    from ldptel.export import Client

    s, truth = stack
    api = Client(s.url, "export-token-for-tests")
    top = api.heavy_hitters("search", k=3)
    assert top == get_json(s, "/v1/campaigns/search/heavy-hitters?k=3")[1]
    assert [row["value"] for row in top["items"]] == ["checkout", "search", "home"]
    span = api.range("latency", 10, 29)
    assert span == get_json(s, "/v1/campaigns/latency/range?lo=10&hi=29")[1]
    assert abs(span["estimate"] - (truth["cum"][30] - truth["cum"][10])) <= 4 * span["std_error"]
    q = api.quantiles("latency", [0.5, 0.9])
    assert [row["q"] for row in q["items"]] == [0.5, 0.9] and q["window"] == span["window"]
    versions = api.versions("latency")
    assert [v["version"] for v in versions["versions"]] == [1] and versions["versions"][0]["n_reports"] == N
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(ImportError, match="pandas"):
            Client.frame(top["items"])
    else:
        assert list(Client.frame(top["items"])["value"]) == ["checkout", "search", "home"]
