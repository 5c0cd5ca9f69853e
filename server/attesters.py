"""Attesters of the token issuer (issue 37): who is asking for tokens.

An attester is a class with one method, ``subject(attestation, address) -> str``: the stable
identity of the device or user asking (the issuer rate-limits tokens per subject), from the
attestation the SDK's ``attestation`` callable returned (sent as ``Authorization: Bearer …``, None
when absent) and the client address. It raises :class:`AttestationError` to refuse (401).

- ``jwt``: the app's backend signs a short-lived JWT for its signed-in user; the subject is its
  ``sub``. EdDSA, ES256 or RS256; the key is a PEM public key or a JWKS file (the header's ``kid``
  picks the key); ``aud`` must be ``jwt_audience``; ``exp`` is required and checked.
- ``address``: the client address (``[server] trusted_proxies`` rules as for the collector are not
  applied: the peer address). Weak — one person with many addresses is many subjects — for demos
  and tests only.

docs/operations.md shows how to add one (App Attest, Play Integrity, a webhook).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import jwt

from ldptel.campaigns.config import IssuerConfig
from ldptel.errors import LdptelError

JWT_ALGORITHMS = ["EdDSA", "ES256", "RS256"]


class AttestationError(LdptelError):
    """The attestation is missing or invalid (the issuer answers 401 with this message)."""


class Attester(Protocol):
    def subject(self, attestation: str | None, address: str) -> str: ...


class AddressAttester:
    """The client address is the subject (weak: demos and tests)."""

    def subject(self, attestation: str | None, address: str) -> str:
        return f"address:{address}"


class JwtAttester:
    """The ``sub`` of a JWT signed by the configured key, for the configured audience."""

    def __init__(self, key_file: str, audience: str) -> None:
        text = Path(key_file).read_text()
        self.audience = audience
        self._keys: dict[str | None, Any] = {}
        if text.lstrip().startswith("{"):
            for k in jwt.PyJWKSet.from_dict(json.loads(text)).keys:
                self._keys[k.key_id] = k.key
        else:
            self._keys[None] = text.encode()

    def _key(self, token: str) -> Any:
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError as exc:
            raise AttestationError(f"not a JWT: {exc}") from None
        if kid in self._keys:
            return self._keys[kid]
        if len(self._keys) == 1:
            return next(iter(self._keys.values()))
        raise AttestationError(f"no key with kid {str(kid)[:64]!r} in the JWKS")

    def subject(self, attestation: str | None, address: str) -> str:
        if not attestation:
            raise AttestationError("an attestation is required: Authorization: Bearer <JWT from the "
                                   "app's backend>")
        try:
            claims = jwt.decode(attestation, self._key(attestation), algorithms=JWT_ALGORITHMS,
                                audience=self.audience, options={"require": ["exp", "sub", "aud"]})
        except jwt.PyJWTError as exc:
            raise AttestationError(f"invalid JWT: {exc}") from None
        sub = claims["sub"]
        if not isinstance(sub, str) or not sub:
            raise AttestationError("the JWT's sub must be a non-empty string")
        return f"jwt:{sub}"


def attester_for(config: IssuerConfig) -> Attester:
    """The attester ``[issuer] attester`` names."""
    if config.attester == "jwt":
        assert config.jwt_public_key and config.jwt_audience  # checked at load
        return JwtAttester(config.jwt_public_key, config.jwt_audience)
    return AddressAttester()


__all__ = ["JWT_ALGORITHMS", "AddressAttester", "AttestationError", "Attester", "JwtAttester", "attester_for"]
