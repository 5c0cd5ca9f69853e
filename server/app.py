"""Flask app factory.

``create_app(config, redis_url)`` builds the collector: one Redis client and the validated config
in ``app.extensions["ldptel"]`` (a ``ServerState``), the blueprints of ``BLUEPRINT_MODULES``
(each module exposes ``bp``), JSON errors (``{"error", "detail"}``: every ``errors.ApiError`` raised
below a view, Redis outages and HTTP errors, rendered by ``errors.render``), request metrics and
the security headers of every response (``baseline_headers``).
To add an API, append its module to ``BLUEPRINT_MODULES`` or pass ``blueprints=``.
"""

from __future__ import annotations

import importlib
import ipaddress
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from flask import Blueprint, Flask, Response, current_app, g, has_request_context, request
from redis.backoff import ExponentialBackoff
from redis.exceptions import SlotNotCoveredError
from redis.retry import Retry
from werkzeug.exceptions import HTTPException

from ldptel.campaigns.config import Campaign, Config
from ldptel.server.addresses import ClientAddress
from ldptel.server.bodies import BodyGuard, drain_unread_body
from ldptel.server.errors import API_CSP, ApiError, render
from ldptel.server.metrics import Metrics
from ldptel.server.probe import Probe
from ldptel.server.ratelimit import RateLimiter
from ldptel.server.throttle import AuthThrottle
from ldptel.store import registry
from ldptel.store.redis_client import AnyRedis, connect_roles

log = logging.getLogger("ldptel.server")

# Blueprint modules registered by default, in order; each exposes ``bp``.
BLUEPRINT_MODULES: list[str] = [
    "ldptel.server.ingest",
    "ldptel.server.health",
    "ldptel.server.export",
    "ldptel.server.queries",
    "ldptel.server.means",
    "ldptel.server.series",
    "ldptel.server.versions",
    "ldptel.server.admin",
    "ldptel.server.pages",
]
# The reader pool of ``ldptel serve --read-port``: what operators and data teams read (export and
# query API, series, pages, health), without ingest (and the device configs beside it) or admin.
READ_BLUEPRINT_MODULES: list[str] = [m for m in BLUEPRINT_MODULES
                                     if m not in ("ldptel.server.ingest", "ldptel.server.admin")]


@dataclass
class ServerState:
    """What the blueprints share: ``app.extensions["ldptel"]``. ``config`` is the registry's
    current snapshot (``registry.Live``), pinned for the whole request: a request that reads it
    twice sees one consistent set of campaigns even if the registry changes meanwhile."""

    initial_config: Config
    redis: AnyRedis  # the ``reader`` role: export, pages, series, the registry (read-only)
    redis_url: str
    metrics: Metrics
    rate_limiter: RateLimiter
    auth_throttle: AuthThrottle
    probe: Probe  # cached Redis reads of /healthz and /metrics
    # the other roles' clients (``ldptel.store.acl``); each is ``redis`` when no credentials apply
    collector_redis: AnyRedis  # ingest, rate limits, failed-authentication counters, rejections
    sessions_redis: AnyRedis  # operator sessions and their secret
    admin_redis: AnyRedis  # the admin API: registry writes
    supervised_aggregator: bool = False  # this `ldptel serve` runs (and restarts) an aggregator
    # (campaign, version) → (Campaign, Mechanism): ``validation.mechanism_of``
    mechanisms: dict[tuple[str, int], Any] = field(default_factory=dict)
    live: Any = None  # ``registry.Live``: the campaigns follow the registry (a background poller)
    # the client address of a request (the peer, or X-Forwarded-For behind ``trusted_proxies``)
    client_address: ClientAddress = field(default_factory=ClientAddress)
    # ingest bodies: a cap of unfinished ones per client address (``bodies``)
    body_guard: BodyGuard = field(default_factory=lambda: BodyGuard(4))

    @property
    def config(self) -> Config:
        if self.live is None:
            return self.initial_config
        if not has_request_context():
            return cast("Config", self.live.config)
        pinned = g.get("ldptel_config")
        if pinned is None:
            pinned = g.ldptel_config = self.live.config
        return cast("Config", pinned)

    def refresh(self) -> bool:
        """Read the registry now (``Live.refresh(force=True)``) and pin the request to the
        snapshot read; True if the campaigns changed."""
        changed = bool(self.live.refresh(force=True))
        if has_request_context():
            g.pop("ldptel_config", None)
        return changed

    def campaign(self, name: str) -> Campaign | None:
        return self.config.campaign(name)


