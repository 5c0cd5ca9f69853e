"""The analyzer's HPKE public keys signed by its long-term Ed25519 key (RFC 8032, ``cryptography``):
what lets a device seal only to a key the aggregator published, whoever serves it.

The aggregator holds one Ed25519 signing key (``ldptel.aggregator.keyring``, made once, never
rotated); the app embeds its public half (``ldptel analyzer-key show``: 32 raw bytes in base64)
and passes it to the SDK (``analyzer_signing_key``). Each published HPKE key carries
``signature`` = Ed25519(signing key, ``statement(...)``), 64 bytes in base64, with

    statement = "ldptel/v1 analyzer key\\x00" ‖ suite (ASCII) ‖ 0x00 ‖ public key (32 raw bytes)
                ‖ key id (u32) ‖ current_until (u64, epoch s) ‖ accepted_until (u64, epoch s)

(integers big-endian; the times are whole seconds, as published). The label separates these
signatures from any other use of the key; the suite, the id and both validity times are bound, so
a rotation is signed too and a collector can neither substitute a key nor extend an old one's
life. A device accepts a key only while ``now < accepted_until`` on its own clock.

SDK-safe (the client, the shuffler and the aggregator all use it); the JS SDK's copy is
``client-js/src/sealed/keySigning.ts``, both checked against ``testvectors/analyzer_key_signature.json``.
"""

from __future__ import annotations

import base64
import binascii
import struct

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

STATEMENT_LABEL = b"ldptel/v1 analyzer key\x00"
SIGNATURE_BYTES, SIGNING_KEY_BYTES = 64, 32
_RAW = (serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def statement(suite: str, public: bytes, key_id: int, current_until: float, accepted_until: float) -> bytes:
    """The bytes signed for one analyzer key (module docstring)."""
    if len(public) != 32:
        raise ValueError(f"a public key of {len(public)} bytes, not 32")
    return (STATEMENT_LABEL + suite.encode("ascii") + b"\x00" + public
            + struct.pack(">IQQ", key_id, int(current_until), int(accepted_until)))


def sign(private: Ed25519PrivateKey, suite: str, public: bytes, key_id: int, current_until: float,
         accepted_until: float) -> bytes:
    """The 64-byte signature of one key's statement (Ed25519 is deterministic)."""
    return private.sign(statement(suite, public, key_id, current_until, accepted_until))


def signing_public(text: str | bytes) -> Ed25519PublicKey:
    """The app's pinned key (32 raw bytes, or their base64); ``ValueError`` saying why not."""
    raw = text if isinstance(text, bytes) else _b64(text, "analyzer_signing_key")
    if len(raw) != SIGNING_KEY_BYTES:
        raise ValueError(f"analyzer_signing_key: {len(raw)} bytes, not {SIGNING_KEY_BYTES} (an Ed25519 "
                         "public key in base64, as `ldptel analyzer-key show` prints it)")
    return Ed25519PublicKey.from_public_bytes(raw)


def verify_key(suite: str, public: bytes, key_id: int, current_until: float, accepted_until: float,
               signature: bytes, signing_key: Ed25519PublicKey) -> bool:
    """Whether ``signature`` is the signing key's over this key's statement (a malformed field:
    False)."""
    try:
        signing_key.verify(signature, statement(suite, public, key_id, current_until, accepted_until))
    except (InvalidSignature, ValueError, TypeError, struct.error, UnicodeError):
        return False
    return True


def encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def public_text(key: Ed25519PublicKey) -> str:
    """The value an app embeds: the raw public key in base64."""
    return encode(key.public_bytes(*_RAW))


def _b64(text: str, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError(f"{field}: not base64") from None


def decode_signature(text: object) -> bytes:
    """A published ``signature`` (base64 of 64 bytes); ``ValueError`` saying why not."""
    if not isinstance(text, str):
        raise ValueError("no signature")
    raw = _b64(text, "signature")
    if len(raw) != SIGNATURE_BYTES:
        raise ValueError(f"signature of {len(raw)} bytes, not {SIGNATURE_BYTES}")
    return raw


__all__ = ["SIGNATURE_BYTES", "SIGNING_KEY_BYTES", "STATEMENT_LABEL", "decode_signature", "encode",
           "public_text", "sign", "signing_public", "statement", "verify_key"]
