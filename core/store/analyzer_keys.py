"""The analyzer's public keys as the collector and devices see them: ``keys.ANALYZER_KEYS_KEY``.

The aggregator (``ldptel.aggregator.keyring``) is the only holder of the private keys (files in
its data directory); it publishes each key's public half here with its validity:

- ``current_until`` = created + ``[analyzer] key_rotation``: until then the key is the one the
  collector hands to devices (the newest current key, in each shuffled campaign's config);
- ``accepted_until`` = ``current_until`` + ``[analyzer] key_overlap``: until then the collector
  takes batches sealed to it (a device that fetched its config before a rotation); after it, or
  for a key id never published, the collector answers 400 ``unknown_key`` (the SDK refreshes its
  config and seals again; nothing is dropped silently).

Each key carries ``signature``: the aggregator's Ed25519 signature over its suite, raw key, id and
both times (``ldptel.key_signing``); a device seals only to a key whose signature verifies under
the signing key its app pinned, so the collector serving this record cannot substitute a key.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from typing import Any, cast

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ldptel import key_signing, keys, sealing
from ldptel.store.redis_client import AnyRedis


@dataclass(frozen=True)
class PublicKey:
    """One published analyzer key."""

    key_id: int
    public: bytes  # raw X25519
    created: float
    current_until: float
    accepted_until: float
    signature: bytes = b""  # Ed25519 over ``key_signing.statement`` (empty: not signed)

    def config(self) -> dict[str, Any]:
        """What a device gets in a campaign's config (``analyzer_key``)."""
        return {"id": self.key_id, "public": base64.b64encode(self.public).decode(),
                "suite": sealing.SUITE_ID, "current_until": int(self.current_until),
                "accepted_until": int(self.accepted_until),
                "signature": base64.b64encode(self.signature).decode()}

    def verifies(self, signing_key: Ed25519PublicKey) -> bool:
        """Whether its signature is the signing key's (``key_signing.verify_key``)."""
        return key_signing.verify_key(sealing.SUITE_ID, self.public, self.key_id, self.current_until,
                                      self.accepted_until, self.signature, signing_key)

    def record(self) -> str:
        return json.dumps({"public": base64.b64encode(self.public).decode(), "created": int(self.created),
                           "current_until": int(self.current_until),
                           "accepted_until": int(self.accepted_until),
                           "signature": base64.b64encode(self.signature).decode()}, sort_keys=True)


def parse(key_id: int, record: str | bytes) -> PublicKey:
    doc = json.loads(record)
    return PublicKey(key_id, base64.b64decode(doc["public"]), float(doc["created"]),
                     float(doc["current_until"]), float(doc["accepted_until"]),
                     base64.b64decode(doc.get("signature", "")))


def read(r: AnyRedis) -> dict[int, PublicKey]:
    """Every published key (unreadable records are left out)."""
    out = {}
    for field, value in cast(dict[bytes, bytes], r.hgetall(keys.ANALYZER_KEYS_KEY)).items():
        try:
            out[int(field)] = parse(int(field), value)
        except (ValueError, KeyError, TypeError):
            continue
    return out


def publish(r: AnyRedis, published: list[PublicKey], gone: list[int]) -> None:
    """Write ``published`` and remove the ids of ``gone`` (one pipeline)."""
    pipe = r.pipeline(transaction=False)
    if published:
        pipe.hset(keys.ANALYZER_KEYS_KEY, mapping={str(k.key_id): k.record() for k in published})
    if gone:
        pipe.hdel(keys.ANALYZER_KEYS_KEY, *[str(g) for g in gone])
    pipe.execute()


def current(published: dict[int, PublicKey], now: float | None = None) -> PublicKey | None:
    """The key devices should seal to now: the newest one still current (else the newest still
    accepted), or None when none is."""
    at = time.time() if now is None else now
    live = [k for k in published.values() if at < k.accepted_until]
    if not live:
        return None
    fresh = [k for k in live if at < k.current_until]
    return max(fresh or live, key=lambda k: k.created)


def accepted(published: dict[int, PublicKey], key_id: int, now: float | None = None) -> bool:
    """Whether the collector takes messages sealed to ``key_id`` now."""
    key = published.get(key_id)
    return key is not None and (time.time() if now is None else now) < key.accepted_until


__all__ = ["PublicKey", "accepted", "current", "parse", "publish", "read"]
