"""Breakdowns and experiments end to end (issue 28): ``ldptel serve`` (gunicorn), the SDK's
``report_many`` / ``report`` with dimensions, ``ldptel shuffle --once`` and ``ldptel aggregate
--once`` on the session Redis, and the export API, CSV, Parquet (pyarrow, pandas, DuckDB) and the
export client.

The campaign: OUE at ε = 2 over 4 values, ``platform`` (android, ios, web) × ``arm`` (control,
treatment), ``min_reports`` = 1,000 per cell. Devices per arm: 12,000 android, 8,000 ios, 300
web (withheld); control draws (0.40, 0.30, 0.20, 0.10), treatment +5 points on ``a`` and −5 on
``d`` (``b`` and ``c``: the null effects). At these sizes (20,000 devices per arm) the +5 points'
CI excludes 0 in 99.3 % of simulated trials and a null effect's CI covers 0 in 95 ± 1.5 %
(``test_experiment_coverage.py``); here one seeded run.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import run_aggregate, run_shuffle
from http_support import http_request, start_collector
from ingest_support import EXPORT_TOKEN, INGEST_TOKEN, PROTOBUF
from redis_audit import audit

from ldptel.campaigns.config import load_config
from ldptel.export import Client
from ldptel.mechanisms import create_mechanism
from ldptel.proto import ReportBatch
from ldptel.store import tally

CONTROL = [0.40, 0.30, 0.20, 0.10]
TREATMENT = [0.45, 0.30, 0.20, 0.05]
SIZES = {"android": 12_000, "ios": 8_000, "web": 300}  # devices per arm
ODD = 25  # reports with a platform outside the list ("blackberry") and no arm: cell (other, other)
CONFIG = f"""
[server]
rate_limit_per_address_per_minute = 0   # the test's fleet sends from one loopback address
max_unfinished_bodies_per_address = 64  # … concurrently
ingest_tokens = ["{INGEST_TOKEN}"]
export_tokens = ["{EXPORT_TOKEN}"]

[[campaigns]]
name = "checkout"
oracle = "oue"
epsilon = 2.0
domain = ["a", "b", "c", "d"]
window = "1h"
min_reports = 1000
reports_per_window = 1000000  # one SDK plays many devices
dimensions = {{ platform = ["android", "ios", "web"], arm = ["control", "treatment"] }}
experiment = "arm"

[[campaigns]]
name = "basket"
kind = "numeric"
epsilon = 2.0
lower = 0
upper = 100
min_reports = 1000
reports_per_window = 1000000
dimensions = {{ arm = ["control", "treatment"] }}
experiment = "arm"
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str):
    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    tmp = tmp_path_factory.mktemp("breakdowns")
    collector = start_collector(tmp / "serve", CONFIG, redis_url)
    rng = np.random.default_rng(28)
    truth: dict[tuple[str, str], np.ndarray] = {}
    from ldptel.client import TelemetryClient

    client = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp / "q.sqlite",
                             rng=np.random.default_rng(29))
    try:
        for platform, n in SIZES.items():
            for arm, freqs in (("control", CONTROL), ("treatment", TREATMENT)):
                values = rng.choice(4, size=n, p=freqs)
                truth[platform, arm] = np.bincount(values, minlength=4)
                assert client.report_many("checkout", values.tolist(),
                                          dimensions={"platform": platform, "arm": arm}) == n
        for _ in range(ODD):  # a bad value and a missing dimension: counted in "other", not lost
            assert client.report("checkout", "a", dimensions={"platform": "blackberry"})
        for arm, mean in (("control", 40.0), ("treatment", 50.0)):
            assert client.report_many("basket", rng.uniform(mean - 30, mean + 30, 3000).tolist(),
                                      dimensions={"arm": arm}) == 3000
        with pytest.raises(ValueError, match="no dimension 'colour'"):
            client.report("checkout", "a", dimensions={"colour": "red"})
        result = client.flush(timeout=120)
        assert result.ok and client.pending() == 0, result
        cfg = load_config(collector.config_path)
        run_shuffle(collector.config_path, redis_url)
        run_aggregate(collector.config_path, redis_url)
        yield collector, cfg, r, truth, tmp
    finally:
        client.close(flush_timeout=None)
        collector.stop()
        r.close()


