"""The client address of a request (``server.addresses``) and the per-address ingest limit
(``server.ratelimit.RateLimiter.check_address``): unit tier, no Redis, no server."""

from __future__ import annotations

import pytest

from ldptel.campaigns.config import parse_config
from ldptel.errors import ConfigError
from ldptel.server.addresses import ClientAddress
from ldptel.server.ratelimit import RateLimiter


def test_forwarded_address_only_from_trusted_proxies() -> None:
    direct = ClientAddress()
    assert direct.of("203.0.113.7", "198.51.100.1") == "203.0.113.7"  # no proxy trusted: ignored
    proxied = ClientAddress(["127.0.0.1", "10.0.0.0/8"])
    assert proxied.of("203.0.113.7", "198.51.100.1") == "203.0.113.7"  # an untrusted peer
    assert proxied.of("127.0.0.1", "198.51.100.1") == "198.51.100.1"
    # what the client wrote itself stays left of the hop the proxy appended
    assert proxied.of("127.0.0.1", "6.6.6.6, 198.51.100.1") == "198.51.100.1"
    assert proxied.of("127.0.0.1", "198.51.100.1, 10.1.2.3") == "198.51.100.1"  # two proxies
    assert proxied.of("127.0.0.1", None) == "127.0.0.1"
    assert proxied.of("::ffff:127.0.0.1", "198.51.100.1") == "198.51.100.1"


CAMPAIGNS = [{"name": "c", "oracle": "grr", "epsilon": 1.0, "domain_size": 4}]


def test_trusted_proxies_are_checked_at_load() -> None:
    with pytest.raises(ConfigError, match="server.trusted_proxies: 'nginx' is not an IP address"):
        parse_config({"server": {"trusted_proxies": ["nginx"]}, "campaigns": CAMPAIGNS})
    config = parse_config({"server": {"trusted_proxies": ["::1"]}, "campaigns": CAMPAIGNS})
    assert config.server.trusted_proxies == ("::1",)


def test_per_address_limit_is_a_sliding_minute_and_refusals_count_for_nothing() -> None:
    limiter = RateLimiter(None, 10**6, per_address=5)  # type: ignore[arg-type]  # no Redis needed
    t0 = 60.0 * 1_000
    assert [limiter.check_address("192.0.2.1", t0 + i) for i in range(5)] == [0] * 5
    assert limiter.check_address("192.0.2.1", t0 + 5) == 55  # until the minute ends
    assert limiter.check_address("192.0.2.2", t0 + 5) == 0  # another address
    # an IPv6 address counts by its /64
    assert all(limiter.check_address(f"2001:db8::{i}", t0) == 0 for i in range(1, 6))
    assert limiter.check_address("2001:db8::ff", t0) > 0
    assert limiter.check_address("2001:db8:0:1::1", t0) == 0
    # half-way through the next minute the previous 5 weigh 2.5: two more
    assert [limiter.check_address("192.0.2.1", t0 + 90 + i * 1e-3) for i in range(3)][:2] == [0, 0]
    assert limiter.check_address("192.0.2.1", t0 + 90.01) > 0
    assert RateLimiter(None, 10, per_address=0).check_address("192.0.2.1", t0) == 0  # type: ignore[arg-type]
