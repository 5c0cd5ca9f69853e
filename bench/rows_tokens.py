"""Rows of Privacy Pass tokens (issue 37), each against a floor measured beside it:

- issuance: ``blind_rsa.BlindSigner.blind_sign`` (CRT with GMP's constant-time powmod, and the
  RFC 9474 check sᵉ = m) per token, against OpenSSL's RSA-2048 PSS signature (``cryptography``'s
  ``sign``: the same private operation, compiled); target ≥ 1,000 tokens/s per core;
- verification: what the collector does per token (``privacy_pass.parse_authorization`` of the
  header, the challenge, ``verify_token``), against ``cryptography``'s bare RSA-PSS ``verify`` of
  the same signature; target ≥ 20,000 tokens/s per core;
- the collector's CPU per request with a token (a local campaign with ``require_tokens``, batch of
  100, through ``ReportRoute.answer`` in this process on an embedded Redis: verification and the
  spent-set check in ``INGEST_TOKEN``) against the same request to the same campaign without
  tokens; target ≤ 1.3×.
"""

from __future__ import annotations

import atexit
import io
import os
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from table import Row, Timed

from ldptel import blind_rsa, privacy_pass
from ldptel.campaigns.config import load_config
from ldptel.client import create_mechanism

PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)


def _issuance(quick: bool) -> Timed:
    n = 100 if quick else 400
    key = rsa.generate_private_key(65537, 2048)
    signer = blind_rsa.BlindSigner(key)
    challenge = privacy_pass.challenge_for("bench", "c", 0)
    blinded = [
        privacy_pass.TokenRequest.decode(
            privacy_pass.token_request(key.public_key(), challenge).request
        ).blinded_msg
        for _ in range(n)
    ]
    msgs = [os.urandom(98) for _ in range(n)]

    def ours() -> None:
        for b in blinded:
            signer.blind_sign(b)

    def floor() -> None:
        for m in msgs:
            key.sign(m, PSS, hashes.SHA384())

    return Timed(ours, floor, float(n))


def _tokens(n: int, key: rsa.RSAPrivateKey, issuer: str, campaign: str, window: int) -> list:
    signer = blind_rsa.BlindSigner(key)
    challenge = privacy_pass.challenge_for(issuer, campaign, window)
    out = []
    for _ in range(n):
        pending = privacy_pass.token_request(key.public_key(), challenge)
        out.append(pending.finalize(key.public_key(), signer.blind_sign(pending.request[3:])))
    return out


def _verification(quick: bool) -> Timed:
    n = 500 if quick else 2000
    key = rsa.generate_private_key(65537, 2048)
    pub = key.public_key()
    tokens = _tokens(n, key, "bench", "c", 0)
    headers = [privacy_pass.authorization(t) for t in tokens]
    digest = privacy_pass.challenge_for("bench", "c", 0).digest()
    raw = [(t.token_input(), t.authenticator) for t in tokens]

    def ours() -> None:
        for h in headers:
            t = privacy_pass.parse_authorization(h)
            assert t is not None and t.challenge_digest == digest and privacy_pass.verify_token(pub, t)

    def floor() -> None:
        for m, s in raw:
            pub.verify(s, m, PSS, hashes.SHA384())

    return Timed(ours, floor, float(n))


_STACK: dict = {}


def _collector_stack():
    if _STACK:
        return _STACK
    from ldptel.server.app import create_app
    from ldptel.server.issuer import load_or_create_key
    from ldptel.server.report_route import ReportRoute
    from ldptel.store.redis_server import EmbeddedRedis

    tmp = Path(tempfile.mkdtemp(prefix="ldptel-bench-tokens-"))
    server = EmbeddedRedis(data_dir=tmp / "redis")
    server.start()
    atexit.register(server.stop)
    camp = 'oracle = "grr"\nepsilon = 1.0\ndomain_size = 8\n'
    (tmp / "c.toml").write_text(
        '[server]\ningest_tokens = ["bench-ingest-token"]\nrate_limit_per_address_per_minute = 0\n'
        "rate_limit_per_minute = 1000000000\n\n[shuffler]\nenabled = false\n\n"
        f'[issuer]\nkey_file = "{tmp / "issuer" / "key.pem"}"\n\n'
        f'[[campaigns]]\nname = "tok"\nrequire_tokens = true\n{camp}\n'
        f'[[campaigns]]\nname = "plain"\nrequire_tokens = false\n{camp}'
    )
    config = load_config(tmp / "c.toml")
    key = load_or_create_key(config.issuer)
    app = create_app(config, server.url)
    _STACK.update(route=ReportRoute(app.extensions["ldptel"]), config=config, key=key.private_key)
    return _STACK


def _environ(body: bytes, auth: str) -> dict:
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/v1/reports",
        "CONTENT_TYPE": "application/x-protobuf",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "HTTP_AUTHORIZATION": auth,
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
    }


def _collector(quick: bool) -> Timed:
    n = 150 if quick else 600
    st = _collector_stack()
    route, config = st["route"], st["config"]
    mech = create_mechanism("grr", epsilon=1.0, domain_size=8)
    batches = {}
    for name in ("tok", "plain"):
        b = mech.encode_batch([i % 8 for i in range(100)], campaign=name)
        batches[name] = b
    tokens: list = []

    def side(name: str):
        def run() -> float:
            bodies = []
            for _ in range(n):
                batches[name].batch_id = os.urandom(16)
                bodies.append(batches[name].SerializeToString())
            if name == "tok":
                tokens[:] = _tokens(n, st["key"], config.issuer.name, "tok", 0)
                auths = [privacy_pass.authorization(t) for t in tokens]
            else:
                auths = ["Bearer bench-ingest-token"] * n
            envs = [_environ(b, a) for b, a in zip(bodies, auths, strict=True)]
            t0 = time.process_time()
            for env in envs:
                status, _, out = route.answer(env)
                assert status == 202, out
            return time.process_time() - t0  # CPU seconds of n requests

        return run

    return Timed(side("tok"), side("plain"), float(n))


ROWS = [
    Row(
        "token issuance (blind RSA-2048 sign, CRT, gmpy2)",
        "ns/report",
        "OpenSSL RSA-2048 PSS sign",
        "≥ 1,000 tokens/s per core (≤ 1,000,000 ns)",
        _issuance,
        group="tokens",
    ),
    Row(
        "token verification at the collector (parse, challenge, RSA-PSS verify)",
        "ns/report",
        "cryptography RSA-PSS verify alone",
        "≥ 20,000 tokens/s per core (≤ 50,000 ns)",
        _verification,
        group="tokens",
    ),
    Row(
        "collector CPU per request with a token, batch 100",
        "ms",
        "same request, campaign without tokens",
        "≤ 1.3×",
        _collector,
        group="tokens",
        self_timed=True,
        repeats=1,
    ),
]