def state() -> ServerState:
    """The ``ServerState`` of the current app."""
    return cast("ServerState", current_app.extensions["ldptel"])


APP_ROLES = ("reader", "collector", "sessions", "admin")  # ``ldptel.store.acl``; reader first


def redis_clients(url: str) -> dict[str, AnyRedis]:
    """Redis clients that fail fast when the server is down (the request answers 503) and
    reconnect by themselves once it is back: short connect timeout, two quick retries. A Redis
    Cluster URL (``ldptel.store.redis_client``) gives cluster clients. One per role of ``APP_ROLES``
    when credentials apply (``ldptel.credentials``), else one shared client."""
    return connect_roles(
        url, APP_ROLES, socket_connect_timeout=2.0, socket_timeout=10.0,
        retry=Retry(ExponentialBackoff(cap=0.05, base=0.01), 2), health_check_interval=0,
    )


def build_mechanisms(config: Config) -> dict[tuple[str, int], Any]:
    """One mechanism object per campaign version (``Campaign.mechanism()``): it validates the
    version's reports (``validation.mechanism_of`` adds versions made later)."""
    return {(c.name, c.version): (c, c.mechanism()) for latest in config.campaigns
            for c in config.versions(latest.name)}


def baseline_headers(response: Response) -> Response:
    """Headers on every response (API JSON, errors, 404s): ``X-Content-Type-Options: nosniff``
    and, unless the response set its own (the operator pages' nonce-based policy), the CSP
    ``API_CSP`` that lets the body load nothing and be framed nowhere."""
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers.setdefault("Content-Security-Policy", API_CSP)
    return response


def create_app(config: Config, redis_url: str, blueprints: Iterable[Blueprint] | None = None,
               supervised_aggregator: bool = False, modules: Iterable[str] | None = None) -> Flask:
    """The collector app. ``blueprints`` (default: the ``bp`` of every module of ``modules``,
    default ``BLUEPRINT_MODULES``) are registered in order. ``supervised_aggregator``: an
    aggregator runs beside it, so ``/healthz`` fails when it is down or lags."""
    app = Flask("ldptel.server")
    app.config["MAX_CONTENT_LENGTH"] = config.server.max_body_bytes
    app.config["JSON_SORT_KEYS"] = False
    if config.server.secret_key:
        app.secret_key = config.server.secret_key
    clients = redis_clients(redis_url)
    client, collector = clients["reader"], clients["collector"]
    mechs = build_mechanisms(config)
    live = registry.Live(config, client)
    app.extensions["ldptel"] = ServerState(
        initial_config=config, redis=client, redis_url=redis_url, metrics=Metrics(collector),
        rate_limiter=RateLimiter(collector, config.server.rate_limit_per_minute,
                                 config.server.rate_limit_per_address_per_minute),
        auth_throttle=AuthThrottle(collector, config.server.auth_failure_limit,
                                   config.server.auth_failure_window_seconds,
                                   [*config.server.ingest_tokens, *config.server.export_tokens,
                                    *config.server.admin_tokens]),
        probe=Probe(lambda: live.config, redis_url), supervised_aggregator=supervised_aggregator,
        mechanisms=mechs, live=live, collector_redis=collector,
        sessions_redis=clients["sessions"], admin_redis=clients["admin"],
        client_address=ClientAddress(config.server.trusted_proxies),
        body_guard=BodyGuard(config.server.max_unfinished_bodies_per_address),
    )
    live.refresh(force=True)  # the registry's campaigns from the start
    live.poll_in_background()  # and every 0.5 s from now on (serve builds the app in each worker)
    if blueprints is None:
        blueprints = [importlib.import_module(m).bp for m in (modules or BLUEPRINT_MODULES)]
    for bp in blueprints:
        app.register_blueprint(bp)
    _install_hooks(app)
    if "ingest" in app.blueprints:  # POST /v1/reports in front of Flask (``report_route``)
        from ldptel.server.report_route import ReportRoute

        app.wsgi_app = ReportRoute(app.extensions["ldptel"], app.wsgi_app)  # type: ignore[method-assign]
    if config.server.trusted_proxies:  # outermost: every route sees the scheme the client used
        app.wsgi_app = ForwardedProto(config.server.trusted_proxies, app.wsgi_app)  # type: ignore[method-assign]
    return app


