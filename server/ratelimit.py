"""Ingest rate limits: per client address, counted in each process's memory, and per token, held
in Redis (shared by all workers and collector processes).

**Per address** (``[server] rate_limit_per_address_per_minute``, default 600; 0: off), checked
first: every device of an app shares the ingest token, so a per-token limit alone let one client
that floods with it spend the whole fleet's budget (issue 34, item 7: one client at ~2,800 req/s
made 18 of 20 honest requests 429). Each process counts the requests of each client address
(``server.addresses``: the peer, or the forwarded address behind ``trusted_proxies``; an IPv6
address by its /64) in a sliding window of one minute, in memory (no Redis round trip, nothing
about an address stored anywhere): a request over the limit is answered 429 with ``Retry-After``
and spends nothing of the token's budget. The limit is per process, so a flooder spread over
``P`` collector processes gets at most ``P`` times it; an honest device sends a batch every few
seconds at most (the SDK's flush), so it stays far below, even a few hundred behind one NAT.

**Per token**:

Sliding-window counter: requests of a token are counted per minute in
``keys.ratelimit_key(<token digest>, <minute>)`` (expiring after two minutes); a request at fraction
t ∈ [0, 1) of the current minute is allowed iff

    previous_minute_count · (1 − t) + current_minute_count ≤ limit

(the current count including this request). A refused request counts for nothing (it does not
spend the budget the honest devices share), and the process refuses that token from memory for
``REFUSAL_MEMORY_S`` before it asks Redis again, so a flood over the limit costs Redis nothing.

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
from ldptel.server.throttle import address_bucket
from ldptel.store.redis_client import AnyRedis

WINDOW = 60
REFUSAL_MEMORY_S = 0.25  # a refused token is refused from memory this long (no Redis round trip)
MAX_ADDRESSES = 200_000  # addresses counted per minute and process; beyond, new ones are not limited


class RateLimiter:
    """Per-process front of the Redis counters (thread-safe)."""

    def __init__(self, client: AnyRedis, limit: int, per_address: int = 0) -> None:
        self.client = client
        self.limit = limit
        self.lease = max(1, min(limit // 200, 100))
        self._lock = threading.Lock()
        self._local: dict[str, tuple[int, int]] = {}  # token id → (minute, requests left in lease)
        self._refused: dict[str, tuple[float, float]] = {}  # token id → (refused until, retry at)
        self.per_address = per_address
        self._minute = -1
        self._now: dict[str, int] = {}  # address bucket → requests counted this minute
        self._before: dict[str, int] = {}  # … in the minute before

    def check_address(self, address: str, now: float | None = None) -> int:
        """Count one request of ``address`` against the per-address limit: 0 if allowed, else the
        seconds to wait (the request is not counted)."""
        if not self.per_address:
            return 0
        now = time.time() if now is None else now
        minute = int(now // WINDOW)
        bucket = address if ":" not in address else address_bucket(address)
        with self._lock:
            if minute != self._minute:
                self._before = self._now if minute == self._minute + 1 else {}
                self._now, self._minute = {}, minute
            current = self._now.get(bucket, 0)
            previous = self._before.get(bucket, 0)
            frac = now / WINDOW - minute
            if previous * (1.0 - frac) + current + 1 > self.per_address:
                # the earliest the sliding count falls under the limit again
                if current + 1 > self.per_address:
                    return max(1, math.ceil((1.0 - frac) * WINDOW))
                need = previous * (1.0 - frac) + current + 1 - self.per_address
                return max(1, math.ceil(need / previous * WINDOW)) if previous else 1
            if current or len(self._now) < MAX_ADDRESSES:
                self._now[bucket] = current + 1
        return 0

    def check(self, token_id: str, now: float | None = None) -> tuple[bool, int]:
        """Count one request of ``token_id``; return (allowed, seconds to wait before retrying)."""
        now = time.time() if now is None else now
        minute = int(now // WINDOW)
        with self._lock:
            held = self._local.get(token_id)
            if held is not None and held[0] == minute and held[1] > 0:
                self._local[token_id] = (minute, held[1] - 1)
                return True, 0
            refused = self._refused.get(token_id)
            if refused is not None:
                if now < refused[0]:
                    return False, max(1, math.ceil(refused[1] - now))
                del self._refused[token_id]
        frac = now / WINDOW - minute
        cur, prev = keys.ratelimit_key(token_id, minute), keys.ratelimit_key(token_id, minute - 1)
        pipe = self.client.pipeline(transaction=False)
        pipe.incrby(cur, self.lease)
        pipe.expire(cur, 2 * WINDOW)
        pipe.get(prev)
        count, _, previous = pipe.execute()
        used_before = int(previous or 0) * (1.0 - frac) + count - self.lease
        granted = max(0, min(self.lease, math.floor(self.limit - used_before)))
        unused = self.lease - granted  # a refused request counts for nothing
        if unused > 0:
            self.client.decrby(cur, unused)
        if granted == 0:
            wait = math.ceil((1.0 - frac) * WINDOW) if count - self.lease >= self.limit else 1
            with self._lock:
                self._refused[token_id] = (now + REFUSAL_MEMORY_S, now + max(1, wait))
            return False, max(1, wait)
        with self._lock:
            self._local[token_id] = (minute, granted - 1)
        return True, 0
