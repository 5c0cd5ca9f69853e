"""A device's secret and what is derived from it with HMAC-SHA256.

The secret ties a device's reports together without a stored table: RAPPOR's cohort and memoized
permanent randomized response, the heavy-hitter level and seed-pool index, and (in the SDK) one
secret per campaign derived from the device secret kept in the queue file. Each use has its own
label, so the derived values are independent.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any

MIN_SECRET_BYTES = 16
NEW_SECRET_BYTES = 32


def device_secret(secret: Any = None) -> bytes:
    """``secret`` if it is bytes of at least 16, a fresh random 32-byte one from the OS if None;
    else ``ValueError`` naming ``secret``."""
    if secret is None:
        return os.urandom(NEW_SECRET_BYTES)
    if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"secret must be at least {MIN_SECRET_BYTES} bytes")
    return secret


def derive(secret: bytes, label: bytes) -> bytes:
    """HMAC-SHA256(secret, label): 32 bytes."""
    return hmac.new(secret, label, hashlib.sha256).digest()


def derive_index(secret: bytes, label: bytes, size: int) -> int:
    """An index in [0, size): the first 8 bytes of ``derive(secret, label)`` (little endian)
    modulo ``size`` (bias ≤ size/2^64)."""
    return int.from_bytes(derive(secret, label)[:8], "little") % size