class ForwardedProto:
    """WSGI middleware, as werkzeug's ``ProxyFix(x_proto=1)`` but only for a request whose peer
    (``REMOTE_ADDR``) is one of ``trusted`` (``server.trusted_proxies``: addresses or networks):
    its last ``X-Forwarded-Proto`` (``http``/``https``, the one the nearest proxy set) becomes
    the request's scheme, so the operator session cookie gets ``Secure`` behind the documented
    nginx, which terminates TLS. Anyone else's header is ignored: a client cannot claim HTTPS."""

    def __init__(self, trusted: Iterable[str], app: Any) -> None:
        self.trusted = [ipaddress.ip_network(t, strict=False) for t in trusted]
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        proto = environ.get("HTTP_X_FORWARDED_PROTO")
        if proto and self._trusted(environ.get("REMOTE_ADDR")):
            last = proto.split(",")[-1].strip().lower()
            if last in ("http", "https"):
                environ["wsgi.url_scheme"] = last
        return self.app(environ, start_response)

    def _trusted(self, addr: str | None) -> bool:
        try:
            ip = ipaddress.ip_address(addr or "")
        except ValueError:
            return False
        return any(ip in net for net in self.trusted)


def _install_hooks(app: Flask) -> None:
    @app.before_request
    def _start_timer() -> None:
        g.ldptel_t0 = time.perf_counter()
        st = state()
        # the registry's revision is read every 0.5 s off-request; a process whose poller is not
        # running (a fork of a process that built the app) starts one and waits (at most 0.25 s)
        # for its first read, so it does not answer from the campaigns it was forked with
        if st.live.poll_in_background():
            st.live.first_read()

    @app.after_request
    def _observe(response):
        baseline_headers(response)
        t0 = g.pop("ldptel_t0", None)
        if t0 is not None:
            state().metrics.observe_request(request.endpoint or "none", response.status_code,
                                            time.perf_counter() - t0)
        return response

    app.register_error_handler(ApiError, render)

    @app.errorhandler(redis.RedisError)
    @app.errorhandler(SlotNotCoveredError)
    def _redis_down(exc: Exception) -> Response:
        log.warning("redis unavailable: %s", exc)
        state().metrics.reject(None, "redis_unavailable")
        return render(ApiError(503, "unavailable", "storage is unavailable; retry later",
                               {"Retry-After": "1"}))

    @app.errorhandler(Exception)
    def _internal_error(exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            return _http_error(exc)
        log.exception("unhandled error in %s %s", request.method, request.path)
        return render(ApiError(500, "internal_error", "unexpected server error"))

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        if exc.code == 413:
            state().metrics.reject(None, "body_too_large")
            drained = drain_unread_body()  # so that a client still writing reads the 413
            return render(ApiError(413, "too_large",
                                   f"request body exceeds {app.config['MAX_CONTENT_LENGTH']} bytes",
                                   {} if drained else {"Connection": "close"}))
        name = (exc.name or "error").lower().replace(" ", "_")
        return render(ApiError(exc.code or 500, name, exc.description))
