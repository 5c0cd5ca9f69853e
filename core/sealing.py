"""Reports sealed to the analyzer: RFC 9180 HPKE, base mode, single shot (the ``cryptography``
package's ``hpke``): DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM.

Each message is sealed separately (a fake message too), so the shuffler can permute messages of
different devices freely and no two share an encapsulated key. The ciphertext of a row of w bytes
is ``ciphertext_length(w)`` = 32 (the encapsulated X25519 key) + w + 16 (the GCM tag) bytes.

``info`` binds what the message is for: ``INFO_LABEL`` ‖ campaign ‖ 0x00 ‖ version (u32) ‖ window
start (u64, epoch s) ‖ key id (u32), big-endian. A message opened under another campaign, version,
window or key fails its tag check, so a message cannot be replayed into another window or campaign.

``key_id`` of a public key: the first 4 bytes of SHA-256 over its raw 32 bytes, as a u32.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hpke, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

INFO_LABEL = b"ldptel/v2 sealed report\x00"
SUITE_NAME = "HPKE base: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM"
SUITE_ID = "x25519-hkdf-sha256-aes128gcm"  # the ``suite`` of an analyzer key in a device config
ENC_BYTES, TAG_BYTES = 32, 16
_SUITE = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_128_GCM)
_RAW = (serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def ciphertext_length(row_bytes: int) -> int:
    """Bytes of one sealed row of ``row_bytes`` bytes."""
    return ENC_BYTES + row_bytes + TAG_BYTES


def info(campaign: str, version: int, window: int, key_id: int) -> bytes:
    """The HPKE ``info`` of a message (module docstring)."""
    return INFO_LABEL + campaign.encode() + b"\x00" + struct.pack(">IQI", version, window, key_id)


def public_bytes(key: X25519PublicKey) -> bytes:
    return key.public_bytes(*_RAW)


def key_id(public: bytes) -> int:
    """The u32 id of a raw X25519 public key (module docstring)."""
    return int.from_bytes(hashlib.sha256(public).digest()[:4], "big")


def load_public(raw: bytes) -> X25519PublicKey:
    """A raw 32-byte X25519 public key (``ValueError`` otherwise)."""
    return X25519PublicKey.from_public_bytes(raw)


def new_private() -> X25519PrivateKey:
    """A fresh key pair (OS randomness)."""
    return X25519PrivateKey.generate()


def private_bytes(key: X25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())


def load_private(raw: bytes) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(raw)


def seal(rows: Iterable[bytes], public: X25519PublicKey, info_bytes: bytes) -> list[bytes]:
    """Each row sealed on its own (a fresh encapsulated key per message)."""
    return [_SUITE.encrypt(row, public, info=info_bytes) for row in rows]


def enc_of(message: bytes) -> bytes:
    """The encapsulated key of a sealed message (its first ``ENC_BYTES``): drawn afresh for every
    message, so it names the message (the aggregator refuses one it has opened before)."""
    return message[:ENC_BYTES]


def open_keyed(messages: Sequence[bytes], key_ids: Sequence[int], private: Mapping[int, X25519PrivateKey],
               infos: Mapping[int, bytes], row_bytes: int) -> list[bytes | None]:
    """The plaintext of each of ``messages``, message i opened with ``private[key_ids[i]]`` and
    ``infos[key_ids[i]]`` (a release may hold messages sealed to several analyzer keys); None for
    one that does not open (a wrong length, a key not given, a failed tag: sealed under another
    key or ``info``, or tampered with). The one place messages are opened."""
    out: list[bytes | None] = []
    size = ciphertext_length(row_bytes)
    for message, kid in zip(messages, key_ids, strict=True):
        key, info_bytes = private.get(kid), infos.get(kid)
        if len(message) != size or key is None or info_bytes is None:
            out.append(None)
            continue
        try:
            out.append(_SUITE.decrypt(message, key, info=info_bytes))
        except (InvalidTag, ValueError):
            out.append(None)
    return out


def open_each(messages: Sequence[bytes], private: X25519PrivateKey, info_bytes: bytes,
              row_bytes: int) -> list[bytes | None]:
    """``open_keyed`` of messages all sealed to one key."""
    return open_keyed(messages, [0] * len(messages), {0: private}, {0: info_bytes}, row_bytes)


def open_all(messages: Sequence[bytes], private: X25519PrivateKey, info_bytes: bytes,
             row_bytes: int) -> tuple[bytes, int]:
    """The plaintexts of ``messages`` concatenated, and how many did not open (``open_each``);
    those are left out."""
    opened = open_each(messages, private, info_bytes, row_bytes)
    return b"".join(p for p in opened if p is not None), sum(p is None for p in opened)


__all__ = ["ENC_BYTES", "INFO_LABEL", "SUITE_ID", "SUITE_NAME", "TAG_BYTES", "ciphertext_length", "enc_of",
           "info", "key_id", "load_private", "load_public", "new_private", "open_all", "open_each",
           "open_keyed", "private_bytes", "public_bytes", "seal"]
