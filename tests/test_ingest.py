"""The collector over real HTTP (gunicorn, 2 workers) against the real (embedded) Redis:
valid batches of every oracle are stored as one stream entry each; every kind of bad request is
refused with the documented status and JSON error and leaves the streams unchanged."""

from __future__ import annotations

import threading
import time
import tomllib

import numpy as np
import pytest
from http_support import METRICS_AUTH, Poster, http_request, request, start_collector
from ingest_support import (
    EXPORT_TOKEN,
    INGEST_TOKEN,
    INGEST_TOKEN_2,
    config_text,
    stored_reports,
    total_entries,
)

from ldptel import keys
from ldptel.campaigns.config import parse_config
from ldptel.proto import GrrPayload, ReportBatch
from ldptel.store import scripts

CONFIG = parse_config(tomllib.loads(config_text()))
MECHS = {c.name: c.mechanism() for c in CONFIG.campaigns}
RNG = np.random.default_rng(20260101)


@pytest.fixture
def poster(collector):
    p = Poster(collector.url)
    yield p
    p.close()


def valid_batch(campaign: str, n: int = 10) -> ReportBatch:
    mech = MECHS[campaign]
    if campaign == "rappor":
        values = [f"v{i % 7}" for i in range(n)]
    else:
        values = RNG.integers(0, mech.domain_size, n)
    return mech.encode_batch(values, rng=RNG, campaign=campaign)


def assert_refused(poster, redis_client, body, status, error, token=INGEST_TOKEN, **kw):
    before = total_entries(redis_client)
    got, data = poster.post(body, token=token, **kw)
    assert (got, data["error"]) == (status, error), data
    assert set(data) == {"error", "detail"}
    assert total_entries(redis_client) == before
    return data["detail"]


# --- accepted ---------------------------------------------------------------------------------
@pytest.mark.parametrize("campaign", sorted(MECHS))
def test_valid_batch_is_one_entry_without_identifiers(campaign, poster, redis_client):
    batch = valid_batch(campaign, 25)
    status, data = poster.post(batch.SerializeToString(), headers={"User-Agent": "secret-agent/1"})
    assert (status, data) == (202, {"accepted": 25, "duplicate": False})
    camp = CONFIG.campaign(campaign)
    key = keys.ingress_key(campaign, keys.shard_of(batch.batch_id, camp.shards))
    assert total_entries(redis_client) == redis_client.xlen(key) == 1
    [(_, fields)] = redis_client.xrange(key)
    assert set(fields) == {b"batch", b"window", b"count"}
    assert int(fields[b"count"]) == 25
    assert fields[b"batch"] == batch.SerializeToString()
    blob = b"".join(fields.values())
    for secret in (INGEST_TOKEN.encode(), b"secret-agent", b"127.0.0.1"):
        assert secret not in blob
    window = int(fields[b"window"])
    if camp.window_seconds:
        assert window % 3600 == 0 and 0 <= time.time() - window < 3600 + 5
    else:
        assert window == 0
    assert redis_client.exists(keys.seen_key(campaign, keys.shard_of(batch.batch_id, camp.shards),
                                                batch.batch_id))


def test_entry_ids_and_markers_hold_no_receive_time(poster, redis_client):
    """The stream entry id is <window start ms>-<n>, and the dedupe marker holds no id: nothing
    that outlives the request keeps a time finer than the campaign's window."""
    for campaign in ("grr", "olh"):  # the "all" window, an hourly window
        camp = CONFIG.campaign(campaign)
        ids = []
        for _ in range(3):
            batch = valid_batch(campaign, 5)
            assert poster.post(batch.SerializeToString())[0] == 202
            shard = keys.shard_of(batch.batch_id, camp.shards)
            assert redis_client.get(keys.seen_key(campaign, shard, batch.batch_id)) == b"1"
            [(eid, fields)] = redis_client.xrevrange(keys.ingress_key(campaign, shard), count=1)
            assert eid.split(b"-")[0] == str(int(fields[b"window"]) * 1000).encode(), eid
            ids.append(eid)
        assert len(set(ids)) == 3


