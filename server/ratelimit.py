"""Per-token request rate limit held in Redis (shared by all workers and collector processes).

Sliding-window counter: requests of a token are counted per minute in
``ldptel:ratelimit:<token digest>:<minute>`` (expiring after two minutes); a request at fraction
t ∈ [0, 1) of the current minute is allowed iff

    previous_minute_count · (1 − t) + current_minute_count ≤ limit

(the current count including this request). One pipelined round trip per request. Rejected
requests count too, so a client hammering past the limit stays limited.
"""

from __future__ import annotations

import math
import time

import redis

PREFIX = "ldptel:ratelimit"
WINDOW = 60


def check_rate(client: redis.Redis, token_id: str, limit: int, now: float | None = None) -> tuple[bool, int]:
    """Count one request of ``token_id``; return (allowed, seconds to wait before retrying)."""
    now = time.time() if now is None else now
    minute = int(now // WINDOW)
    frac = now / WINDOW - minute
    cur, prev = f"{PREFIX}:{token_id}:{minute}", f"{PREFIX}:{token_id}:{minute - 1}"
    pipe = client.pipeline(transaction=False)
    pipe.incr(cur)
    pipe.expire(cur, 2 * WINDOW)
    pipe.get(prev)
    count, _, previous = pipe.execute()
    weighted = int(previous or 0) * (1.0 - frac) + count
    if weighted <= limit:
        return True, 0
    return False, max(1, math.ceil((1.0 - frac) * WINDOW)) if count > limit else 1
