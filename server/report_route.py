"""``POST /v1/reports`` as a plain WSGI handler in front of Flask (``ReportRoute``).

The report route is the collector's one hot path, so it does only what it must, in this order,
each step once: the failed-authentication block (``throttle``), the bearer token
(constant-time, ``auth``), content type (415), declared length (413), the per-token rate limit
(429), the body read within the limit (413), parse + validation (``validate``: the
mechanism's vectorized check, 400 / 409 / 410 / 413 / 503), then ``scripts.INGEST`` (one round
trip: dedupe, bound, XADD, counters). The answers, headers and metrics are those the Flask
blueprint gave (``server.ingest``'s docstring): JSON ``{"error", "detail"}`` errors, the
``Ldptel-Campaigns`` hint, ``Retry-After`` on 429 / 503, ``WWW-Authenticate`` on 401, the body
of a refused request drained (``bodies``), the baseline security headers, the request counter
and latency histogram under the endpoint name ``ingest.post_reports``.

What it leaves out is Flask's per-request machinery (contexts, routing, response objects, hooks):
every other request, and every method but POST on this path, goes on to the Flask app.
``create_app`` installs it when the ingest blueprint is registered; the blueprint's own view
answers through the same ``ReportRoute.answer`` when it is not installed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import redis
from redis.exceptions import SlotNotCoveredError
from werkzeug.wsgi import get_content_length

from ldptel import keys
from ldptel.campaigns.config import Config
from ldptel.proto import ENVELOPES_SCHEMA_VERSION, SEALED_SCHEMA_VERSION, schema_version_of
from ldptel.server import redemption
from ldptel.server.bodies import drain_environ
from ldptel.server.errors import API_CSP
from ldptel.server.sealed_ingest import SealedValid, sealed_keys, validate_envelopes, validate_sealed
from ldptel.server.throttle import AuthThrottle
from ldptel.server.validation import Rejection, ValidBatch, validate_batch
from ldptel.store import scripts

log = logging.getLogger("ldptel.server")

ENDPOINT = "ingest.post_reports"
PATH = "/v1/reports"
PROTOBUF_TYPES = ("application/x-protobuf", "application/protobuf")
UNAVAILABLE_RETRY_S = 60  # Retry-After of a batch of a quarantined campaign
INGRESS_FULL_RETRY_S = 5  # Retry-After while the ingress stream is full
HINT_HEADER = "Ldptel-Campaigns"
REASONS = {202: "202 ACCEPTED", 400: "400 BAD REQUEST", 401: "401 UNAUTHORIZED", 409: "409 CONFLICT",
           410: "410 GONE", 413: "413 REQUEST ENTITY TOO LARGE", 415: "415 UNSUPPORTED MEDIA TYPE",
           429: "429 TOO MANY REQUESTS", 500: "500 INTERNAL SERVER ERROR", 503: "503 SERVICE UNAVAILABLE"}

Answer = tuple[int, list[tuple[str, str]], bytes]


class Refused(Exception):
    """An answer other than 202: status, error code, detail, extra headers, metric reason."""

    def __init__(self, status: int, error: str, detail: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.detail, self.headers = status, error, detail, headers or {}


_digest_lock = threading.Lock()
_digest: tuple[Config, str] | None = None  # the last snapshot's digest (snapshots are immutable)


def campaigns_digest(config: Config) -> str:
    """A short digest of what devices are told about the campaigns: every campaign's latest
    public config, version, status and reason (computed once per registry snapshot)."""
    global _digest
    cached = _digest
    if cached is not None and cached[0] is config:
        return cached[1]
    doc = [[c.public(), c.status, c.reason] for c in config.campaigns]
    value = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]
    with _digest_lock:
        _digest = (config, value)
    return value


def validate(st: Any, body: bytes) -> list[ValidBatch]:
    """The batches of ``body``, parsed once as what its ``schema_version`` says it is
    (``proto.schema_version_of``): a ``ReportBatch`` (``_validate_plain``), schema_version 2 a
    ``SealedBatch``, schema_version 3 a ``SealedEnvelopes`` (each envelope one device:
    ``sealed_ingest``); ``Rejection`` otherwise."""
    version = schema_version_of(body)
    if version == ENVELOPES_SCHEMA_VERSION:
        return _validate_envelopes(st, body)
    return [_validate_one(st, body, version)]


def _validate_envelopes(st: Any, body: bytes) -> list[ValidBatch]:
    limit = st.config.server.max_reports_per_batch
    try:
        return list(validate_envelopes(body, st.config, st.mechanisms, sealed_keys(st), limit))
    except Rejection as rej:
        if rej.error not in ("unknown_key", "unknown_campaign", "unknown_version"):
            raise
        st.refresh()
        return list(validate_envelopes(body, st.config, st.mechanisms, sealed_keys(st, force=True), limit))


def _validate_one(st: Any, body: bytes, version: int) -> ValidBatch:
    if version != SEALED_SCHEMA_VERSION:
        try:
            return _validate_plain(st, body)
        except Rejection as rej:
            if rej.reason != "sealed_batch":
                raise
    try:  # schema_version 2: a SealedBatch (``sealed_ingest``); a new key may have just appeared
        return validate_sealed(body, st.config, st.mechanisms, sealed_keys(st))
    except Rejection as rej:
        if rej.error not in ("unknown_key", "unknown_campaign", "unknown_version"):
            raise
        st.refresh()
        return validate_sealed(body, st.config, st.mechanisms, sealed_keys(st, force=True))


def _validate_plain(st: Any, body: bytes) -> ValidBatch:
    """``validate_batch`` against this process's campaigns; a batch naming a campaign or version
    this process does not know yet (another worker just took an admin change, and a device
    already fetched it) is checked again after a forced registry refresh, so a device that is
    ahead of this worker by a few hundred milliseconds never gets a 400 that drops its reports."""
    try:
        return validate_batch(body, st.config, st.mechanisms)
    except Rejection as rej:
        if rej.error not in ("unknown_campaign", "unknown_version") or not st.refresh():
            raise
    return validate_batch(body, st.config, st.mechanisms)


def _json(doc: Any) -> bytes:
    return (json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def _mimetype(environ: dict[str, Any]) -> str:
    return cast("str", environ.get("CONTENT_TYPE", "").partition(";")[0].strip().lower())


class ReportRoute:
    """WSGI middleware: ``POST /v1/reports`` answered here, everything else by ``inner``."""

    def __init__(self, st: Any, inner: Callable[..., Any] | None = None) -> None:
        """``st``: the app's ``ServerState``; ``inner``: the Flask app's ``wsgi_app``."""
        self.st, self.inner = st, inner
        self._tokens: list[bytes] | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if self.inner is not None and (environ.get("REQUEST_METHOD") != "POST"
                                       or environ.get("PATH_INFO") != PATH):
            return cast("Iterable[bytes]", self.inner(environ, start_response))
        t0 = time.perf_counter()
        status, headers, body = self.answer(environ)
        headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                    ("X-Content-Type-Options", "nosniff"), ("Content-Security-Policy", API_CSP)]
        start_response(REASONS.get(status) or str(status), headers)
        self.st.metrics.observe_request(ENDPOINT, status, time.perf_counter() - t0)
        return [body]

    # --- the steps ------------------------------------------------------------------------------
    def answer(self, environ: dict[str, Any]) -> Answer:
        """(status, headers, JSON body) of one request; never raises."""
        st = self.st
        if st.live.poll_in_background():  # a forked worker: its poller starts, first read awaited
            st.live.first_read()
        config = st.live.config
        try:
            try:
                status, doc = self._accept(environ)
            except Rejection as rej:
                status, doc = self._rejected(environ, rej)
            headers = [(HINT_HEADER, campaigns_digest(config))]
        except Refused as ref:
            status, doc = ref.status, {"error": ref.error, "detail": ref.detail}
            headers = [*ref.headers.items(), (HINT_HEADER, campaigns_digest(config))]
        except (redis.RedisError, SlotNotCoveredError) as exc:
            log.warning("redis unavailable: %s", exc)
            st.metrics.reject(None, "redis_unavailable")
            status, doc = 503, {"error": "unavailable", "detail": "storage is unavailable; retry later"}
            headers = [("Retry-After", "1")]
        except Exception:
            log.exception("unhandled error in POST %s", PATH)
            status, doc, headers = 500, {"error": "internal_error", "detail": "unexpected server error"}, []
        return status, headers, _json(doc)

    def _accept(self, environ: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        st = self.st
        token_id = self._authenticate(environ)
        srv = st.config.server
        environ["ldptel.body_read"] = False
        if _mimetype(environ) not in PROTOBUF_TYPES:
            raise Rejection(415, "unsupported_media_type", "Content-Type must be application/x-protobuf, "
                            f"got {_mimetype(environ) or 'none'}", "content_type")
        length = get_content_length(environ)
        if length is not None and length > srv.max_body_bytes:
            raise Rejection(413, "too_large", f"request body exceeds {srv.max_body_bytes} bytes",
                            "body_too_large")
        token = redemption.token_of(environ)  # a PrivateToken (issue 37): 401 bad_token if malformed
        address = environ["ldptel.address"]
        limited = st.rate_limiter.check_address(address)
        if limited:
            environ["ldptel.retry_after"] = limited
            raise Rejection(429, "rate_limited", f"over {srv.rate_limit_per_address_per_minute} requests per "
                            "minute from this address", "rate_limited")
        allowed, retry_after = (True, 0) if token is not None else st.rate_limiter.check(token_id)
        if not allowed:
            environ["ldptel.retry_after"] = retry_after
            raise Rejection(429, "rate_limited", f"over {srv.rate_limit_per_minute} requests per minute "
                            "for this token", "rate_limited")
        body = st.body_guard.read(environ, srv.max_body_bytes, address)
        environ["ldptel.body_read"] = True
        valid = validate(st, body)
        now = time.time()
        if len(valid) == 1 and schema_version_of(body) != ENVELOPES_SCHEMA_VERSION:
            one = valid[0]
            window = keys.window_start(now, one.campaign.window_seconds) if one.window is None else one.window
            spent = redemption.redeem(st.config, one.campaign, token, window, one.count, now)
            return self._store(one, spent)
        # a SealedEnvelopes body: each envelope stored on its own (its batch id, shard, group), the
        # INGEST calls in one round trip; an ingress_full answer refuses the body (what was stored
        # of it is deduplicated when the device sends it again). A Privacy Pass token covers one
        # envelope posted alone; an envelope of a campaign that requires one refuses the body (401)
        if token is not None:
            raise Rejection(400, "invalid_batch", "a Privacy Pass token covers one envelope: post each "
                            "token-bearing envelope alone (a SealedBatch, schema_version 2), not in a "
                            "SealedEnvelopes body", "invalid_batch")
        for one in valid:
            redemption.redeem(st.config, one.campaign, None, int(one.window or 0), one.count, now)
        calls = [self._ingest_call(one) for one in valid]
        entries = scripts.of(self.st.collector_redis).call_many("INGEST", [c[:2] for c in calls])
        accepted = duplicates = 0
        for one, (_, _, window), entry in zip(valid, calls, entries, strict=True):
            _, doc = self._answer(one, window, entry)
            accepted += doc["accepted"]
            duplicates += bool(doc["duplicate"])
        return 202, {"accepted": accepted, "duplicate": duplicates == len(valid), "envelopes": len(valid),
                     "duplicates": duplicates}

    def _ingest_call(self, valid: ValidBatch, spent: bytes | None = None) -> tuple[list[Any], list[Any], int]:
        """The ``scripts.INGEST`` keys and args of ``valid``, and its window; on the shard of its
        batch id, or of ``spent`` (a redeemed token's digest: a token always meets one spent set)."""
        camp, cfg = valid.campaign, self.st.config
        shard = keys.shard_of(valid.batch_id if spent is None else spent, camp.shards)
        now = time.time()
        window = keys.window_start(now, camp.window_seconds) if valid.window is None else valid.window
        shuffled = cfg.shuffler.enabled
        target = keys.ingress_key if shuffled else keys.stream_key
        top = keys.ingress_top_key if shuffled else keys.stream_top_key
        script_keys = [keys.seen_key(camp.name, shard, valid.batch_id), target(camp.name, shard),
                       keys.metrics_key(camp.name, shard), top(camp.name, shard)]
        args: list[Any] = [keys.dedupe_expire_at(now, camp.window_seconds), valid.data, window, valid.count]
        if shuffled:  # the bound is per (version, window, cell) group (issue 34)
            script_keys.append(keys.ingress_groups_key(camp.name, shard))
            args += [cfg.shuffler.max_ingress_batches, keys.ingress_group(camp.version, window, valid.cell)]
            if isinstance(valid, SealedValid):  # what still needs its analyzer key (``store.key_refs``)
                script_keys.append(keys.sealed_keys_key(camp.name, shard))
                args.append(f"{valid.key_id:08x}")
        return script_keys, args, window

    def _store(self, valid: ValidBatch, spent: bytes | None = None) -> tuple[int, dict[str, Any]]:
        """Store ``valid``; with ``spent`` (a redeemed token's digest) through ``INGEST_TOKEN``, on
        the token's shard, refusing a token already spent (409)."""
        st = self.st
        camp, cfg = valid.campaign, st.config
        script_keys, args, window = self._ingest_call(valid, spent)
        if spent is None:
            entry = scripts.of(st.collector_redis).call("INGEST", keys=script_keys, args=args)
        else:
            shard = keys.shard_of(spent, camp.shards)
            entry = scripts.of(st.collector_redis).call(
                "INGEST_TOKEN", keys=[keys.spent_key(camp.name, shard, window), *script_keys],
                args=[spent, redemption.spent_expire_at(camp, window, cfg, time.time()), *args])
            if entry == b"spent":
                st.metrics.reject(camp.name, "token_spent")
                raise Refused(409, "token_spent", {"campaign": camp.name, "window": window,
                                                   "reason": "this Privacy Pass token was already redeemed: "
                                                             "one token per envelope, never reused"})
        return self._answer(valid, window, entry)

    def _answer(self, valid: ValidBatch, window: int, entry: Any) -> tuple[int, dict[str, Any]]:
        """The answer to one stored batch (``Refused`` 503 when its ingress group is full)."""
        st, camp = self.st, valid.campaign
        bound = st.config.shuffler.max_ingress_batches
        if entry == b"full":  # a stopped shuffler, or a group below batch_min: refused, never trimmed
            st.metrics.reject(camp.name, "ingress_full")
            raise Refused(503, "ingress_full", {
                "campaign": camp.name, "version": camp.version, "window": window,
                "cell": dict(valid.cell), "ingress_batches": bound,
                "reason": f"this (version, window, cell) group of campaign {camp.name!r} holds "
                          f"{bound} batches not yet shuffled (a stopped shuffler, or a group below "
                          "batch_min until its window closes); the other groups are not refused; "
                          "retry later"}, {"Retry-After": str(INGRESS_FULL_RETRY_S)})
        if entry is None:
            return 202, {"accepted": 0, "duplicate": True}
        return 202, {"accepted": valid.count, "duplicate": False}

    def _rejected(self, environ: dict[str, Any], rej: Rejection) -> tuple[int, dict[str, Any]]:
        """Count ``rej``, drain the unread body, raise its ``Refused``."""
        self.st.metrics.reject(rej.campaign, rej.reason)
        headers: dict[str, str] = {}
        if rej.status == 429:
            headers["Retry-After"] = str(environ.get("ldptel.retry_after", 1))
        elif rej.status == 503:
            headers["Retry-After"] = str(UNAVAILABLE_RETRY_S)
        if rej.reason == "unfinished_bodies":
            headers["Connection"] = "close"  # its body may be stalled too: never drained here
            headers["Retry-After"] = "1"
        elif not environ.get("ldptel.body_read") and not drain_environ(environ):  # the client reads it
            headers["Connection"] = "close"
        raise Refused(rej.status, rej.error, rej.detail, headers)

    # --- authentication (``auth.require_token("ingest")``, without Flask) -----------------------
    def _authenticate(self, environ: dict[str, Any]) -> str:
        """The token id of a valid ingest token, else ``Refused`` 401 / 429 (the body is not read:
        the server discards it before the connection's next request)."""
        st = self.st
        throttle: AuthThrottle = st.auth_throttle
        address = environ["ldptel.address"] = st.client_address.of_environ(environ)
        wait = throttle.blocked(address)
        header = environ.get("HTTP_AUTHORIZATION", "")
        if not wait and header[:13].lower() == "privatetoken ":  # issue 37: checked after validation
            return "privacy-pass"
        token = bearer(header)
        if not wait:
            presented = hashlib.sha256((token or "").encode("utf-8", "surrogatepass")).digest()
            ok = False
            for allowed in self.tokens():
                ok |= hmac.compare_digest(presented, allowed)
            if ok and token is not None:
                return presented.hex()[:24]
            wait = 0 if token is None else throttle.failed(address, token)
        if wait:
            st.metrics.reject(None, "auth_throttled")
            raise Refused(429, "too_many_failures", f"too many failed authentications; retry in {wait} s",
                          {"Retry-After": str(wait)})
        st.metrics.reject(None, "unauthorized")
        raise Refused(401, "unauthorized", "missing bearer token" if token is None else "invalid token",
                      {"WWW-Authenticate": 'Bearer realm="ldptel"'})

    def tokens(self) -> list[bytes]:
        if self._tokens is None:
            self._tokens = [hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest()
                            for t in self.st.config.server.ingest_tokens]
        return self._tokens


def bearer(header: str) -> str | None:
    """The token of ``Authorization: Bearer …`` (``auth.bearer_token``)."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


__all__ = ["ENDPOINT", "HINT_HEADER", "PROTOBUF_TYPES", "ReportRoute", "bearer"]
