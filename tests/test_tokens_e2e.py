"""Privacy Pass tokens end to end (issue 37): the issuer and the collector over HTTP on one Redis,
real sealed envelopes. One stack asserts the Sybil bounds of the issue: 2,000 token-less envelopes
all refused, a replayed token 409, tokens for another campaign / window / key refused, 50
subjects × 1 report → 50 counted; and unlinkability: no value common to the issuer's and the
collector's stores."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jwt
import pytest
import redis
from agg_support import HttpStack
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from issuer_support import IssuerStack
from sealed_support import SHUFFLED, publish_keys, shuffle_and_aggregate

from ldptel import key_signing, keys, privacy_pass
from ldptel.client.sealed import seal_rows, unsealed
from ldptel.mechanisms.builder import build_mechanism
from ldptel.privacy_pass import Token

CAMP = {**SHUFFLED, "name": "tok-grr", "batch_min": 50, "window": "1h"}


@pytest.fixture
def stacks(redis_client: redis.Redis, redis_url: str, tmp_path: Path):
    signing = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "app.pem").write_bytes(
        signing.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    import dataclasses

    from agg_support import write_config

    cfg = write_config(
        tmp_path / "c.toml",
        [CAMP],
        shuffler={"batch_reports": 200},
        issuer={
            "attester": "jwt",
            "jwt_public_key": str(tmp_path / "app.pem"),
            "jwt_audience": "app",
            "key_file": str(tmp_path / "issuer" / "key.pem"),
        },
    )
    cfg = dataclasses.replace(
        cfg, analyzer=dataclasses.replace(cfg.analyzer, keys_dir=str(tmp_path / "keys"))
    )
    assert cfg.campaigns[0].require_tokens  # a config with [issuer]: shuffled campaigns take tokens
    PINNED[:] = [publish_keys(cfg, redis_client).pinned]  # the app's analyzer_signing_key
    issuer = IssuerStack(cfg, redis_url)
    # the devices are told the issuer's real address (the test's free port)
    cfg = dataclasses.replace(cfg, issuer=dataclasses.replace(cfg.issuer, url=issuer.url))
    collector = HttpStack(cfg, redis_url)

    def attest(sub: str) -> str:
        return jwt.encode(
            {"sub": sub, "aud": "app", "exp": int(time.time()) + 60}, signing, algorithm="EdDSA"
        )

    yield cfg, issuer, collector, attest
    collector.close()
    issuer.close()


PINNED: list[str] = []  # the analyzer signing key of the stacks' keys directory

def envelope(collector: HttpStack, value: int) -> tuple[bytes, int]:
    """One device's real sealed envelope (the SDK's sealing), and its window."""
    status, _, raw = collector.get("/v1/campaigns", token="ingest-token-for-tests")
    cfg = next(c for c in json.loads(raw)["campaigns"] if c["name"] == CAMP["name"])
    assert cfg["require_tokens"] is True
    mech = build_mechanism(cfg)
    now = time.time()
    row = unsealed(cfg, mech, mech.encode_batch([value], campaign=CAMP["name"]), now)
    sealed, _ = seal_rows(cfg, mech, CAMP["name"], 1, os.urandom(16), [row], now,
                          signing_key=key_signing.signing_public(PINNED[0]))
    return sealed[0].body, keys.window_start(now, 3600)


def post(collector: HttpStack, body: bytes, token: Token | None):
    headers = {"Content-Type": "application/x-protobuf"}
    headers["Authorization"] = (
        privacy_pass.authorization(token) if token is not None else "Bearer ingest-token-for-tests"
    )
    status, _, raw = collector.request("POST", "/v1/reports", body, headers)
    return status, json.loads(raw)


def test_tokens_end_to_end(stacks, redis_client: redis.Redis):
    cfg, issuer, collector, attest = stacks
    body, window = envelope(collector, 3)

    # 2,000 token-less envelopes: every one refused, nothing stored
    refused = sum(post(collector, body, None)[1]["error"] == "token_required" for _ in range(2000))
    assert refused == 2000
    assert redis_client.xlen(keys.ingress_key(CAMP["name"], 0)) == 0

    # malformed, wrong-window, wrong-campaign and foreign-key tokens: 401 bad_token, nothing stored
    good = issuer.tokens(CAMP["name"], window, 1, attestation=attest("probe"))[0]
    other_window = issuer.tokens(CAMP["name"], window - 3600 * 5, 1, attestation=attest("probe2"))[0]
    other_campaign = issuer.tokens("elsewhere", window, 1, attestation=attest("probe3"))[0]
    forged = Token(good.nonce, good.challenge_digest, b"\x07" * 32, good.authenticator)
    flipped = Token(good.nonce, good.challenge_digest, good.token_key_id, good.authenticator[:-1] + b"\x00")
    for bad in (other_window, other_campaign, forged, flipped):
        status, doc = post(collector, body, bad)
        assert (status, doc["error"]) == (401, "bad_token"), doc
    for header in ('PrivateToken token="AAAA"', "PrivateToken nothing", 'PrivateToken token="!!"'):
        status, _, raw = collector.request(
            "POST", "/v1/reports", body, {"Content-Type": "application/x-protobuf", "Authorization": header}
        )
        assert (status, json.loads(raw)["error"]) == (401, "bad_token")
    assert redis_client.xlen(keys.ingress_key(CAMP["name"], 0)) == 0

    # a subject asking for a second token in the window: refused by the issuer
    with pytest.raises(AssertionError, match="token_quota"):
        issuer.tokens(CAMP["name"], window, 1, attestation=attest("probe"))

    # the good token: accepted once; replayed (another envelope, same token): 409
    assert post(collector, body, good)[0] == 202
    body2, _ = envelope(collector, 4)
    status, doc = post(collector, body2, good)
    assert (status, doc["error"]) == (409, "token_spent"), doc

    # 49 more subjects × 1 report: 50 counted in all
    for i in range(49):
        token = issuer.tokens(CAMP["name"], window, 1, attestation=attest(f"user-{i}"))[0]
        b, _ = envelope(collector, i % 8)
        assert post(collector, b, token)[0] == 202
    shuffle_and_aggregate(cfg, redis_client)
    status, _, raw = collector.get(f"/v1/campaigns/{CAMP['name']}/estimates?window={window}")
    assert status == 200, raw
    assert json.loads(raw)["n_reports"] == 50

    # random PrivateToken credentials (seeded): every one 401, never a 5xx, nothing stored
    import random

    rng = random.Random(37)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=+/ \"!,"
    before = redis_client.xlen(keys.ingress_key(CAMP["name"], 0))
    for _ in range(200):
        value = "".join(rng.choice(alphabet) for _ in range(rng.choice((0, 1, 4, 472, 473, 2000))))
        status, _, raw = collector.request("POST", "/v1/reports", body, {
            "Content-Type": "application/x-protobuf", "Authorization": f'PrivateToken token="{value}"'})
        assert (status, json.loads(raw)["error"]) == (401, "bad_token"), (value, raw)
    assert redis_client.xlen(keys.ingress_key(CAMP["name"], 0)) == before

    # an expired token key: its tokens are refused (401 bad_token, "expired"), nothing stored
    fresh = issuer.tokens(CAMP["name"], window, 1, attestation=attest("late-user"))[0]
    path = cfg.issuer.public_path()
    listing = json.loads(path.read_text())
    listing["token-keys"][0]["ldptel-not-after"] = int(time.time()) - 1
    path.write_text(json.dumps(listing))
    time.sleep(2.5)  # the collector reads the directory again within DIRECTORY_CACHE_SECONDS
    b3, _ = envelope(collector, 1)
    status, doc = post(collector, b3, fresh)
    assert (status, doc["error"]) == (401, "bad_token") and "expired" in doc["detail"]["reason"], doc
    assert redis_client.xlen(keys.ingress_key(CAMP["name"], 0)) == before

    # unlinkability: no value (key or member) common to the issuer's and the collector's stores
    issuer_values, collector_values = set(), set()
    for k in redis_client.keys("*"):
        values = {k}
        t = redis_client.type(k)
        if t == b"set":
            values |= set(redis_client.smembers(k))
        elif t == b"string":
            values.add(redis_client.get(k))
        (issuer_values if k.startswith(b"ldptel:issuer:") else collector_values).update(values)

    def parts(values: set[bytes]) -> set[bytes]:
        """Every field of 8+ bytes, a window start (public time, shared by design) left out."""
        return {
            p
            for v in values
            for p in v.replace(b"{", b":").replace(b"}", b":").split(b":")
            if len(p) >= 8 and not p.isdigit() and p != b"ldptel"
        }

    assert issuer_values and collector_values
    common = parts(issuer_values) & parts(collector_values)
    assert not common, common


def test_sdk_sends_with_tokens_and_waits_without(stacks, redis_client: redis.Redis, tmp_path: Path):
    """Python SDK (issue 37 item 4): with ``attestation`` each report goes in its own envelope with
    a fresh token (3 devices → 3 stored, tokens spent and gone from the SDK's file); without, the
    reports wait (``health().waiting == {"no_token": 1}``) and nothing reaches the collector."""
    from agg_support import INGEST_TOKEN

    from ldptel.client import TelemetryClient

    cfg, issuer, collector, attest = stacks
    for i in range(3):
        with TelemetryClient(
            collector.url,
            INGEST_TOKEN,
            queue_path=tmp_path / f"d{i}.sqlite",
            attestation=lambda i=i: attest(f"device-{i}"),
            analyzer_signing_key=PINNED[0],
        ) as client:
            assert client.report(CAMP["name"], i)
            result = client.flush(timeout=30)
            assert (result.accepted, result.pending) == (1, 0), result
            assert client.tokens._queue().query("SELECT COUNT(*) FROM tokens") == [(0,)]
    assert redis_client.xlen(keys.ingress_key(CAMP["name"], 0)) == 3
    spent = redis_client.keys(b"*:spent:*")
    assert sum(redis_client.scard(k) for k in spent) == 3

    with TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "none.sqlite",
                         analyzer_signing_key=PINNED[0]) as client:
        assert client.report(CAMP["name"], 1)
        result = client.flush(timeout=3)
        assert result.pending == 1 and "no_token" in (result.error or ""), result
        assert client.health().waiting == {"no_token": 1}
    assert redis_client.xlen(keys.ingress_key(CAMP["name"], 0)) == 3  # never sent without a token
    assert collector.app.extensions["ldptel"].metrics.flush()
    counters = redis_client.hgetall(keys.GLOBAL_METRICS_KEY)  # the collector refused nothing:
    refused = {k: v for k, v in counters.items() if k.startswith(b"rej|")}  # no token-less envelope came
    assert not refused, refused


CLIENT_JS = Path(__file__).resolve().parent.parent / "client-js"


@pytest.mark.skipif(
    not (CLIENT_JS / "node_modules" / "@cloudflare" / "privacypass-ts").exists(),
    reason="client-js dependencies not installed (cd client-js && npm ci)",
)
def test_tokens_across_languages(stacks, redis_client: redis.Redis, tmp_path: Path):
    """A token the JS SDK (@cloudflare/privacypass-ts) fetched from the Python issuer is redeemed
    by the Python collector, and one a JS issuer minted for ldptel's challenge verifies in Python
    and is redeemed once its key is in the directory the collector reads; the JS SDK sends a
    report with a token and keeps one without attestation waiting (``no_token``) (issue 37)."""
    import subprocess

    cfg, issuer, collector, attest = stacks
    body, window = envelope(collector, 2)
    out = tmp_path / "interop.json"
    env = {
        **os.environ,
        "LDPTEL_INTEROP_OUT": str(out),
        "LDPTEL_ISSUER_URL": issuer.url,
        "LDPTEL_ISSUER_NAME": cfg.issuer.name,
        "LDPTEL_CAMPAIGN": CAMP["name"],
        "LDPTEL_WINDOW": str(window),
        "LDPTEL_ATTESTATION": attest("js-device"),
        "LDPTEL_ATTESTATION_SDK": attest("js-sdk-device"),
        "LDPTEL_COLLECTOR_URL": collector.url,
        "LDPTEL_INGEST_TOKEN": "ingest-token-for-tests",
        "LDPTEL_ANALYZER_SIGNING_KEY": PINNED[0],
    }
    run = subprocess.run(
        ["npx", "vitest", "run", "--project", "node", "test/tokensInterop.test.ts"],
        cwd=CLIENT_JS,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    doc = json.loads(out.read_text())
    from_python = Token.decode(bytes.fromhex(doc["python_issued"][0]))
    assert post(collector, body, from_python)[0] == 202

    js_token = Token.decode(bytes.fromhex(doc["js_issued"]))
    js_key = privacy_pass.decode_public_key(bytes.fromhex(doc["js_issuer_spki"]))
    assert privacy_pass.verify_token(js_key, js_token)
    assert js_token.token_key_id == privacy_pass.token_key_id(js_key)
    assert (
        js_token.challenge_digest
        == privacy_pass.challenge_for(cfg.issuer.name, CAMP["name"], window).digest()
    )
    directory = cfg.issuer.public_path()
    listing = json.loads(directory.read_text())
    listing["token-keys"].append(
        {
            "token-type": 2,
            "token-key": privacy_pass.b64url(bytes.fromhex(doc["js_issuer_spki"])),
            "not-before": 0,
            "ldptel-not-after": time.time() + 3600,
        }
    )
    directory.write_text(json.dumps(listing))
    time.sleep(2.5)  # the collector reads the directory again within DIRECTORY_CACHE_SECONDS
    body2, _ = envelope(collector, 5)
    status, doc2 = post(collector, body2, js_token)
    assert status == 202, doc2
    # the JS SDK (tokensInterop.test.ts, second test): its token-bearing report stored, the
    # token-less one never sent: 1 (Python-issued, JS-fetched) + 1 (JS issuer) + 1 (JS SDK)
    assert redis_client.xlen(keys.ingress_key(CAMP["name"], 0)) == 3


@pytest.mark.integration  # starts `ldptel serve` (the unit tier starts no server)
def test_serve_runs_the_issuer(tmp_path: Path):
    """``ldptel serve`` with an [issuer] runs the issuer as its own child, on its port, as the
    Redis user ``issuer`` of the embedded Redis (its quota script works under that role: a second
    token for the same address is 429), and tells devices where it is (issue 37)."""
    from http_support import http_request, start_collector

    from ldptel.store.redis_server import free_port

    port = free_port()
    text = "\n".join(
        [
            "[server]",
            'ingest_tokens = ["ingest-token-for-tests"]',
            "",
            "[issuer]",
            f"port = {port}",
            f'key_file = "{tmp_path / "issuer" / "key.pem"}"',
            "",
            "[[campaigns]]",
            'name = "tok-grr"',
            'privacy_mode = "shuffled"',
            'oracle = "grr"',
            "domain_size = 8",
            "central_epsilon = 1.0",
            "central_delta = 1e-6",
            "batch_min = 50",
            'window = "1h"',
            "",
        ]
    )
    col = start_collector(tmp_path / "serve", text, None, env={"LDPTEL_DATA_DIR": str(tmp_path / "data")})
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                reply = http_request(url, "GET", "/.well-known/private-token-issuer-directory", timeout=5)
                if reply.status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, col.log()
            time.sleep(0.1)
        key = privacy_pass.decode_public_key(
            privacy_pass.b64url_decode(json.loads(reply.body)["token-keys"][0]["token-key"])
        )
        challenge = privacy_pass.challenge_for("ldptel-issuer", "tok-grr", 0)
        statuses = []
        for _ in range(2):
            pending = privacy_pass.token_request(key, challenge)
            reply = http_request(
                url,
                "POST",
                "/token-request",
                pending.request,
                {"Content-Type": privacy_pass.REQUEST_CONTENT_TYPE},
            )
            statuses.append(reply.status)
            if reply.status == 200:
                assert privacy_pass.verify_token(key, pending.finalize(key, reply.body))
        assert statuses == [200, 429], (statuses, col.log())
        reply = http_request(
            col.url, "GET", "/v1/campaigns", headers={"Authorization": "Bearer ingest-token-for-tests"}
        )
        campaign = json.loads(reply.body)["campaigns"][0]
        assert campaign["require_tokens"] is True
        assert campaign["token_issuer"] == {"url": url, "name": "ldptel-issuer"}
    finally:
        col.stop()