def test_entry_id_grows_when_a_clock_is_behind(redis_client):
    """A collector whose clock is an hour behind stores into a stream that already has an entry
    of the later window: the id takes the later window's ms (ids must grow); the entry keeps its
    own window field. The collector reads no XINFO (the ACL grants none): the last id it wrote is
    in its own key (``keys.stream_top_key``), and a stream holding entries from before that key
    existed gets a sequence past them (2^40)."""
    run = scripts.of(redis_client)
    stream = keys.stream_key("clock", 0)
    now = keys.window_start(time.time(), 3600)

    def ingest(shard: int, stream: str, batch_id: bytes, window: int) -> bytes:
        return run.call("INGEST", keys=[keys.seen_key("clock", shard, batch_id), stream,
                                        keys.metrics_key("clock", shard),
                                        keys.stream_top_key("clock", shard)],
                        args=[keys.dedupe_expire_at(time.time(), 3600), b"x", window, 1])

    ids = [ingest(0, stream, bytes([i]) * 16, window) for i, window in enumerate((now, now, now - 3600, 0))]
    assert ids == [f"{now * 1000}-{n}".encode() for n in range(4)]
    assert [int(f[b"window"]) for _, f in redis_client.xrange(stream)] == [now, now, now - 3600, 0]
    assert redis_client.get(keys.stream_top_key("clock", 0)) == ids[-1]
    empty = keys.stream_key("clock", 1)  # the "all" window on an empty stream: 0-0 is not an id
    assert ingest(1, empty, b"z" * 16, 0) == b"0-1"
    older = keys.stream_key("clock", 2)  # entries from before the top key: the id moves past them
    redis_client.xadd(older, {"batch": b"x", "window": now, "count": 1}, id=f"{now * 1000}-7")
    assert ingest(2, older, b"o" * 16, now) == f"{now * 1000}-{1 << 40}".encode()
    assert ingest(2, older, b"p" * 16, now) == f"{now * 1000}-{(1 << 40) + 1}".encode()


def test_sharded_campaign_spreads_batches(poster, redis_client):
    ids = [valid_batch("hadamard", 3) for _ in range(24)]
    for b in ids:
        assert poster.post(b.SerializeToString())[0] == 202
    lengths = [redis_client.xlen(keys.ingress_key("hadamard", s)) for s in range(4)]
    expected = np.bincount([keys.shard_of(b.batch_id, 4) for b in ids], minlength=4).tolist()
    assert lengths == expected and sum(lengths) == 24


def test_unknown_fields_are_not_stored(poster, redis_client):
    batch = valid_batch("grr", 4)
    clean = batch.SerializeToString()
    body = clean + bytes([0xF8, 0x06, 0x2A])  # field 111, varint 42: unknown to the schema
    assert ReportBatch.FromString(body).batch_id == batch.batch_id
    assert poster.post(body)[0] == 202
    [(_, fields)] = redis_client.xrange(keys.ingress_key("grr"))
    assert fields[b"batch"] == clean


def test_duplicate_batch_id_is_stored_once(poster, redis_client):
    body = valid_batch("olh", 50).SerializeToString()
    assert poster.post(body) == (202, {"accepted": 50, "duplicate": False})
    assert poster.post(body) == (202, {"accepted": 0, "duplicate": True})
    assert total_entries(redis_client) == 1 and stored_reports(redis_client) == 50


def test_concurrent_duplicates_across_workers_are_stored_once(collector, redis_client):
    body = valid_batch("sue", 20).SerializeToString()
    results, barrier = [], threading.Barrier(8)

    def send() -> None:
        p = Poster(collector.url)
        barrier.wait()
        results.append(p.post(body))
        p.close()

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(d["duplicate"] for _, d in results) == [False] + [True] * 7
    assert all(s == 202 for s, _ in results)
    assert total_entries(redis_client) == 1


# --- refused: request level -------------------------------------------------------------------
def test_auth(poster, redis_client):
    body = valid_batch("grr").SerializeToString()
    detail = assert_refused(poster, redis_client, body, 401, "unauthorized", token=None)
    assert detail == "missing bearer token"
    assert assert_refused(poster, redis_client, body, 401, "unauthorized", token="wrong-token-123")
    assert_refused(poster, redis_client, body, 401, "unauthorized", token=EXPORT_TOKEN)
    assert_refused(poster, redis_client, body, 401, "unauthorized", token=None,
                   headers={"Authorization": f"Basic {INGEST_TOKEN}"})
    assert poster.post(body, token=INGEST_TOKEN_2)[0] == 202


