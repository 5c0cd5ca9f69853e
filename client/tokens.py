"""The SDK's Privacy Pass tokens (issue 37): one per sealed envelope of a campaign with
``require_tokens``, bound to its (campaign, window), never reused.

Tokens live in the SDK's file (table ``tokens``: campaign, window, the token, and the envelope's
batch id once given to one), so a retried envelope goes with the same token (the collector
answers it as a duplicate) and a token given to an envelope is never given to another. They are
fetched from the issuer the campaign config names (``token_issuer``: url, name) in one batch per
(campaign, window) for every envelope that needs one, with the app's ``attestation()`` as
``Authorization: Bearer …``. When none can be had (no attestation, issuer unreachable, quota
reached) the envelope waits in the queue (``health().waiting["no_token"]``); it is never sent
without one. Tokens of windows the collector no longer takes are deleted.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa

from ldptel import privacy_pass
from ldptel.blind_rsa import BlindRsaError
from ldptel.client import delivery
from ldptel.client.errors import TelemetryError
from ldptel.privacy_pass import Token, TokenFormatError

log = logging.getLogger("ldptel.client")

SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign TEXT NOT NULL,
    window INTEGER NOT NULL,
    token BLOB NOT NULL,
    envelope BLOB
);
CREATE INDEX IF NOT EXISTS tokens_by_window ON tokens (campaign, window, envelope);
CREATE UNIQUE INDEX IF NOT EXISTS tokens_by_envelope ON tokens (envelope);
"""
DIRECTORY_PATH = "/.well-known/private-token-issuer-directory"
MAX_FETCH = 64  # TokenRequests per batch request (the issuer's default max_batch)


class NoToken(TelemetryError):
    """No token for an envelope now: it waits (``reason`` says why)."""


class TokenWallet:
    """The tokens of one ``TelemetryClient`` (module docstring)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._ready = False
        self._keys: dict[str, rsa.RSAPublicKey] = {}  # issuer url → its current key
        self._waiting: dict[str, int] = {}
        self.last_error: str | None = None

    def _queue(self) -> Any:
        queue = self.client.queue
        if not self._ready:
            queue.execute_script(SCHEMA)
            self._ready = True
        return queue

    def waiting(self) -> dict[str, int]:
        return dict(self._waiting)

    def waited(self, n: int, why: str) -> None:
        self._waiting = {"no_token": n}
        self.last_error = why

    def cleared(self) -> None:
        self._waiting = {}

    def for_envelope(self, cfg: dict[str, Any], campaign: str, window: int, envelope: bytes,
                     needed: int = 1) -> Token:
        """The token of ``envelope`` (the one it was given, else an unused one of its (campaign,
        window), fetched with ``needed`` − 1 more for the chunk's other envelopes when none is
        held); ``NoToken`` when none can be had."""
        with self._lock:
            queue = self._queue()
            rows = queue.query("SELECT token FROM tokens WHERE envelope = ?", (envelope,))
            if rows:
                return Token.decode(rows[0][0])
            if not self._assign(queue, campaign, window, envelope):
                self._fetch(cfg, campaign, window, max(1, min(needed, MAX_FETCH)))
                if not self._assign(queue, campaign, window, envelope):
                    raise NoToken(f"campaign {campaign!r}: the issuer gave no token")
            rows = queue.query("SELECT token FROM tokens WHERE envelope = ?", (envelope,))
            return Token.decode(rows[0][0])

    def _assign(self, queue: Any, campaign: str, window: int, envelope: bytes) -> bool:
        with queue.transaction() as db:
            row = db.execute("SELECT id FROM tokens WHERE campaign = ? AND window = ? AND envelope IS NULL "
                             "ORDER BY id LIMIT 1", (campaign, window)).fetchone()
            if row is None:
                return False
            db.execute("UPDATE tokens SET envelope = ? WHERE id = ?", (envelope, row[0]))
            return True

    def discard(self, envelope: bytes) -> None:
        """Forget ``envelope``'s token: the collector took the envelope (spent), or refused the
        token (spent elsewhere, bad key): never offered again."""
        with self._lock:
            with self._queue().transaction() as db:
                db.execute("DELETE FROM tokens WHERE envelope = ?", (envelope,))

    def prune(self, campaign: str, oldest_window: int) -> None:
        """Delete the tokens of windows before ``oldest_window`` (the collector refuses them)."""
        with self._lock:
            with self._queue().transaction() as db:
                db.execute("DELETE FROM tokens WHERE campaign = ? AND window < ?", (campaign, oldest_window))

    def forget_key(self, url: str) -> None:
        self._keys.pop(url, None)

    # --- the issuer ----------------------------------------------------------------------------
    def _issuer(self, cfg: dict[str, Any], campaign: str) -> tuple[str, str]:
        issuer = cfg.get("token_issuer")
        if not isinstance(issuer, dict) or not isinstance(issuer.get("url"), str) \
                or not isinstance(issuer.get("name"), str):
            raise NoToken(f"campaign {campaign!r} requires tokens but its config names no token_issuer")
        return issuer["url"].rstrip("/"), issuer["name"]

    def _key(self, url: str) -> rsa.RSAPublicKey:
        if url not in self._keys:
            body = delivery.request(url + DIRECTORY_PATH, "", self.client.timeout, "GET")
            try:
                entry = next(e for e in json.loads(body)["token-keys"]
                             if e.get("token-type") == privacy_pass.TOKEN_TYPE)
                spki = privacy_pass.b64url_decode(entry["token-key"])
                self._keys[url] = privacy_pass.decode_public_key(spki)
            except (StopIteration, KeyError, TypeError, ValueError) as exc:
                raise NoToken(f"the issuer's directory at {url} is unusable: {exc}") from None
        return self._keys[url]

    def _fetch(self, cfg: dict[str, Any], campaign: str, window: int, n: int) -> None:
        url, name = self._issuer(cfg, campaign)
        attestation = None
        if self.client.attestation is not None:
            try:
                attestation = self.client.attestation()
            except Exception as exc:  # noqa: BLE001 - the app's callable: its failure means "no token now"
                raise NoToken(f"attestation() failed: {type(exc).__name__}: {exc}") from None
        try:
            key = self._key(url)
            challenge = privacy_pass.challenge_for(name, campaign, window)
            pending = [privacy_pass.token_request(key, challenge) for _ in range(n)]
            body = delivery.request(url + "/token-request", "", self.client.timeout, "POST",
                                    privacy_pass.encode_batch([p.request for p in pending]),
                                    privacy_pass.BATCH_REQUEST_CONTENT_TYPE,
                                    authorization=f"Bearer {attestation}" if attestation else None,
                                    accept=privacy_pass.BATCH_RESPONSE_CONTENT_TYPE)
            answers = privacy_pass.decode_batch(body, privacy_pass.NK, n)
            tokens = [p.finalize(key, a) for p, a in zip(pending, answers, strict=True)]
        except delivery.HttpStatus as exc:
            if delivery.error_code(exc.body) == "unknown_token_key":
                self.forget_key(url)
            raise NoToken(f"the issuer refused: {exc}") from None
        except (OSError, TokenFormatError, BlindRsaError, ValueError) as exc:
            self.forget_key(url)
            raise NoToken(f"no token from the issuer at {url}: {type(exc).__name__}: {exc}") from None
        with self._queue().transaction() as db:
            db.executemany("INSERT INTO tokens (campaign, window, token) VALUES (?, ?, ?)",
                           [(campaign, window, t.encode()) for t in tokens])


__all__ = ["NoToken", "TokenWallet"]
