"""Privacy Pass redemption at the collector (issue 37).

A campaign with ``require_tokens`` takes an envelope only with ``Authorization: PrivateToken
token="…"`` (RFC 9577; it takes the place of the public ingest token) holding a type 0x0002 token
that

1. parses (``privacy_pass.Token.decode``), else 401 ``bad_token``;
2. names a key of the issuer's directory (``[issuer]``'s ``public_path``, the only issuer file the
   collector reads: public keys) that has not expired, else 401 ``bad_token``;
3. answers the challenge of this campaign and the envelope's window
   (``privacy_pass.challenge_for``: issuer name, redemption context = H(campaign, window)), else
   401 ``bad_token`` (a token for another campaign or window);
4. carries a valid RSA-PSS signature (``cryptography``), else 401 ``bad_token``;
5. is unspent: ``scripts.INGEST_TOKEN`` checks and adds its digest to the (campaign, shard, window)
   spent set in the same round trip that stores the envelope, else 409 ``token_spent``.

No token at all: 401 ``token_required``. A token-bearing envelope of a shuffled campaign holds one
device's report (``reports = 1``), so the shuffler's ``batch_min`` counts token-bearing envelopes;
a local campaign's batch (a device's queued reports) takes one token per batch. What the
collector stores of a token is SHA-256(token_input)[:16] in the spent set, until the window's
accepting ends; never the token, never anything the issuer saw.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa

from ldptel import blind_rsa, privacy_pass
from ldptel.campaigns.config import Campaign, Config, IssuerConfig
from ldptel.privacy_pass import Token, TokenFormatError
from ldptel.server.validation import Rejection

DIRECTORY_CACHE_SECONDS = 2.0
SPENT_MARGIN_SECONDS = 86400


@dataclass(frozen=True)
class TokenKey:
    public_key: rsa.RSAPublicKey
    not_after: float


class DirectoryCache:
    """The issuer's public directory file (``IssuerConfig.public_path``), its path resolved and
    its mtime looked at again at most every ``DIRECTORY_CACHE_SECONDS`` (or for another
    ``[issuer]``), the file read again only when its mtime moved (a new key). Between two looks a
    request costs one attribute read and a clock read: no path built, no lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (issuer, when looked at, path, mtime, keys): one tuple, replaced whole
        self._state: tuple[IssuerConfig | None, float, Path | None, float | None, dict[bytes, TokenKey]] = (
            None, -math.inf, None, None, {})

    def keys(self, issuer: IssuerConfig) -> dict[bytes, TokenKey]:
        """token_key_id → key of ``issuer``'s directory, as of at most ``DIRECTORY_CACHE_SECONDS`` ago."""
        state = self._state
        if state[0] is issuer and time.monotonic() - state[1] <= DIRECTORY_CACHE_SECONDS:
            return state[4]
        with self._lock:
            _, _, old_path, old_mtime, keys = self._state
            at, path = time.monotonic(), issuer.public_path()
            try:
                mtime: float | None = path.stat().st_mtime
            except OSError:
                mtime, keys = None, {}
            else:
                if path != old_path or mtime != old_mtime:
                    keys = read_keys(path)
            self._state = (issuer, at, path, mtime, keys)
            return keys


def read_keys(path: Path) -> dict[bytes, TokenKey]:
    """token_key_id → key of a directory file (RFC 9578 §4, with ``ldptel-not-after``)."""
    out = {}
    for entry in json.loads(path.read_text()).get("token-keys", []):
        if entry.get("token-type") != privacy_pass.TOKEN_TYPE:
            continue
        spki = privacy_pass.b64url_decode(entry["token-key"])
        key = privacy_pass.decode_public_key(spki)
        out[hashlib.sha256(spki).digest()] = TokenKey(key, float(entry.get("ldptel-not-after", math.inf)))
    return out


_directory = DirectoryCache()


def token_of(environ: dict[str, Any]) -> Token | None:
    """The PrivateToken of the request (None: another scheme or none); 401 ``bad_token`` when
    it does not parse."""
    try:
        return privacy_pass.parse_authorization(environ.get("HTTP_AUTHORIZATION", ""))
    except TokenFormatError as exc:
        raise Rejection(401, "bad_token", f"malformed PrivateToken: {exc}") from None


def digest(token: Token) -> bytes:
    """What the spent set holds of a token."""
    return hashlib.sha256(token.token_input()).digest()[:16]


def redeem(
    config: Config,
    campaign: Campaign,
    token: Token | None,
    window: int,
    reports: int,
    now: float | None = None,
) -> bytes | None:
    """The token's spent-set digest for an envelope of ``campaign`` bound to ``window``; None when
    the campaign takes no tokens; ``Rejection`` (module docstring) otherwise."""
    name = campaign.name
    if not campaign.require_tokens:
        if token is not None:  # today's behaviour: such a campaign takes the ingest bearer token
            raise Rejection(
                401,
                "unauthorized",
                f"campaign {name!r} takes no Privacy Pass token: Authorization: Bearer <ingest token>",
                campaign=name,
            )
        return None
    issuer = config.issuer
    if token is None or issuer is None:
        raise Rejection(
            401,
            "token_required",
            f"campaign {name!r} takes a report only with a Privacy Pass "
            'token: Authorization: PrivateToken token="…" (RFC 9577), one per envelope, from '
            f"the issuer at {issuer.public_url() if issuer else '(none configured)'}",
            campaign=name,
        )
    if reports != 1 and campaign.privacy_mode != "local":  # batch_min counts envelopes
        raise Rejection(
            400,
            "invalid_batch",
            f"a token-bearing envelope holds one device's report, got {reports}",
            campaign=name,
        )
    at = time.time() if now is None else now
    key = _directory.keys(issuer).get(token.token_key_id)
    if key is None or at > key.not_after:
        raise Rejection(
            401,
            "bad_token",
            {
                "reason": "unknown or expired token key: fetch tokens from the issuer again",
                "token_key_id": token.token_key_id.hex()[:16],
            },
            campaign=name,
        )
    if token.challenge_digest != privacy_pass.challenge_digest(issuer.name, name, window):
        raise Rejection(
            401,
            "bad_token",
            {
                "reason": f"the token is not bound to campaign {name!r} and "
                f"window {window} (another campaign, window or issuer)"
            },
            campaign=name,
        )
    signed = token.token_input()
    if not blind_rsa.verify(key.public_key, signed, token.authenticator):
        raise Rejection(401, "bad_token", {"reason": "the token's signature does not verify"}, campaign=name)
    return hashlib.sha256(signed).digest()[:16]  # ``digest``


def spent_expire_at(campaign: Campaign, window: int, config: Config, now: float) -> int:
    """When a (campaign, window)'s spent set may go: after the window and the one after it (an
    envelope is taken in its window or the next), plus a day; for window "all", after the token
    key's lifetime plus a day."""
    length = campaign.window_seconds
    if length == 0:
        life = config.issuer.key_lifetime_seconds if config.issuer else 0
        return int(now + life + SPENT_MARGIN_SECONDS)
    return int(window + 2 * length + SPENT_MARGIN_SECONDS)


__all__ = ["DirectoryCache", "TokenKey", "digest", "read_keys", "redeem", "spent_expire_at", "token_of"]
