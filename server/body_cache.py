"""Rendered answers kept in each server process, bounded by the bytes they really take.

A document whose ETag names its publication never changes, so ``documents.conditional_response``
and the ``/windows`` and ``/series`` views render a body once and keep it. Both share ``CACHE``:
one bound per process (``KEPT_BYTES``), least recently used dropped first. An entry is charged
its key, its body and the dict slot holding them (``cost``), never the body alone: a key is the
SHA-256 of everything that identifies the answer (path, query string, ETag …), 32 bytes however
long the query string, so unique junk parameters cost what their bodies cost and no more
(they once cost 4,940 B of memory per request against 141 B counted).
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections import OrderedDict

KEPT_BYTES = 32 * 1024 * 1024  # per process, for every kept answer together
# an OrderedDict slot (hash, key and value pointers, links), with the table's growth slack:
# 75 B measured per entry with tracemalloc, charged 128
ENTRY_OVERHEAD = 128


def cache_key(*parts: str | bytes | float | int) -> bytes:
    """The 32-byte key of an answer identified by ``parts`` (each part length-prefixed, so no
    two different tuples share a key)."""
    h = hashlib.sha256()
    for part in parts:
        raw = part if isinstance(part, bytes) else repr(part).encode()
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return h.digest()


def cost(key: bytes, body: bytes) -> int:
    """What keeping ``body`` under ``key`` takes: both objects and the slot holding them."""
    return sys.getsizeof(key) + sys.getsizeof(body) + ENTRY_OVERHEAD


class BodyCache:
    """Thread-safe LRU of rendered bodies, at most ``limit`` bytes by ``cost``."""

    def __init__(self, limit: int = KEPT_BYTES) -> None:
        self.limit = limit
        self.nbytes = 0
        self._entries: OrderedDict[bytes, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> bytes | None:
        with self._lock:
            body = self._entries.get(key)
            if body is not None:
                self._entries.move_to_end(key)
            return body

    def put(self, key: bytes, body: bytes) -> None:
        """Keep ``body`` (dropping the least recently used); a body over the limit is not kept."""
        size = cost(key, body)
        if size > self.limit:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.nbytes -= cost(key, old)
            while self._entries and self.nbytes + size > self.limit:
                k, v = self._entries.popitem(last=False)
                self.nbytes -= cost(k, v)
            self._entries[key] = body
            self.nbytes += size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0


CACHE = BodyCache()

__all__ = ["CACHE", "ENTRY_OVERHEAD", "KEPT_BYTES", "BodyCache", "cache_key", "cost"]
