"""One way to open Redis for the collector, the aggregator and the store: a single server or a
Redis Cluster (redis-py's ``RedisCluster``).

URLs:

- ``redis://host:port/0`` (or ``rediss://``, ``unix://``): one server — unless that server
  answers ``INFO cluster`` with ``cluster_enabled:1`` when we connect, in which case the URL is
  taken as a seed node of a cluster (auto-detection; one extra round trip per process start, none
  per request). A server that cannot be reached at start is taken as a single server, so a
  collector still starts, answers 503, and recovers when its Redis comes back.
- ``redis+cluster://host:port[,host:port…]`` (or ``rediss+cluster://``): always a cluster, with
  those seed nodes; the cluster must be reachable at start (the client loads the slot map then).
  This is the form to use in production: it does not depend on what the node said at start.

Roles: ``connect(url, role="collector")`` (``aggregator``, ``reader``, … — ``ldptel.store.acl``)
connects as that role's Redis user when a credentials file applies to the URL
(``ldptel.credentials``), else as the URL says, so an unsecured development Redis keeps working.

All keys of one (campaign, shard) share a hash tag (``ldptel.keys``), and every Lua script and
transaction of ldptel touches the keys of one tag only, so each runs on one cluster node.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster

from ldptel import credentials

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

AnyRedis = redis.Redis | RedisCluster


def is_cluster_url(url: str) -> bool:
    """True for a ``redis+cluster://`` / ``rediss+cluster://`` URL."""
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def cluster_url(nodes: list[tuple[str, int]], tls: bool = False) -> str:
    """``redis+cluster://h1:p1,h2:p2,…`` for seed ``nodes``."""
    return f"{'rediss' if tls else 'redis'}+cluster://" + ",".join(f"{h}:{p}" for h, p in nodes)


def _split_cluster_url(url: str) -> tuple[str, list[ClusterNode]]:
    """A cluster URL → (URL of its first seed node in the plain scheme, all seed nodes)."""
    scheme, rest = url.split("://", 1)
    base = CLUSTER_SCHEMES[scheme.lower()]
    netloc, sep, tail = rest.partition("/")
    auth, at, hosts = netloc.rpartition("@")
    nodes = []
    for part in hosts.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"redis cluster URL: expected host:port, got {part!r} in {url!r}")
        nodes.append(ClusterNode(host.strip("[]"), int(port)))
    first = f"{base}://{auth}{at}{hosts.split(',')[0].strip()}{sep}{tail}"
    return first, nodes


def is_cluster(client: Any) -> bool:
    """True if ``client`` is a cluster client."""
    return isinstance(client, RedisCluster)


def detect_cluster(url: str, timeout: float = 1.0, **auth: Any) -> bool:
    """Whether the server at a plain URL is a cluster node (False if it cannot be reached).
    ``auth``: ``username``/``password`` of the connection."""
    probe = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout, **auth)
    try:
        return bool(probe.info("cluster").get("cluster_enabled"))
    except redis.RedisError:
        return False
    finally:
        probe.close()


def without_userinfo(url: str) -> str:
    """``url`` without ``user:password@``."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    return f"{scheme}{sep}{netloc.rpartition('@')[2]}{slash}{tail}"


def role_auth(url: str, role: str | None) -> dict[str, str]:
    """``username``/``password`` of ``role``'s Redis user for ``url`` (``ldptel.credentials``),
    or nothing (no role, or no credentials file applies: connect as the URL says)."""
    user = credentials.user_for(url, role) if role is not None else None
    return {} if user is None else {"username": user[0], "password": user[1]}


def connect(url: str, *, retry: redis.retry.Retry | None = None, detect: bool = True,
            role: str | None = None, **kwargs: Any) -> AnyRedis:
    """A client for ``url`` (see the module doc), as ``role``'s Redis user when credentials
    apply. ``kwargs`` go to every connection (``socket_timeout``, ``socket_connect_timeout``,
    …); ``retry`` is the single-server client's retry policy, and sets the number of attempts of
    the cluster client."""
    auth = role_auth(url, role)
    if auth:  # the role's user, not the URL's (redis-py lets a URL's password win over kwargs)
        url = without_userinfo(url)
        kwargs.update(auth)
    if is_cluster_url(url):
        first, nodes = _split_cluster_url(url)
    elif detect and not url.startswith("unix://") and detect_cluster(url, 1.0, **auth):
        first, nodes = url, []
    else:
        if retry is not None:
            kwargs["retry"] = retry
        return redis.Redis.from_url(url, **kwargs)
    if retry is not None:
        kwargs["retry"] = retry
    return RedisCluster.from_url(first, startup_nodes=nodes, **kwargs)


def connect_roles(url: str, roles: tuple[str, ...], **kwargs: Any) -> dict[str, AnyRedis]:
    """A client per role (``connect(url, role=…, **kwargs)``); a single shared client when no
    credentials apply to ``url`` (nothing to tell the roles apart)."""
    if not role_auth(url, roles[0]):
        shared = connect(url, **kwargs)
        return dict.fromkeys(roles, shared)
    return {name: connect(url, role=name, **kwargs) for name in roles}