@pytest.mark.parametrize("ctype", ["application/json", "text/plain", ""])
def test_wrong_content_type(ctype, poster, redis_client):
    body = valid_batch("grr").SerializeToString()
    assert_refused(poster, redis_client, body, 415, "unsupported_media_type", content_type=ctype)


def test_oversized_body(collector, poster, redis_client):
    body = valid_batch("grr").SerializeToString()
    big = body + b"\x00" * ((1 << 20) + 1 - len(body))
    assert_refused(poster, redis_client, big, 413, "too_large")
    # chunked upload without Content-Length: cut off at the limit all the same
    before = total_entries(redis_client)
    chunks = (big[i:i + 65536] for i in range(0, len(big), 65536))
    reply = http_request(collector.url, "POST", "/v1/reports", chunks, chunked=True, timeout=15,
                         headers={"Content-Type": "application/x-protobuf",
                                  "Authorization": f"Bearer {INGEST_TOKEN}"})
    assert reply.status == 413, reply.body
    assert total_entries(redis_client) == before


@pytest.mark.parametrize("body", [b"", b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x12\x80"])
def test_malformed_protobuf(body, poster, redis_client):
    assert_refused(poster, redis_client, body, 400, "malformed_batch")


def test_batch_level_fields(poster, redis_client):
    b = valid_batch("grr")
    b.campaign = "nope"
    assert "nope" in assert_refused(poster, redis_client, b.SerializeToString(), 400, "unknown_campaign")
    b = valid_batch("grr")
    b.batch_id = b"short"
    assert "batch_id" in assert_refused(poster, redis_client, b.SerializeToString(), 400, "invalid_batch")
    b = valid_batch("grr")
    b.schema_version = 2
    assert "schema_version" in assert_refused(poster, redis_client, b.SerializeToString(), 400,
                                              "invalid_batch")
    b = valid_batch("grr")
    b.count = 0
    assert_refused(poster, redis_client, b.SerializeToString(), 400, "invalid_batch")
    b = valid_batch("olh")
    b.grr.CopyFrom(GrrPayload(values=[1] * 10))  # grr payload to an olh campaign
    assert "olh" in assert_refused(poster, redis_client, b.SerializeToString(), 400, "wrong_payload")
    b = valid_batch("grr")
    b.ClearField("grr")
    assert_refused(poster, redis_client, b.SerializeToString(), 400, "wrong_payload")
    b = MECHS["grr"].encode_batch(np.zeros(10_001, dtype=int), rng=RNG, campaign="grr")
    assert_refused(poster, redis_client, b.SerializeToString(), 413, "too_many_reports")


# --- refused: report level, per mechanism -----------------------------------------------------
def _set_row(batch: ReportBatch, field: str, row: int, row_bytes: bytes) -> None:
    msg = getattr(batch, batch.WhichOneof("payload"))
    raw = bytearray(getattr(msg, field))
    width = len(row_bytes)
    raw[row * width:(row + 1) * width] = row_bytes
    setattr(msg, field, bytes(raw))


def _or_last_byte(batch: ReportBatch, field: str, row: int, width: int, mask: int) -> None:
    msg = getattr(batch, batch.WhichOneof("payload"))
    raw = bytearray(getattr(msg, field))
    raw[(row + 1) * width - 1] |= mask
    setattr(msg, field, bytes(raw))


def m_grr_value(b):
    b.grr.values[3] = 5
    return 3, "not in [0, 5)"


def m_grr_short(b):
    del b.grr.values[-1]
    return 9, "values has 9 entries"


def m_olh_value(b):
    b.olh.values[2] = MECHS["olh"].g
    return 2, "g = 4"


def m_olh_seeds_long(b):
    b.olh.seeds.append(7)
    return 10, "seeds has 11 entries"


def m_had_index(b):
    b.hadamard.indices[4] = 128
    return 4, "D = 128"


def m_had_padding(b):
    b.hadamard.signs = b.hadamard.signs[:-1] + bytes([b.hadamard.signs[-1] | 1])
    return 9, "padding"


def m_had_short(b):
    b.hadamard.signs = b.hadamard.signs[:1]
    return 8, "signs must hold"


def m_sue_short(b):
    b.unary.bits = b.unary.bits[:-1]
    return 9, "bits must hold"


def m_sue_padding(b):
    _or_last_byte(b, "bits", 6, 13, 0x01)
    return 6, "padding"


def m_oue_all_ones(b):
    _set_row(b, "bits", 5, bytes([0xFF] * 127 + [0xF8]))
    return 5, "implausible"


def m_oue_all_zeros(b):
    _set_row(b, "bits", 7, bytes(128))
    return 7, "implausible"


def m_rappor_cohort(b):
    b.rappor.cohorts[1] = 8
    return 1, "cohort 8"


def m_rappor_ones(b):
    _set_row(b, "bits", 2, bytes([0xFF] * 7 + [0xF0]))
    return 2, "implausible"


def m_rappor_zeros(b):
    _set_row(b, "bits", 3, bytes(8))
    return 3, "implausible"


def m_rappor_padding(b):
    _or_last_byte(b, "bits", 4, 8, 0x02)
    return 4, "padding"


def m_rappor_cohorts_short(b):
    del b.rappor.cohorts[-3:]
    return 7, "cohorts has 7 entries"


MUTATIONS = [
    ("grr", m_grr_value), ("grr", m_grr_short), ("olh", m_olh_value), ("olh", m_olh_seeds_long),
    ("hadamard", m_had_index), ("hadamard", m_had_padding), ("hadamard", m_had_short),
    ("sue", m_sue_short), ("sue", m_sue_padding), ("oue", m_oue_all_ones), ("oue", m_oue_all_zeros),
    ("rappor", m_rappor_cohort), ("rappor", m_rappor_ones), ("rappor", m_rappor_zeros),
    ("rappor", m_rappor_padding), ("rappor", m_rappor_cohorts_short),
]


@pytest.mark.parametrize("campaign,mutate", MUTATIONS, ids=[m.__name__[2:] for _, m in MUTATIONS])
def test_out_of_range_report_names_index(campaign, mutate, poster, redis_client):
    batch = valid_batch(campaign, 10)
    index, reason = mutate(batch)
    detail = assert_refused(poster, redis_client, batch.SerializeToString(), 400, "invalid_report")
    assert detail["index"] == index, detail
    assert reason in detail["reason"], detail


def test_poisoned_batch_is_refused_whole(poster, redis_client):
    """One implausible row among honest ones: nothing of the batch is stored, and the rejection is
    counted under its own reason."""
    batch = valid_batch("oue", 200)
    _set_row(batch, "bits", 137, bytes([0xFF] * 127 + [0xF8]))
    detail = assert_refused(poster, redis_client, batch.SerializeToString(), 400, "invalid_report")
    assert detail["index"] == 137
    assert redis_client.hget("ldptel:metrics", "rej|oue|implausible_bits") == b"1"


# --- campaign API, health, metrics ------------------------------------------------------------
def test_campaign_configs(collector):
    status, data = request(collector.url, "GET", "/v1/campaigns",
                           headers={"Authorization": f"Bearer {INGEST_TOKEN}"})
    assert status == 200
    by_name = {c["name"]: c for c in data["campaigns"]}
    assert set(by_name) == set(MECHS)
    assert by_name["grr"]["domain"][0] == "apple" and by_name["grr"]["epsilon"] == 2.0
    assert by_name["rappor"]["bloom_bits"] == 60 and "secret" not in by_name["rappor"]
    assert (data["max_body_bytes"], data["max_reports_per_batch"]) == (1 << 20, 10_000)
    assert request(collector.url, "GET", "/v1/campaigns")[0] == 401


def test_unknown_routes_answer_json(collector):
    assert request(collector.url, "GET", "/nope")[1]["error"] == "not_found"
    status, data = request(collector.url, "GET", "/v1/reports")
    assert status == 405 and data["error"] == "method_not_allowed"


def test_health_and_metrics(collector, poster, redis_client):
    status, health = request(collector.url, "GET", "/healthz")
    assert status == 200 and isinstance(health, dict)
    assert {k: health[k] for k in ("status", "redis", "version")} == {"status": "ok", "redis": "ok",
                                                                     "version": "0.1.0"}
    parts = health["components"]
    assert parts["collector"]["status"] == parts["redis"]["status"] == "ok"
    assert parts["aggregator"]["supervised"] is False  # external Redis: this serve runs none
    good = valid_batch("grr", 7).SerializeToString()
    assert poster.post(good)[0] == 202
    assert poster.post(good)[1]["duplicate"]
    assert poster.post(b"\xff")[0] == 400
    assert poster.post(good, token="bad-token-0000")[0] == 401
    deadline = time.monotonic() + 5
    while True:
        status, text = request(collector.url, "GET", "/metrics", headers=METRICS_AUTH)
        assert status == 200
        lines = set(text.splitlines())
        wanted = {
            'ldptel_reports_accepted_total{campaign="grr"} 7',
            'ldptel_batches_accepted_total{campaign="grr"} 1',
            'ldptel_batches_duplicate_total{campaign="grr"} 1',
            'ldptel_reports_duplicate_total{campaign="grr"} 7',
            'ldptel_batches_rejected_total{campaign="",reason="malformed_batch"} 1',
            'ldptel_batches_rejected_total{campaign="",reason="unauthorized"} 1',
            'ldptel_stream_entries{campaign="grr"} 1',
        }
        hist = [ln for ln in lines if ln.startswith(
            'ldptel_request_duration_seconds_count{endpoint="ingest.post_reports"}')]
        if wanted <= lines and hist and int(hist[0].split()[-1]) >= 4:
            break
        assert time.monotonic() < deadline, sorted(wanted - lines)
        time.sleep(0.2)
    assert "# TYPE ldptel_request_duration_seconds histogram" in lines


def test_rate_limit(redis_url, redis_client, tmp_path):
    """A token over its per-minute limit gets 429 with Retry-After; other tokens are unaffected."""
    limited = start_collector(tmp_path, config_text(rate_limit=3), redis_url, workers=1)
    try:
        p = Poster(limited.url)
        for _ in range(3):
            assert p.post(valid_batch("grr", 2).SerializeToString())[0] == 202
        before = total_entries(redis_client)
        status, data = p.post(valid_batch("grr", 2).SerializeToString())
        assert status == 429 and data["error"] == "rate_limited"
        assert total_entries(redis_client) == before == 3
        assert p.post(valid_batch("grr", 2).SerializeToString(), token=INGEST_TOKEN_2)[0] == 202
        p.close()
        reply = http_request(limited.url, "POST", "/v1/reports", valid_batch("grr", 2).SerializeToString(),
                             headers={"Content-Type": "application/x-protobuf",
                                      "Authorization": f"Bearer {INGEST_TOKEN}"}, timeout=10)
        assert reply.status == 429 and int(reply.headers["retry-after"]) >= 1
    finally:
        limited.stop()


def test_rate_limiter_leases_share_one_limit(redis_client):
    """Three processes' limiters leasing quota in blocks admit exactly the limit per minute, and
    the previous minute still weighs in (sliding window); refused requests count for nothing
    (issue 34: they do not spend the budget every device shares)."""
    from ldptel.server.ratelimit import RateLimiter

    limiters = [RateLimiter(redis_client, 4_000) for _ in range(3)]
    assert limiters[0].lease == 20
    t0 = 60.0 * 30_000_000  # the start of a minute
    allowed = sum(limiters[i % 3].check("tok", t0 + i * 1e-6)[0] for i in range(5_000))
    assert allowed == 4_000
    ok, wait = limiters[0].check("tok", t0 + 1)
    assert not ok and 59 <= wait <= 60
    assert int(redis_client.get(keys.ratelimit_key("tok", int(t0 // 60)))) == 4_000  # not 5 001
    # half-way through the next minute the previous minute's 4 000 weigh 2 000: 2 000 left
    allowed = sum(limiters[i % 3].check("tok", t0 + 90 + i * 1e-6)[0] for i in range(3_000))
    assert allowed == 2_000
