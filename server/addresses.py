"""The client address of a request: the peer's, or, when the peer is one of ``[server]
trusted_proxies``, the address that proxy says it forwarded for (``X-Forwarded-For``).

``X-Forwarded-For`` is a list that every proxy appends its peer to, so its leftmost entries are
whatever the client chose to write there. The client is therefore the rightmost entry that is not
itself a trusted proxy, read from the right, and only while every hop so far is trusted: with no
trusted proxy configured (the default) the header is ignored altogether, and a client that talks
to the collector directly cannot pose as anyone by sending it.

What it is used for: the per-address ingest rate limit (``server.ratelimit``), the failed
authentication throttle (``server.throttle``) and the cap on unfinished bodies per address
(``commands.buffered``). It is never stored: the Redis counters are named by a keyed digest.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """``trusted_proxies`` as networks (an address alone is its /32 or /128); ``ValueError``
    naming the entry that is neither."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address or network (e.g. 10.0.0.0/8)") from None
    return tuple(out)


class ClientAddress:
    """``of(remote, forwarded)``: the client address of one request (module docstring)."""

    def __init__(self, trusted: Iterable[str] = ()) -> None:
        self.trusted = parse_networks(trusted)
        self._is_trusted = lru_cache(maxsize=1024)(self._check)

    def _check(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in net for net in self.trusted)

    def of(self, remote: str | None, forwarded: str | None) -> str:
        """The client address: ``remote`` (the peer), unless it is a trusted proxy and
        ``forwarded`` (the ``X-Forwarded-For`` header) names the hop before it."""
        address = remote or ""
        if not self.trusted or not forwarded or not self._is_trusted(address):
            return address
        for hop in reversed(forwarded.split(",")):
            hop = hop.strip()
            if not hop:
                continue
            address = hop
            if not self._is_trusted(hop):
                break
        return address

    def of_environ(self, environ: dict[str, Any]) -> str:
        """``of`` a WSGI request (``REMOTE_ADDR``, ``HTTP_X_FORWARDED_FOR``)."""
        return self.of(environ.get("REMOTE_ADDR"), environ.get("HTTP_X_FORWARDED_FOR"))


__all__ = ["ClientAddress", "parse_networks"]