def get(collector, path: str) -> tuple[int, object, bytes]:
    if "/series" not in path and "window=" not in path:  # the hour the devices report in, in progress
        path += ("&" if "?" in path else "?") + "window=current"
    reply = http_request(collector.url, "GET", path, headers={"Authorization": f"Bearer {EXPORT_TOKEN}"})
    json_body = "json" in reply.headers.get("content-type", "")
    return reply.status, reply.parsed() if json_body else None, reply.body


def doc_of(collector, query: str, campaign: str = "checkout", what: str = "estimates") -> dict:
    status, doc, body = get(collector, f"/v1/campaigns/{campaign}/{what}?{query}")
    assert status == 200, (status, body[:300])
    assert isinstance(doc, dict)
    return doc


def test_every_report_counted_once_and_in_a_cell(stack) -> None:
    _, cfg, r, truth, _ = stack
    camp = cfg.campaign("checkout")
    sent = sum(int(v.sum()) for v in truth.values()) + ODD
    assert sum(tally.window_counts(r, camp).values()) == sent  # the odd values were not lost
    assert audit(r, cfg) == []  # batches hold canonical dimension values only, no fine time


def test_cells_released_withheld_and_summed(stack) -> None:
    collector, _, _, truth, _ = stack
    doc = doc_of(collector, "by=platform,arm")
    cells = {(c["dimensions"]["platform"], c["dimensions"]["arm"]): c for c in doc["cells"]}
    assert doc["withheld"] == {"cells": 3, "n_reports": 2 * SIZES["web"] + ODD}
    for key in (("web", "control"), ("web", "treatment"), ("other", "other")):
        assert cells[key]["withheld"] and cells[key]["n_reports"] is None and cells[key]["items"] == []
    zs = []
    for key, c in cells.items():
        if c["withheld"]:
            continue
        assert c["n_reports"] == int(truth[key].sum())
        zs += [(it["estimate"] - t) / it["std_error"] for it, t in zip(c["items"], truth[key], strict=True)]
    assert len(zs) == 16 and max(map(abs, zs)) < 4 and 0.4 < float(np.sqrt(np.mean(np.square(zs)))) < 1.6, zs
    fleet = doc_of(collector, "")
    assert "cells" not in fleet and fleet["n_reports"] == 40_000
    for i, item in enumerate(fleet["items"]):  # the fleet-wide estimate is the sum of the cells
        parts = [c["items"][i] for c in doc["cells"] if not c["withheld"]]
        assert item["estimate"] == pytest.approx(sum(p["estimate"] for p in parts), rel=1e-12)
        assert item["std_error"] ** 2 == pytest.approx(sum(p["std_error"] ** 2 for p in parts), rel=1e-12)
    by_platform = {c["dimensions"]["platform"]: c for c in doc_of(collector, "by=platform")["cells"]}
    assert by_platform["android"]["n_reports"] == 24_000 and by_platform["web"]["withheld"]


def test_experiment_effect_detected_and_null_covered(stack) -> None:
    collector, _, _, _, _ = stack
    doc = doc_of(collector, "by=arm&compare=treatment")
    assert doc["comparison"] == {"dimension": "arm", "control": "control", "treatment": "treatment",
                                 "withheld": False}
    diff = {d["value"]: d for d in doc["differences"]}
    assert diff["a"]["ci_low"] > 0 and abs(diff["a"]["estimate"] - 0.05) < 3 * diff["a"]["std_error"]
    assert diff["d"]["ci_high"] < 0
    for null in ("b", "c"):
        assert diff[null]["ci_low"] <= 0 <= diff[null]["ci_high"], diff[null]
    per_platform = doc_of(collector, "by=platform,arm&compare=treatment")
    treated = [c for c in per_platform["cells"] if c["dimensions"]["arm"] == "treatment"]
    assert {c["dimensions"]["platform"]: bool(c["differences"]) for c in treated} == \
        {"android": True, "ios": True, "web": False}
    numeric = doc_of(collector, "by=arm&compare=treatment", "basket", "mean")
    [mean] = numeric["differences"]
    assert mean["ci_low"] <= 10.0 <= mean["ci_high"] and mean["ci_low"] > 0


def test_bad_parameters(stack) -> None:
    collector, _, _, _, _ = stack
    for query, name in (("by=colour", "by"), ("by=arm,arm", "by"), ("compare=treatment", "compare"),
                        ("by=arm&compare=control", "compare"), ("by=platform&compare=treatment", "compare"),
                        ("format=xml", "format")):
        status, doc, _ = get(collector, f"/v1/campaigns/checkout/estimates?{query}")
        assert status == 400 and doc["detail"].startswith(f"{name}:"), (query, doc)


