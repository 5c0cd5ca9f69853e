"""Throttling of failed authentication (wrong bearer tokens on the API, wrong tokens on the sign-in
form), shared by every worker through Redis.

Each failure counts against two counters, ``keys.auth_failure_key``: the client's address (an
IPv6 address by its /64 network) and the presented token's first ``PREFIX_CHARS`` characters.
A counter expires ``window`` seconds after its first failure (the TTL is the window, so nothing
about an address outlives it), and it is named by a keyed digest, HMAC-SHA256 under a key derived
from the configured tokens, never by the address or the token itself.

- The failure that takes either counter over ``limit`` answers 429 with ``Retry-After`` (the
  counter's remaining seconds) instead of 401.
- An address over the limit then gets 429 for every request that needs a token, valid or not,
  until its counter expires: each process remembers it (``blocked``, no Redis round trip on the
  hot path), learning it from the first failure it counts after the limit.
- A token prefix over the limit only turns failures into 429 (and blocks the failing address
  like above); a valid token from an address without failures is never throttled, whatever other
  addresses do.

If Redis fails while counting, the failure is answered 401 unthrottled (logged).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import math
import threading
import time
from collections.abc import Iterable

import redis

from ldptel import keys
from ldptel.store import scripts
from ldptel.store.redis_client import AnyRedis

log = logging.getLogger("ldptel.server.throttle")

PREFIX_CHARS = 8  # the shortest token the config accepts


def address_bucket(address: str | None) -> str:
    """What a client address is throttled as: an IPv4 address itself, an IPv6 address by its /64
    (one host usually holds a whole /64)."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return address or ""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class AuthThrottle:
    """Failure counters in Redis and this process's memory of blocked addresses (thread-safe)."""

    def __init__(self, client: AnyRedis, limit: int, window: int, tokens: Iterable[str]) -> None:
        self.client = client
        self.limit = limit
        self.window = window
        material = b"\0".join(sorted(t.encode("utf-8", "surrogatepass") for t in tokens))
        self._key = hashlib.sha256(b"ldptel/auth-throttle\0" + material).digest()
        self._scripts = scripts.of(client)
        self._lock = threading.Lock()
        self._blocked: dict[str, float] = {}  # address digest → monotonic time it is free again

    def _digest(self, kind: str, value: str) -> str:
        return hmac.new(self._key, f"{kind}\0{value}".encode("utf-8", "surrogatepass"),
                        hashlib.sha256).hexdigest()[:32]

    def blocked(self, address: str | None) -> int:
        """Seconds ``address`` must still wait (0: not blocked), from this process's memory."""
        if not self._blocked:
            return 0
        now = time.monotonic()
        digest = self._digest("addr", address_bucket(address))
        with self._lock:
            until = self._blocked.get(digest, 0.0)
            if until and until <= now:
                del self._blocked[digest]
        return max(0, math.ceil(until - now))

    def failed(self, address: str | None, token: str) -> int:
        """Count a failed authentication of ``address`` with ``token``; the seconds to wait if it
        went over the limit (answer 429), else 0 (answer 401)."""
        addr = self._digest("addr", address_bucket(address))
        prefix = self._digest("prefix", token[:PREFIX_CHARS])
        try:
            n_addr, ttl_addr, n_prefix, ttl_prefix = self._scripts.call(
                "AUTH_FAILURE",
                keys=[keys.auth_failure_key("addr", addr), keys.auth_failure_key("prefix", prefix)],
                args=[self.window])
        except redis.RedisError as exc:
            log.warning("failed-authentication throttle unavailable: %s", exc)
            return 0
        over = [int(ttl) for n, ttl in ((n_addr, ttl_addr), (n_prefix, ttl_prefix)) if int(n) > self.limit]
        if not over:
            return 0
        wait = max(1, *over)
        now = time.monotonic()
        with self._lock:
            self._blocked = {k: t for k, t in self._blocked.items() if t > now}  # forget expired ones
            self._blocked[addr] = now + wait
        return wait
