"""The Privacy Pass issuer (issue 37): ``ldptel issuer``, a Flask app of its own (its own process,
port, Redis role ``issuer`` and RSA key; deployable on its own host).

Endpoints (RFC 9578 §4–§6, token type 0x0002):

- ``GET /.well-known/private-token-issuer-directory``: ``{"issuer-request-uri": "/token-request",
  "token-keys": [{"token-type": 2, "token-key": base64url(pkI), "not-before": t,
  "ldptel-not-after": t}], "ldptel-issuer-name": name}``;
- ``POST /token-request``: ``Content-Type: application/private-token-request``, body one
  ``TokenRequest`` → ``application/private-token-response``, one ``TokenResponse``; or
  ``application/ldptel-private-token-batch-request`` (u16 count, then ``count`` TokenRequests,
  at most ``[issuer] max_batch``) → the TokenResponses in order.

A request is checked in this order, the first failure answering and nothing counted:
content type (415 ``unsupported_media_type``), size (413 ``too_large``), attestation (401
``attestation_required`` / ``bad_attestation``), the body (400 ``bad_token_request``, naming what
is wrong: type, length, count, a blinded message not below the modulus), the key (400
``unknown_token_key``: the truncated key id is not the current key's; fetch the directory again),
then the subject's quota: at most ``tokens_per_window`` per subject per issuer window
(``scripts.ISSUE_QUOTA``, 429 ``token_quota`` with ``Retry-After`` the window's end). Then each
blinded message is signed (``blind_rsa.BlindSigner``).

What the issuer sees and keeps: the subject (only its SHA-256 is a Redis key, with the count) and
blinded messages (never stored or logged). It never sees a token, a challenge or a report.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from flask import Flask, Response, jsonify, request

from ldptel import blind_rsa, keys, privacy_pass
from ldptel.campaigns.config import Config, IssuerConfig
from ldptel.privacy_pass import TokenFormatError, TokenRequest
from ldptel.server.addresses import ClientAddress
from ldptel.server.attesters import AttestationError, Attester, attester_for
from ldptel.server.errors import API_CSP, ApiError, render
from ldptel.store import scripts
from ldptel.store.redis_client import AnyRedis, connect

log = logging.getLogger("ldptel.issuer")

DIRECTORY_PATH = "/.well-known/private-token-issuer-directory"
REQUEST_PATH = "/token-request"


@dataclass(frozen=True)
class IssuerKey:
    private_key: rsa.RSAPrivateKey
    not_before: int
    not_after: int

    def directory_entry(self) -> dict[str, Any]:
        pk = privacy_pass.encode_public_key(self.private_key.public_key())
        return {
            "token-type": privacy_pass.TOKEN_TYPE,
            "token-key": privacy_pass.b64url(pk),
            "not-before": self.not_before,
            "ldptel-not-after": self.not_after,
        }


def directory(config: IssuerConfig, key: IssuerKey) -> dict[str, Any]:
    """The issuer directory (RFC 9578 §4) of ``key``."""
    return {
        "issuer-request-uri": REQUEST_PATH,
        "token-keys": [key.directory_entry()],
        "ldptel-issuer-name": config.name,
    }


def load_or_create_key(config: IssuerConfig, now: float | None = None) -> IssuerKey:
    """The issuer's key from ``key_file`` (mode 0600), a new 2048-bit one if there is none or it is
    past ``key_lifetime``; writes the public directory beside it (``public_path``), which is all the
    collector reads."""
    at = int(time.time() if now is None else now)
    path, pub = config.key_path(), config.public_path()
    key: IssuerKey | None = None
    if path.is_file() and pub.is_file():
        meta = json.loads(pub.read_text())["token-keys"][0]
        if at < int(meta["ldptel-not-after"]):
            loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
            assert isinstance(loaded, rsa.RSAPrivateKey)
            key = IssuerKey(loaded, int(meta["not-before"]), int(meta["ldptel-not-after"]))
    if key is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        private = rsa.generate_private_key(public_exponent=65537, key_size=8 * privacy_pass.NK)
        key = IssuerKey(private, at, at + config.key_lifetime_seconds)
        pem = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        os.replace(tmp, path)
        log.info(
            "issuer: new token key %s, valid until %d",
            privacy_pass.token_key_id(private.public_key()).hex()[:16],
            key.not_after,
        )
    tmp_pub = pub.with_suffix(".tmp")
    tmp_pub.write_text(json.dumps(directory(config, key), indent=1))
    os.replace(tmp_pub, pub)
    return key


class Issuer:
    """The issuance logic without HTTP: attest, parse, quota, sign."""

    def __init__(
        self, config: IssuerConfig, key: IssuerKey, redis_client: AnyRedis, attester: Attester | None = None
    ) -> None:
        self.config, self.key, self.redis = config, key, redis_client
        self.attester = attester if attester is not None else attester_for(config)
        self.signer = blind_rsa.BlindSigner(key.private_key)
        log.info("issuer: blind signatures by %s", self.signer.raw_version if self.signer.backend == "openssl"
                 else f"GMP's powmod_sec ({self.signer.fallback}: ~3x the CPU per token)")
        self.key_id = privacy_pass.token_key_id(key.private_key.public_key())
        self._n = key.private_key.public_key().public_numbers().n

    def parse(self, body: bytes, batch: bool) -> list[TokenRequest]:
        """The TokenRequests of ``body``; ``ApiError`` 400 naming the problem."""
        try:
            items = (
                privacy_pass.decode_batch(body, privacy_pass.REQUEST_LEN, self.config.max_batch)
                if batch
                else [body]
            )
            requests = [TokenRequest.decode(item) for item in items]
        except TokenFormatError as exc:
            raise ApiError(400, "bad_token_request", str(exc)) from None
        for i, req in enumerate(requests):
            if req.truncated_token_key_id != self.key_id[-1]:
                raise ApiError(
                    400,
                    "unknown_token_key",
                    {
                        "index": i,
                        "reason": f"the request names another token key: fetch {DIRECTORY_PATH} again",
                    },
                )
            if int.from_bytes(req.blinded_msg, "big") >= self._n:
                raise ApiError(
                    400, "bad_token_request", {"index": i, "reason": "blinded_msg is not below the modulus"}
                )
        return requests

    def grant(self, subject: str, n: int, now: float) -> None:
        """Count ``n`` tokens for ``subject`` in the current window; 429 past the quota."""
        length = self.config.window_seconds
        window = int(now // length) * length
        digest = hashlib.sha256(subject.encode("utf-8", "surrogatepass")).hexdigest()
        got = scripts.of(self.redis).call(
            "ISSUE_QUOTA",
            keys=[keys.issuer_quota_key(digest, window)],
            args=[n, self.config.tokens_per_window, window + length + 60],
        )
        if int(got) < 0:
            retry = max(1, int(window + length - now))
            raise ApiError(
                429,
                "token_quota",
                f"at most {self.config.tokens_per_window} tokens per subject "
                f"per {self.config.window} window; asked {n} more; the next window starts in "
                f"{retry} s",
                {"Retry-After": str(retry)},
            )

    def issue(
        self, body: bytes, batch: bool, attestation: str | None, address: str, now: float | None = None
    ) -> list[bytes]:
        try:
            subject = self.attester.subject(attestation, address)
        except AttestationError as exc:
            code = "attestation_required" if not attestation else "bad_attestation"
            raise ApiError(
                401, code, str(exc), {"WWW-Authenticate": 'Bearer realm="ldptel-issuer"'}
            ) from None
        requests = self.parse(body, batch)
        self.grant(subject, len(requests), time.time() if now is None else now)
        return [self.signer.blind_sign(r.blinded_msg) for r in requests]


def _bearer(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def create_issuer_app(config: Config, redis_url: str, issuer: Issuer | None = None) -> Flask:
    """The issuer's WSGI app (module docstring)."""
    icfg = config.issuer
    if icfg is None:
        raise ValueError("the config has no [issuer] table")
    if issuer is None:
        issuer = Issuer(icfg, load_or_create_key(icfg), connect(redis_url, role="issuer"))
    addresses = ClientAddress(config.server.trusted_proxies)
    app = Flask("ldptel.issuer")
    app.register_error_handler(ApiError, render)
    app.extensions["ldptel_issuer"] = issuer
    most = 2 + icfg.max_batch * privacy_pass.REQUEST_LEN

    @app.get(DIRECTORY_PATH)
    def issuer_directory():
        resp = jsonify(directory(icfg, issuer.key))
        resp.headers["Cache-Control"] = "public, max-age=300"
        return resp

    @app.post(REQUEST_PATH)
    def token_request():
        ctype = (request.mimetype or "").lower()
        if ctype not in (privacy_pass.REQUEST_CONTENT_TYPE, privacy_pass.BATCH_REQUEST_CONTENT_TYPE):
            raise ApiError(
                415,
                "unsupported_media_type",
                f"Content-Type must be "
                f"{privacy_pass.REQUEST_CONTENT_TYPE} or {privacy_pass.BATCH_REQUEST_CONTENT_TYPE}",
            )
        if (request.content_length or 0) > most:
            raise ApiError(
                413, "too_large", f"at most {icfg.max_batch} token requests ({most} bytes) per request"
            )
        body = request.get_data(cache=False)
        if len(body) > most:
            raise ApiError(413, "too_large", f"at most {icfg.max_batch} token requests per request")
        batch = ctype == privacy_pass.BATCH_REQUEST_CONTENT_TYPE
        out = issuer.issue(
            body,
            batch,
            _bearer(request.headers.get("Authorization", "")),
            addresses.of_environ(request.environ),
        )
        if batch:
            return Response(
                privacy_pass.encode_batch(out), 200, mimetype=privacy_pass.BATCH_RESPONSE_CONTENT_TYPE
            )
        return Response(out[0], 200, mimetype=privacy_pass.RESPONSE_CONTENT_TYPE)

    @app.errorhandler(redis.RedisError)
    def redis_down(exc):
        log.warning("issuer: redis unavailable: %s", exc)
        return render(
            ApiError(503, "unavailable", "storage is unavailable; retry later", {"Retry-After": "1"})
        )

    @app.errorhandler(404)
    @app.errorhandler(405)
    def http_error(exc):
        return render(
            ApiError(exc.code, "not_found" if exc.code == 404 else "method_not_allowed", exc.description)
        )

    @app.after_request
    def headers(resp: Response) -> Response:
        resp.headers["Content-Security-Policy"] = API_CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Cache-Control"] = resp.headers.get("Cache-Control", "no-store")
        return resp

    return app


def read_directory(path: Path) -> dict[str, Any]:
    """A directory file as the issuer wrote it."""
    return dict(json.loads(path.read_text()))


__all__ = [
    "DIRECTORY_PATH",
    "REQUEST_PATH",
    "Issuer",
    "IssuerKey",
    "create_issuer_app",
    "directory",
    "load_or_create_key",
    "read_directory",
]
