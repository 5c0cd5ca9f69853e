"""The SDK against a collector with a small ``max_body_bytes``: it learns the limits from
``GET /v1/campaigns``, never sends a body over them, splits a queued row that is too big instead of
dropping it, and a chunk that must be split does not hold up other campaigns' reports."""

from __future__ import annotations

import pytest
from ingest_support import INGEST_TOKEN, config_text, entries, stored_reports

from ldptel.client import TelemetryClient

MAX_BODY = 64 << 10
pytestmark = pytest.mark.collector(config_text(max_body=MAX_BODY, max_reports=800))


def make_client(collector, tmp_path, **kw) -> TelemetryClient:
    return TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite", **kw)


def test_sdk_learns_the_collector_limits(collector, tmp_path):
    client = make_client(collector, tmp_path)
    client.campaigns()
    assert (client.limits.max_body_bytes, client.limits.max_reports_per_batch) == (MAX_BODY, 800)
    client.close(flush_timeout=None)


def test_oversized_row_is_split_and_other_campaigns_are_delivered_in_one_flush(
        collector, tmp_path, redis_client):
    """One queued row of 1,000 OUE reports (d = 1021: ≈ 128 KB, twice the limit) ahead of 50 GRR
    reports: one flush delivers all 1,050 and drops nothing."""
    client = make_client(collector, tmp_path)
    mech = client.mechanism("oue")
    row = mech.encode_batch(list(range(1000)), campaign="oue", batch_id=b"")
    assert len(row.SerializeToString()) > 2 * MAX_BODY - 4096
    client.queue.append("oue", 1000, row.SerializeToString())  # a row queued under a larger limit
    for v in range(50):
        client.report("grr", v % 5)
    result = client.flush(timeout=20)
    assert (result.accepted, result.dropped, result.pending) == (1050, 0, 0), result
    assert stored_reports(redis_client, "oue") == 1000 and stored_reports(redis_client, "grr") == 50
    assert all(len(e[b"batch"]) <= MAX_BODY for e in entries(redis_client, "oue"))
    client.close()


def test_report_many_rows_fit_the_limits(collector, tmp_path, redis_client):
    client = make_client(collector, tmp_path, batch_size=1000)
    assert client.report_many("oue", [v % 1021 for v in range(3000)]) == 3000
    result = client.flush(timeout=20)
    assert (result.accepted, result.dropped, result.pending) == (3000, 0, 0), result
    got = entries(redis_client, "oue")
    assert sum(int(e[b"count"]) for e in got) == 3000
    assert all(len(e[b"batch"]) <= MAX_BODY and int(e[b"count"]) <= 800 for e in got)
    client.close()
