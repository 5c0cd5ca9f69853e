"""The token issuer over HTTP (issue 37): RFC 9578 issuance of tokens that verify with the
directory's key, the jwt and address attesters, the per-subject quota, and bad input answered
4xx with nothing counted."""

from __future__ import annotations

import json
import time

import jwt
import pytest
from agg_support import write_config
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from issuer_support import IssuerStack

from ldptel import privacy_pass
from ldptel.errors import ConfigError
from ldptel.server.issuer import DIRECTORY_PATH

CAMPAIGN = {
    "name": "sh-grr",
    "privacy_mode": "shuffled",
    "oracle": "grr",
    "domain_size": 8,
    "central_epsilon": 1.0,
    "central_delta": 1e-6,
    "batch_min": 50,
    "min_reports": 1,
}


def _quota_keys(r) -> list[bytes]:
    return sorted(r.keys("ldptel:issuer:*"))


def _stack(tmp_path, redis_url, **issuer) -> IssuerStack:
    cfg = write_config(
        tmp_path / "c.toml", [CAMPAIGN], issuer={"key_file": str(tmp_path / "k.pem"), **issuer}
    )
    return IssuerStack(cfg, redis_url)


def test_jwt_attester_quota_and_directory(tmp_path, redis_url, redis_client):
    signing = ed25519.Ed25519PrivateKey.generate()
    pem = tmp_path / "app.pem"
    pem.write_bytes(
        signing.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    stack = _stack(
        tmp_path,
        redis_url,
        attester="jwt",
        jwt_public_key=str(pem),
        jwt_audience="ldptel-test",
        tokens_per_window=3,
    )
    try:

        def token_for(sub, aud="ldptel-test", exp=300):
            return jwt.encode(
                {"sub": sub, "aud": aud, "exp": int(time.time()) + exp}, signing, algorithm="EdDSA"
            )

        reply = http = stack.post(b"", attestation=None)
        assert http.status == 401 and json.loads(reply.body)["error"] == "attestation_required"
        for bad in (token_for("a", aud="other"), token_for("a", exp=-60), "not.a.jwt"):
            reply = stack.post(b"\x00\x01", attestation=bad)
            assert reply.status == 401 and json.loads(reply.body)["error"] == "bad_attestation", reply.body
        assert _quota_keys(redis_client) == []

        directory = json.loads(http_get(stack, DIRECTORY_PATH))
        key = privacy_pass.decode_public_key(
            privacy_pass.b64url_decode(directory["token-keys"][0]["token-key"])
        )
        tokens = stack.tokens("sh-grr", 0, 3, attestation=token_for("alice"))
        assert all(privacy_pass.verify_token(key, t) for t in tokens)
        assert len({t.nonce for t in tokens}) == 3
        # a 4th token in the window: refused, and nothing more counted
        with pytest.raises(AssertionError, match="token_quota"):
            stack.tokens("sh-grr", 0, 1, attestation=token_for("alice"))
        assert stack.tokens("sh-grr", 0, 1, attestation=token_for("bob"))  # another subject
        keys = _quota_keys(redis_client)
        assert [int(redis_client.get(k)) for k in keys] in ([3, 1], [1, 3])
        # neither subject appears in the issuer's store: only SHA-256 digests
        assert not any(b"alice" in k or b"bob" in k for k in keys)
    finally:
        stack.close()


def http_get(stack, path):
    from http_support import http_request

    reply = http_request(stack.url, "GET", path)
    assert reply.status == 200
    return reply.body


def test_jwks_es256(tmp_path, redis_url, redis_client):
    signing = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(signing.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "ES256"}]}))
    stack = _stack(
        tmp_path, redis_url, attester="jwt", jwt_public_key=str(tmp_path / "jwks.json"), jwt_audience="aud"
    )
    try:
        att = jwt.encode(
            {"sub": "u1", "aud": "aud", "exp": int(time.time()) + 60},
            signing,
            algorithm="ES256",
            headers={"kid": "k1"},
        )
        assert len(stack.tokens("sh-grr", 0, 1, attestation=att)) == 1
    finally:
        stack.close()


def test_bad_requests_are_4xx_and_count_nothing(tmp_path, redis_url, redis_client):
    stack = _stack(tmp_path, redis_url, max_batch=4, tokens_per_window=100)
    try:
        challenge = privacy_pass.challenge_for("ldptel-issuer", "sh-grr", 0)
        good = privacy_pass.token_request(stack.public_key, challenge).request
        wrong_key = bytearray(good)
        wrong_key[2] ^= 0xFF
        over_modulus = good[:3] + b"\xff" * privacy_pass.NK
        cases = [
            (privacy_pass.encode_batch([good] * 5), None, 413, "too_large"),  # a huge batch
            (b"\x00", None, 400, "bad_token_request"),
            (privacy_pass.encode_batch([good[:-1] + b""]), None, 400, "bad_token_request"),
            (privacy_pass.encode_batch([b"\x00\x01" + good[2:]]), None, 400, "bad_token_request"),
            (privacy_pass.encode_batch([bytes(wrong_key)]), None, 400, "unknown_token_key"),
            (privacy_pass.encode_batch([over_modulus]), None, 400, "bad_token_request"),
            (good, "text/plain", 415, "unsupported_media_type"),
        ]
        for body, ctype, status, error in cases:
            reply = stack.post(body, content_type=ctype)
            assert (reply.status, json.loads(reply.body)["error"]) == (status, error), reply.body
        assert _quota_keys(redis_client) == []
        reply = stack.post(good, batch=False)  # the RFC's single TokenRequest
        assert reply.status == 200 and reply.headers["content-type"] == privacy_pass.RESPONSE_CONTENT_TYPE
        assert len(reply.body) == privacy_pass.NK
    finally:
        stack.close()


def test_issuer_config_checked(tmp_path):
    for table, key in (
        ({"attester": "magic"}, "issuer.attester"),
        ({"attester": "jwt"}, "issuer.jwt_public_key"),
        ({"tokens_per_window": 0}, "issuer.tokens_per_window"),
        ({"window": "1s"}, "issuer.window"),
        ({"colour": 1}, "issuer.colour"),
        ({"attester": "jwt", "jwt_public_key": "/nope", "jwt_audience": "a"}, "issuer.jwt_public_key"),
    ):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            write_config(tmp_path / "c.toml", [CAMPAIGN], issuer=table)
    cfg = write_config(
        tmp_path / "c.toml",
        [CAMPAIGN, {"name": "loc", "oracle": "grr", "epsilon": 1.0, "domain_size": 4}],
        issuer={},
    )
    assert [c.require_tokens for c in cfg.campaigns] == [True, None]  # new config: shuffled take tokens
    assert cfg.issuer is not None and cfg.issuer.tokens_per_window == 1
    old = write_config(tmp_path / "d.toml", [CAMPAIGN])
    assert old.campaigns[0].require_tokens is None and old.issuer is None  # an existing config: unchanged
    with pytest.raises(ConfigError, match="require_tokens"):
        write_config(tmp_path / "e.toml", [{**CAMPAIGN, "require_tokens": True}])
