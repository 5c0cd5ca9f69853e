"""The aggregator's record of the sealed messages it opened, per analyzer key
(``keys.opened_key``): a message re-posted under new batch ids (a replay by anyone holding its
ciphertext: a Redis dump, a proxy, the collector) is opened again but never counted twice, across
releases, workers and restarts.

A message is named by its encapsulated key ``enc`` (``sealing.enc_of``: 32 bytes the sender drew
at random, a fresh one per message). ``claim`` records the ``enc`` of every message a release
opened, each under the release's tag (``release_tag``: 8 bytes of SHA-256 over the stream, the
entry id of its first part and its release id, so a release decoded again after a worker died
before its commit finds its own messages, and a release re-sent under the same release id is
another release); what was recorded under another tag is a replay. Only messages that opened are
recorded (a forged message carrying someone's ``enc`` fails its tag and takes nothing away).

Memory: one hash field per message opened with the key (about 100 bytes each in Redis's hash
table: a 32-byte field, an 8-byte value and their overhead), kept for the key's life; the hash
expires when the key's private half is deleted (``accepted_until`` + ``key_overlap``, when no
message sealed to it can be opened any more) and ``Keyring.ensure`` deletes it then too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ldptel import keys
from ldptel.store import scripts
from ldptel.store.redis_client import AnyRedis

CLAIM_CHUNK = 4096  # encs per script call (a script blocks every client while it runs)


def release_tag(stream: str, first_entry: bytes | str, release: bytes) -> bytes:
    """The 8-byte tag of one release (module docstring)."""
    entry = first_entry if isinstance(first_entry, bytes) else first_entry.encode()
    return hashlib.sha256(stream.encode() + b"\x00" + entry + b"\x00" + release).digest()[:8]


def claim(r: AnyRedis, key_id: int, tag: bytes, encs: Sequence[bytes], expire_at: float | None) -> list[bool]:
    """Record ``encs`` (distinct) for the release ``tag``: per enc, True if it is this release's,
    False if another release counted it (a replay). ``expire_at``: epoch s at which the record
    goes (the key's deletion), None for no expiry."""
    run = scripts.of(r)
    key = keys.opened_key(key_id)
    at = "" if expire_at is None else str(int(expire_at) + 1)
    mine: list[bool] = []
    for s in range(0, len(encs), CLAIM_CHUNK):
        chunk = list(encs[s:s + CLAIM_CHUNK])
        out = run.call("OPENED_CLAIM", keys=[key], args=[tag, at, *chunk])
        text = out.decode() if isinstance(out, bytes) else str(out)
        mine += [c == "1" for c in text]
    return mine


def forget(r: AnyRedis, key_ids: Sequence[int]) -> None:
    """Delete the records of ``key_ids`` (their private keys were deleted)."""
    for kid in key_ids:
        r.delete(keys.opened_key(kid))


__all__ = ["CLAIM_CHUNK", "claim", "forget", "release_tag"]
