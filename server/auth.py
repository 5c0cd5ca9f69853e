"""Bearer-token authentication (``Authorization: Bearer <token>``).

Token kinds are the config's lists: ``"ingest"`` (apps, ``server.ingest_tokens``) and ``"export"``
(data teams and operators, ``server.export_tokens``) and ``"admin"`` (changing campaigns,
``server.admin_tokens``). The comparison is constant-time: the SHA-256
of the presented token is compared with ``hmac.compare_digest`` against the digest of every
configured token of the kind, without stopping at a match, so neither a token's content, its
length nor its position in the list shows in the timing.

    @bp.get("/v1/campaigns/<name>/estimates")
    @require_token("export")
    def estimates(name): ...

After a successful check ``g.ldptel_token_id`` holds a short digest of the token (for per-token
rate limits; ``config.token_digest``) and ``g.ldptel_token_name`` the name an admin token was given
(``[server] admin_tokens = [{name, token}]``), else ``"<kind> token <8 hex of the digest>"``, for the
campaign history; the token itself is never stored.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Callable
from typing import Any, cast

from flask import current_app, g, request

from ldptel.server.app import state
from ldptel.server.errors import ApiError

KINDS = ("ingest", "export", "admin")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _allowed(kind: str) -> list[bytes]:
    cache = current_app.extensions.setdefault("ldptel_token_digests", {})
    if kind not in cache:
        cfg = current_app.extensions["ldptel"].config.server
        tokens = {"ingest": cfg.ingest_tokens, "export": cfg.export_tokens, "admin": cfg.admin_tokens}[kind]
        cache[kind] = [_digest(t) for t in tokens]
    return cast("list[bytes]", cache[kind])


def bearer_token() -> str | None:
    """The token of the request's ``Authorization: Bearer …`` header, if any."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def token_ok(token: str | None, kind: str) -> bool:
    """Constant-time check of ``token`` against every configured token of ``kind``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    presented = _digest(token or "")
    ok = False
    for allowed in _allowed(kind):
        ok |= hmac.compare_digest(presented, allowed)
    return ok and token is not None


def authenticate(*kinds: str) -> bool:
    """True if the request carries a valid token of one of ``kinds``; sets ``g.ldptel_token_id``
    and ``g.ldptel_token_kind``."""
    token = bearer_token()
    if token is None:
        return False
    for kind in kinds:
        if token is not None and token_ok(token, kind):
            g.ldptel_token_id = _digest(token).hex()[:24]
            g.ldptel_token_kind = kind
            names = current_app.extensions["ldptel"].config.server.admin_names
            g.ldptel_token_name = names.get(g.ldptel_token_id, f"{kind} token {g.ldptel_token_id[:8]}")
            return True
    return False


def throttled(wait: int) -> ApiError:
    """429 ``too_many_failures`` with ``Retry-After: wait``."""
    return ApiError(429, "too_many_failures",
                    f"too many failed authentications; retry in {wait} s", {"Retry-After": str(wait)})


def require_token(*kinds: str) -> Callable[..., Any]:
    """View decorator: raises ``ApiError`` 401 ``unauthorized`` unless the request carries a valid
    bearer token of one of ``kinds`` (``"ingest"``, ``"export"``); 429 ``too_many_failures``
    when failed attempts from the client's address or with the token's prefix are throttled
    (``ldptel.server.throttle``)."""
    if not kinds or any(k not in KINDS for k in kinds):
        raise ValueError(f"require_token takes token kinds from {KINDS}, got {kinds!r}")

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def wrapped(*args: Any, **kwargs: Any):
            throttle = state().auth_throttle
            wait = throttle.blocked(request.remote_addr)
            if not wait and not authenticate(*kinds):
                token = bearer_token()
                wait = 0 if token is None else throttle.failed(request.remote_addr, token)
                if not wait:
                    state().metrics.reject(None, "unauthorized")
                    detail = "missing bearer token" if token is None else "invalid token"
                    raise ApiError(401, "unauthorized", detail, {"WWW-Authenticate": 'Bearer realm="ldptel"'})
            if wait:
                state().metrics.reject(None, "auth_throttled")
                raise throttled(wait)
            return view(*args, **kwargs)

        return wrapped

    return decorator
