"""A small thread-safe LRU cache for estimates keyed by the accumulated state they come from."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ldptel.config import Campaign

if TYPE_CHECKING:
    from ldptel.aggregator.decoders.base import Accumulator


def state_digest(campaign: Campaign, window: int, acc: Accumulator) -> str:
    """SHA-256 over the campaign's public config and labels, the window and the accumulator
    state: it changes exactly when an estimate computed from them can change."""
    h = hashlib.sha256()
    h.update(json.dumps([campaign.public(), campaign.labels(), window], sort_keys=True,
                        default=str).encode())
    for key in sorted(acc.state):
        h.update(key.encode())
        h.update(acc.state[key].tobytes())
    return h.hexdigest()


class LruCache:
    """``get_or_compute(key, compute)``: the cached value, or ``compute()`` stored under ``key``
    (the ``size`` most recently used keys are kept). ``compute`` runs outside the lock."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = compute()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value
