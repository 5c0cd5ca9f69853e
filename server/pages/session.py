"""Operator sessions: the signed cookie, its server-side record, the secret, CSRF tokens, security
headers.

The cookie (``ldptel_session``: HttpOnly, SameSite=Lax, Secure when the request came over HTTPS)
is signed and holds a random session id and the CSRF token, never the export token. A signed-in
session is a Redis key (``keys.session_key`` of the id's SHA-256) holding an HMAC of the export
token; it expires after ``server.session_idle_seconds`` without a request (renewed by each one)
and is deleted at sign-out, so a replayed cookie is no session. The cookie itself is good for
``SESSION_HOURS`` after sign-in (not renewed), and removing a token from the config signs its
sessions out. POST forms carry a per-session CSRF token in a hidden field. The signing secret is
``server.secret_key`` or, if unset, one random key created once in Redis (``SET NX``) so that
every gunicorn worker signs with the same key.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import threading
from datetime import timedelta
from urllib.parse import unquote, urlsplit

import redis as redis_lib
from flask import Flask, Request, Response, current_app, g, request, session, url_for
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from werkzeug.urls import iri_to_uri

from ldptel.keys import SESSION_SECRET_KEY, session_key
from ldptel.server.app import state

log = logging.getLogger("ldptel.server.pages")

SESSION_HOURS = 12


class OperatorSessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, with the secret loaded lazily from Redis when the config
    has none, ``Secure`` set per request (HTTPS), and no signing work for requests without a
    session cookie (the ingest path)."""

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if not request.cookies.get(self.get_cookie_name(app)):
            return self.session_class()
        if not app.secret_key and not load_secret(app):
            return self.session_class()
        return super().open_session(app, request)

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(request.is_secure)


_secret_lock = threading.Lock()


def load_secret(app: Flask) -> bool:
    """Set ``app.secret_key`` from Redis, creating it once (``SET NX``) if no worker did yet.
    False if Redis is unavailable (sessions then wait for it)."""
    with _secret_lock:
        if app.secret_key:
            return True
        r = app.extensions["ldptel"].sessions_redis
        try:
            r.set(SESSION_SECRET_KEY, secrets.token_hex(32), nx=True)
            value = r.get(SESSION_SECRET_KEY)
        except redis_lib.RedisError as exc:
            log.warning("operator sessions: cannot load the session secret from Redis: %s", exc)
            return False
        app.secret_key = value.decode() if isinstance(value, bytes) else value
        return bool(app.secret_key)


def install_sessions(app: Flask) -> None:
    """Cookie settings and the session interface of ``app`` (once, at blueprint registration)."""
    app.config.update(SESSION_COOKIE_NAME="ldptel_session", SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Lax", SESSION_REFRESH_EACH_REQUEST=False,
                      PERMANENT_SESSION_LIFETIME=timedelta(hours=SESSION_HOURS))
    app.session_interface = OperatorSessionInterface()
    if not app.secret_key:
        load_secret(app)


def token_id(token: str) -> str:
    """What the session keeps of a token: an HMAC under the session secret (not reversible
    without the secret, unlike a bare hash in a readable cookie). Needs the app's secret key."""
    key = current_app.secret_key or b""
    key = key.encode() if isinstance(key, str) else key
    return hmac.new(key, b"operator-token:" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest(),
                    hashlib.sha256).hexdigest()[:40]


def _record_key() -> str | None:
    """The Redis key of this request's session id, if the cookie carries one."""
    sid = session.get("sid")
    return _sid_key(sid) if isinstance(sid, str) else None


def _sid_key(sid: str) -> str:
    return session_key(hashlib.sha256(sid.encode()).hexdigest())


def signed_in() -> bool:
    """True if the session's server-side record exists (renewing its idle timeout) and belongs to
    a currently configured export token. Read from Redis once per request."""
    if "ldptel_signed_in" in g:
        return bool(g.ldptel_signed_in)
    key, ok = _record_key(), False
    if key is not None and current_app.secret_key:
        # read and renew
        held = state().sessions_redis.getex(key, ex=state().config.server.session_idle_seconds)
        held = held.decode() if isinstance(held, bytes) else ""
        for token in state().config.server.export_tokens:
            ok |= hmac.compare_digest(held, token_id(token))
    g.ldptel_signed_in = ok
    return ok


def sign_in(token: str) -> None:
    """A fresh signed-in session for ``token`` (already checked): a new id recorded in Redis for
    the idle timeout, and a new CSRF token; a session this cookie held before is ended."""
    old = _record_key()
    if old is not None:
        state().sessions_redis.delete(old)
    session.clear()
    session.permanent = True
    sid = session["sid"] = secrets.token_urlsafe(32)
    session["csrf"] = secrets.token_urlsafe(32)
    state().sessions_redis.set(_sid_key(sid), token_id(token), ex=state().config.server.session_idle_seconds)
    g.ldptel_signed_in = True


def sign_out() -> None:
    """End the session: delete its record (a replayed cookie is then no session) and the cookie."""
    key = _record_key()
    if key is not None:
        state().sessions_redis.delete(key)
    session.clear()
    g.ldptel_signed_in = False


def csrf_token() -> str:
    """This session's CSRF token (created on first use)."""
    tok = session.get("csrf")
    if not isinstance(tok, str):
        tok = secrets.token_urlsafe(32)
        session["csrf"] = tok
    return tok


def csrf_ok() -> bool:
    """True if the posted form carries this session's CSRF token."""
    sent, held = request.form.get("csrf_token", ""), session.get("csrf")
    return isinstance(held, str) and hmac.compare_digest(sent.encode(), held.encode())


UNSAFE_IN_NEXT = re.compile(r"[\x00-\x20\x7f\\]")  # controls, space, backslash


def safe_next(target: str | None) -> str:
    """A same-origin absolute path to return to after sign-in, else the campaigns page.

    Checked is the value the ``Location`` header will carry (Werkzeug's ``iri_to_uri`` of it,
    which drops tabs and newlines), and its percent-decoded form: both must start with one ``/``
    (not ``//`` or ``/\\``), have no scheme or host, and neither may hold a control character,
    space or backslash (nor may the raw value: a browser strips those too)."""
    home = url_for("pages.campaigns")
    if not target or UNSAFE_IN_NEXT.search(target):
        return home
    sent = iri_to_uri(target)
    for form in (sent, unquote(sent)):
        parts = urlsplit(form)
        if (not form.startswith("/") or form.startswith(("//", "/\\")) or UNSAFE_IN_NEXT.search(form)
                or parts.scheme or parts.netloc or form.startswith("/signin")):
            return home
    return sent


def security_headers(resp: Response, nonce: str, cacheable: bool) -> Response:
    """CSP (scripts only with this response's ``nonce``), no framing, no sniffing, same-origin
    referrers; ``Cache-Control: no-store`` unless ``cacheable`` (static files)."""
    resp.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "same-origin"
    if not cacheable:
        resp.headers["Cache-Control"] = "no-store"
    return resp
