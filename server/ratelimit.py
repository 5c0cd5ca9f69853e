"""Per-token request rate limit held in Redis (shared by all workers and collector processes).

Sliding-window counter: requests of a token are counted per minute in
``keys.ratelimit_key(<token digest>, <minute>)`` (expiring after two minutes); a request at fraction
t ∈ [0, 1) of the current minute is allowed iff

    previous_minute_count · (1 − t) + current_minute_count ≤ limit

(the current count including this request). Rejected requests count too, so a client hammering
past the limit stays limited.

To spare a Redis round trip per request, a process leases quota in blocks: it adds
L = clamp(limit // 200, 1, 100) to the counter at once (one pipelined round trip), is granted as
many of those as fit under the limit, and hands the rest out locally until the minute ends. A lease
left unused at the end of a minute was counted without being used, so each process can lower the
effective limit by at most L − 1 requests per token per minute (≤ 0.5 % of it); with L = 1 (limits
below 400 a minute) every request goes to Redis and the count is exact.
"""

from __future__ import annotations

import math
import threading
import time

from ldptel import keys
from ldptel.store.redis_client import AnyRedis

WINDOW = 60


class RateLimiter:
    """Per-process front of the Redis counters (thread-safe)."""

    def __init__(self, client: AnyRedis, limit: int) -> None:
        self.client = client
        self.limit = limit
        self.lease = max(1, min(limit // 200, 100))
        self._lock = threading.Lock()
        self._local: dict[str, tuple[int, int]] = {}  # token id → (minute, requests left in lease)

    def check(self, token_id: str, now: float | None = None) -> tuple[bool, int]:
        """Count one request of ``token_id``; return (allowed, seconds to wait before retrying)."""
        now = time.time() if now is None else now
        minute = int(now // WINDOW)
        with self._lock:
            held = self._local.get(token_id)
            if held is not None and held[0] == minute and held[1] > 0:
                self._local[token_id] = (minute, held[1] - 1)
                return True, 0
        frac = now / WINDOW - minute
        cur, prev = keys.ratelimit_key(token_id, minute), keys.ratelimit_key(token_id, minute - 1)
        pipe = self.client.pipeline(transaction=False)
        pipe.incrby(cur, self.lease)
        pipe.expire(cur, 2 * WINDOW)
        pipe.get(prev)
        count, _, previous = pipe.execute()
        used_before = int(previous or 0) * (1.0 - frac) + count - self.lease
        granted = max(0, min(self.lease, math.floor(self.limit - used_before)))
        unused = self.lease - max(granted, 1)  # a refused request still counts once
        if unused > 0:
            self.client.decrby(cur, unused)
        if granted == 0:
            wait = math.ceil((1.0 - frac) * WINDOW) if count - self.lease >= self.limit else 1
            return False, max(1, wait)
        with self._lock:
            self._local[token_id] = (minute, granted - 1)
        return True, 0
