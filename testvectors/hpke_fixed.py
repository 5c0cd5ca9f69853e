"""RFC 9180 HPKE, base mode, single shot, for DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM
(the suite of ``ldptel.sealing``) with a *given* ephemeral key: the deterministic path of the test
vectors only.

The SDK seals with ``cryptography``'s ``hpke.Suite``, which draws each message's ephemeral key
from the OS and has no way to take one, so ciphertexts cannot be reproduced from it. This module
redoes the RFC's steps (DeriveKeyPair, Encap, KeySchedule, Seal) from ``cryptography``'s
primitives, with the ephemeral key derived from a given ``ikmE`` (RFC 9180 §7.1.3), so
``generate.py`` can write ciphertexts another SDK must match byte for byte.

It lives in ``testvectors/``, outside the ``ldptel`` package (``PACKAGE_DIRS`` in the Makefile,
the packages of pyproject.toml): no module of the SDK, collector or aggregator can import it, and
``tests/test_testvectors.py`` checks that nothing under the package names it. Its output is
checked twice there: against RFC 9180's own vector for this suite (Appendix A.1.1), and by
opening every ciphertext it writes with the production ``ldptel.sealing.open_all``.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEM_ID, KDF_ID, AEAD_ID = 0x0020, 0x0001, 0x0001
KEM_SUITE = b"KEM" + KEM_ID.to_bytes(2, "big")
HPKE_SUITE = b"HPKE" + KEM_ID.to_bytes(2, "big") + KDF_ID.to_bytes(2, "big") + AEAD_ID.to_bytes(2, "big")
N_SECRET, N_KEY, N_NONCE = 32, 16, 12
MODE_BASE = 0
_RAW = (serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _extract(salt: bytes, ikm: bytes) -> bytes:
    return hmac.new(salt or bytes(32), ikm, hashlib.sha256).digest()


def _expand(prk: bytes, info: bytes, length: int) -> bytes:
    out, block, i = b"", b"", 0
    while len(out) < length:
        i += 1
        block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
        out += block
    return out[:length]


def labeled_extract(suite: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    return _extract(salt, b"HPKE-v1" + suite + label + ikm)


def labeled_expand(suite: bytes, prk: bytes, label: bytes, info: bytes, length: int) -> bytes:
    return _expand(prk, length.to_bytes(2, "big") + b"HPKE-v1" + suite + label + info, length)


def derive_key_pair(ikm: bytes) -> tuple[bytes, bytes]:
    """(private, public) raw X25519 keys of ``ikm`` (RFC 9180 §7.1.3)."""
    prk = labeled_extract(KEM_SUITE, b"", b"dkp_prk", ikm)
    sk = labeled_expand(KEM_SUITE, prk, b"sk", b"", 32)
    return sk, X25519PrivateKey.from_private_bytes(sk).public_key().public_bytes(*_RAW)


def encap(pk_r: bytes, sk_e: bytes) -> tuple[bytes, bytes]:
    """(shared secret, enc) for the recipient ``pk_r`` and the ephemeral private key ``sk_e``."""
    eph = X25519PrivateKey.from_private_bytes(sk_e)
    dh = eph.exchange(X25519PublicKey.from_public_bytes(pk_r))
    enc = eph.public_key().public_bytes(*_RAW)
    prk = labeled_extract(KEM_SUITE, b"", b"eae_prk", dh)
    return labeled_expand(KEM_SUITE, prk, b"shared_secret", enc + pk_r, N_SECRET), enc


def key_schedule(shared_secret: bytes, info: bytes) -> tuple[bytes, bytes]:
    """(key, base nonce) of the base mode (no PSK)."""
    psk_id_hash = labeled_extract(HPKE_SUITE, b"", b"psk_id_hash", b"")
    info_hash = labeled_extract(HPKE_SUITE, b"", b"info_hash", info)
    context = bytes([MODE_BASE]) + psk_id_hash + info_hash
    secret = labeled_extract(HPKE_SUITE, shared_secret, b"secret", b"")
    return (labeled_expand(HPKE_SUITE, secret, b"key", context, N_KEY),
            labeled_expand(HPKE_SUITE, secret, b"base_nonce", context, N_NONCE))


def seal(pk_r: bytes, ikm_e: bytes, info: bytes, plaintext: bytes, aad: bytes = b"") -> dict[str, bytes]:
    """One single-shot message (sequence number 0) sealed to ``pk_r`` with the ephemeral key of
    ``ikm_e``: its parts and ``message`` = enc ‖ ciphertext, the layout ``ldptel.sealing`` sends."""
    sk_e, pk_e = derive_key_pair(ikm_e)
    shared, enc = encap(pk_r, sk_e)
    assert enc == pk_e
    key, nonce = key_schedule(shared, info)
    ct = AESGCM(key).encrypt(nonce, plaintext, aad)
    return {"sk_e": sk_e, "enc": enc, "shared_secret": shared, "key": key, "base_nonce": nonce,
            "ciphertext": ct, "message": enc + ct}


__all__ = ["derive_key_pair", "encap", "key_schedule", "seal"]