def test_csv_and_parquet_carry_the_same_rows(stack) -> None:
    import duckdb
    import pandas as pd
    import pyarrow.parquet as pq

    collector, _, _, _, tmp = stack
    status, _, body = get(collector, "/v1/campaigns/checkout/estimates?by=platform,arm&format=csv")
    assert status == 200
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    # issue 35: the same last columns as a campaign without dimensions ("…, window, n_reports, complete")
    header = body.decode().split("\n", 1)[0].split(",")
    assert header[-3:] == ["window", "n_reports", "complete"] and header[:2] == ["platform", "arm"], header
    plain = get(collector, "/v1/campaigns/checkout/estimates?format=csv")[2].decode().split("\n", 1)[0]
    assert plain.split(",")[-3:] == ["window", "n_reports", "complete"], plain
    status, _, data = get(collector, "/v1/campaigns/checkout/estimates?by=platform,arm&format=parquet")
    assert status == 200 and data[:4] == b"PAR1"
    path = Path(tmp) / "checkout.parquet"
    path.write_bytes(data)
    table = pq.read_table(path)
    assert table.schema.names == ["window_start", "window_end", "window", "version", "platform", "arm",
                                  "value", "estimate", "std_error", "ci_low", "ci_high",
                                  "estimate_normalized", "n_reports", "status", "epsilon_local",
                                  "epsilon_central", "epsilon_central_lower", "complete"]
    assert set(table.column("complete").to_pylist()) == {False}  # the hour in progress (issue 35)
    assert str(table.schema.field("window_start").type) == "timestamp[ms, tz=UTC]"
    frame = pd.read_parquet(path)
    assert len(frame) == len(rows) == 4 * 4 + 3  # released cells × values, one row per withheld cell
    for row, (_, rec) in zip(rows, frame.iterrows(), strict=True):
        assert (row["platform"], row["arm"]) == (rec["platform"], rec["arm"])
        assert row["value"] == ("" if pd.isna(rec["value"]) else rec["value"])
        if row["estimate"]:
            assert float(row["estimate"]) == rec["estimate"] and rec["status"] == "released"
    assert set(frame.loc[frame["status"] == "withheld", "platform"]) == {"web", "other"}
    assert (frame["epsilon_local"] == 2.0).all()
    top = duckdb.sql(f"SELECT platform, arm, estimate FROM '{path}' WHERE value = 'a' "
                     "AND status = 'released' ORDER BY estimate DESC LIMIT 1").fetchall()
    assert top[0][:2] == ("android", "treatment")
    raw = get(collector, "/v1/campaigns/checkout/series?by=arm&format=parquet")[2]
    series = pq.read_table(io.BytesIO(raw))
    assert series.schema.names[4] == "arm"
    assert set(series.column("arm").to_pylist()) == {"control", "treatment", "other"}
    api = Client(collector.url, EXPORT_TOKEN)
    now = "current"
    assert api.table("checkout", by=["platform", "arm"], window=now).equals(frame)
    assert api.table("checkout", as_="arrow", window=now).num_rows == 4
    assert api.table("basket", "mean", by="arm", window=now)["value"].tolist()[:2] == ["mean", "sum"]
    compared = api.estimates("checkout", window=now, by="arm", compare="treatment")
    assert compared["comparison"]["withheld"] is False and compared["complete"] is False


def test_collector_maps_odd_dimensions_to_other(stack) -> None:
    collector, cfg, r, _, _ = stack
    mech = create_mechanism("oue", epsilon=2.0, domain_size=4)
    batch = mech.encode_batch([0, 1], rng=np.random.default_rng(1), campaign="checkout",
                              batch_id=bytes(range(16)))
    for name, value in (("platform", "IOS"), ("colour", "red"), ("arm", "treatment"), ("arm", "control")):
        batch.dimensions.add(name=name, value=value)
    reply = http_request(collector.url, "POST", "/v1/reports", batch.SerializeToString(),
                         {"Content-Type": PROTOBUF, "Authorization": f"Bearer {INGEST_TOKEN}"})
    assert reply.status == 202, reply.body
    camp = cfg.campaign("checkout")
    from ldptel import keys

    entries = r.xrange(keys.ingress_key(camp.name, keys.shard_of(batch.batch_id, camp.shards)))
    stored = ReportBatch.FromString(entries[-1][1][keys.ENTRY_BATCH])
    assert [(d.name, d.value) for d in stored.dimensions] == [("arm", "control"), ("platform", "other")]
