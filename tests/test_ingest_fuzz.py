"""Property test of the collector's parser and validator over real HTTP: random bytes and random
mutations of valid batches never cause a 5xx, and the collector stores a batch exactly when an
independent, report-by-report reference check (written plainly, no numpy) says it is valid."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest
from http_support import Poster
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from ingest_support import config_text

from ldptel import keys
from ldptel.campaigns.config import parse_config
from ldptel.proto import GrrPayload, OlhPayload, ReportBatch

CONFIG_TEXT = config_text(max_reports=500)
CONFIG = parse_config(tomllib.loads(CONFIG_TEXT))
MECHS = {c.name: c.mechanism() for c in CONFIG.campaigns}
pytestmark = pytest.mark.collector(CONFIG_TEXT, workers=1)
STREAMS = [keys.ingress_key(c.name, s) for c in CONFIG.campaigns for s in range(c.shards)]
REPEATED = {"grr": ["values"], "olh": ["seeds", "values"], "hadamard": ["indices"],
            "unary": [], "rappor": ["cohorts"]}
BYTES = {"grr": [], "olh": [], "hadamard": ["signs"], "unary": ["bits"], "rappor": ["bits"]}


def reference_valid(body: bytes) -> bool:
    """Is ``body`` a batch an honest client could have sent? One report at a time."""
    try:
        b = ReportBatch.FromString(body)
    except Exception:  # noqa: BLE001 - any parse failure: not a batch
        return False
    camp = CONFIG.campaign(b.campaign)
    if b.schema_version != 1 or len(b.batch_id) != 16 or camp is None:
        return False
    n, mech = b.count, MECHS[camp.name]
    if not 1 <= n <= 500 or b.WhichOneof("payload") != mech.payload:
        return False

    def rows_ok(raw: bytes, k: int) -> bool:
        width = (k + 7) // 8
        if len(raw) != n * width:
            return False
        lo, hi = mech.weight_bounds()
        for i in range(n):
            bits = "".join(f"{byte:08b}" for byte in raw[i * width:(i + 1) * width])
            if "1" in bits[k:] or not lo <= bits[:k].count("1") <= hi:
                return False
        return True

    if mech.payload == "grr":
        return len(b.grr.values) == n and all(v < mech.domain_size for v in b.grr.values)
    if mech.payload == "olh":
        return (len(b.olh.seeds) == n and len(b.olh.values) == n
                and all(y < mech.g for y in b.olh.values))
    if mech.payload == "hadamard":
        signs = "".join(f"{byte:08b}" for byte in b.hadamard.signs)
        return (len(b.hadamard.indices) == n and all(j < mech.D for j in b.hadamard.indices)
                and len(b.hadamard.signs) == (n + 7) // 8 and "1" not in signs[n:])
    if mech.payload == "unary":
        return rows_ok(b.unary.bits, mech.domain_size)
    return (len(b.rappor.cohorts) == n and all(c < mech.cohorts for c in b.rappor.cohorts)
            and rows_ok(b.rappor.bits, mech.bloom_bits))


@pytest.fixture(scope="module")
def poster(collector):
    p = Poster(collector.url)
    yield p
    p.close()


@st.composite
def mutated_batches(draw) -> bytes:
    campaign = draw(st.sampled_from(sorted(MECHS)))
    mech = MECHS[campaign]
    n = draw(st.integers(1, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if campaign == "rappor":
        values = [f"s{i}" for i in rng.integers(0, 9, n)]
    else:
        values = rng.integers(0, mech.domain_size, n)
    batch_id = draw(st.binary(min_size=16, max_size=16))
    b = mech.encode_batch(values, rng=rng, campaign=campaign, batch_id=batch_id)
    payload = getattr(b, b.WhichOneof("payload"))
    kind = b.WhichOneof("payload")
    u32 = st.one_of(st.integers(0, 2 * max(mech.domain_size, 8)), st.integers(0, 2**32 - 1))
    how = draw(st.sampled_from(["none", "count", "scalar", "resize", "byte", "row", "campaign",
                                "version", "batch_id", "payload", "wire"]))
    if how == "count":
        b.count = draw(st.one_of(st.integers(0, 2**32 - 1), st.integers(max(0, n - 2), n + 2)))
    elif how == "scalar" and REPEATED[kind]:
        field = getattr(payload, draw(st.sampled_from(REPEATED[kind])))
        field[draw(st.integers(0, len(field) - 1))] = draw(u32)
    elif how == "resize" and REPEATED[kind]:
        field = getattr(payload, draw(st.sampled_from(REPEATED[kind])))
        if draw(st.booleans()):
            field.append(draw(u32))
        else:
            del field[-1]
    elif how in ("byte", "row") and BYTES[kind]:
        name = draw(st.sampled_from(BYTES[kind]))
        raw = bytearray(getattr(payload, name))
        if how == "byte" and raw:
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        elif how == "row" and kind != "hadamard":
            width = len(raw) // n
            i = draw(st.integers(0, n - 1))
            raw[i * width:(i + 1) * width] = draw(st.sampled_from([b"\xff", b"\x00", b"\x0f"])) * width
        else:
            raw = raw[:-1] if draw(st.booleans()) else raw + bytes([draw(st.integers(0, 255))])
        setattr(payload, name, bytes(raw))
    elif how == "campaign":
        b.campaign = draw(st.one_of(st.sampled_from(sorted(MECHS)), st.text(max_size=70)))
    elif how == "version":
        b.schema_version = draw(st.integers(0, 2**32 - 1))
    elif how == "batch_id":
        b.batch_id = draw(st.binary(max_size=40))
    elif how == "payload":
        other = draw(st.sampled_from(["grr", "olh", "none"]))
        if other == "grr":
            b.grr.CopyFrom(GrrPayload(values=[int(v) % 5 for v in range(n)]))
        elif other == "olh":
            b.olh.CopyFrom(OlhPayload(seeds=list(range(n)), values=[1] * n))
        else:
            b.ClearField(kind)
    body = b.SerializeToString()
    if how == "wire" and body:
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        data = bytearray(body)
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            data = data[:i]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[i:i + draw(st.integers(1, 8))]
        body = bytes(data)
    return body


def lengths(client) -> list[int]:
    pipe = client.pipeline(transaction=False)
    for key in STREAMS:
        pipe.xlen(key)
    return pipe.execute()


def check(poster, client, body: bytes) -> None:
    before = lengths(client)
    status, data = poster.post(body)
    event(f"{status} {data['error'] if isinstance(data, dict) and 'error' in data else 'stored'}")
    after = lengths(client)
    assert status < 500, data
    if reference_valid(body):
        assert status == 202, data
        assert sum(after) == sum(before) + (0 if data["duplicate"] else 1)
    else:
        assert status in (400, 413), data
        assert after == before
        assert set(data) == {"error", "detail"}
    for key, n0, n1 in zip(STREAMS, before, after, strict=True):
        if n1 > n0:  # what was stored is the valid batch, without unknown fields
            [(_, fields)] = client.xrevrange(key, count=1)
            parsed = ReportBatch.FromString(body)
            parsed.DiscardUnknownFields()
            assert fields[b"batch"] == parsed.SerializeToString()
            assert reference_valid(fields[b"batch"])


FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                     HealthCheck.too_slow], derandomize=True)


@settings(FUZZ, max_examples=400)
@given(body=mutated_batches())
def test_mutated_batches(poster, redis_client, body):
    check(poster, redis_client, body)


@settings(FUZZ, max_examples=150)
@given(body=st.one_of(st.binary(max_size=600),
                     st.binary(min_size=1, max_size=40).map(lambda b: b"\x1a" + b)))
def test_random_bytes(poster, redis_client, body):
    check(poster, redis_client, body)
