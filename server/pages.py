"""Operator pages (DESIGN §3): ``GET /`` (campaigns) and ``GET /campaigns/<name>``, server-rendered
with inline SVG charts (``server/charts.py``), no external assets.

Sign-in: ``/signin`` takes an export token and starts a signed session cookie (``ldptel_session``:
HttpOnly, SameSite=Lax, Secure when the request came over HTTPS, 12 h). The cookie holds an HMAC
of the token, not the token; removing a token from the config signs its sessions out. Every page
but ``/signin`` redirects there without a session (the JSON endpoint answers 401). POST forms
(sign-in, sign-out) carry a per-session CSRF token in a hidden field, checked on POST. The
signing secret is ``server.secret_key`` or, if unset, one random key created once in Redis
(``SET NX``) so that every gunicorn worker signs with the same key.

The numbers come from the functions behind the export API — ``export.estimate_document`` (with
its cache) for frequency campaigns, the query module's cached estimate for heavy hitters, ranges
and quantiles — so the page and the API agree exactly; downloads serve the export API's own
responses to signed-in users. Nothing is computed or shown while a window has fewer than the
campaign's ``min_reports``.

Auto-refresh: a small inline script polls ``…/live`` (same query string) every
``REFRESH_SECONDS`` and swaps the HTML fragments it returns; estimates are re-rendered only
when the window's state changed (``version``).
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import numpy as np
import redis as redis_lib
from flask import (
    Blueprint,
    Flask,
    Response,
    current_app,
    g,
    jsonify,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask.sessions import SecureCookieSessionInterface
from markupsafe import Markup

from ldptel import keys, scripts
from ldptel.aggregator import store
from ldptel.client.mechanisms.base import Z95
from ldptel.config import Campaign
from ldptel.server import charts, export, queries
from ldptel.server.app import state
from ldptel.server.auth import token_ok

log = logging.getLogger("ldptel.server.pages")

bp = Blueprint("pages", __name__, template_folder="templates", static_folder="static",
               static_url_path="/operator-static")

SESSION_HOURS = 12
REFRESH_SECONDS = 5
TOP_N = 25  # items shown before "show all"
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
CDF_POINTS = 512  # points of the CDF line and band on the chart
CDF_CSV_POINTS = 4096
MAX_WINDOWS = 500  # newest windows offered in the selector
PUBLIC_ENDPOINTS = {"pages.signin", "pages.signin_post", "pages.static"}

KIND_LABELS = {"frequency": "Frequency", "heavy_hitters": "Heavy hitters", "range": "Range"}
ORACLE_LABELS = {"grr": "GRR (direct encoding)", "sue": "SUE (basic RAPPOR)", "oue": "OUE (optimized unary)",
                 "olh": "OLH (local hashing)", "hadamard": "Hadamard response"}


# --- session secret, cookie and CSRF ---------------------------------------------------------

class OperatorSessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, with the secret loaded lazily from Redis when the config
    has none, ``Secure`` set per request (HTTPS), and no signing work for requests without a
    session cookie (the ingest path)."""

    def open_session(self, app: Flask, request):  # type: ignore[override]
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
        r = app.extensions["ldptel"].redis
        try:
            r.set(keys.SESSION_SECRET_KEY, secrets.token_hex(32), nx=True)
            value = r.get(keys.SESSION_SECRET_KEY)
        except redis_lib.RedisError as exc:
            log.warning("operator sessions: cannot load the session secret from Redis: %s", exc)
            return False
        app.secret_key = value.decode() if isinstance(value, bytes) else value
        return bool(app.secret_key)


@bp.record_once
def _setup(setup_state) -> None:
    app: Flask = setup_state.app
    app.config.update(SESSION_COOKIE_NAME="ldptel_session", SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Lax",
                      PERMANENT_SESSION_LIFETIME=timedelta(hours=SESSION_HOURS))
    app.session_interface = OperatorSessionInterface()
    if not app.secret_key:
        load_secret(app)


def _token_id(token: str) -> str:
    """What the session keeps of a token: an HMAC under the session secret (not reversible
    without the secret, unlike a bare hash in a readable cookie)."""
    key = current_app.secret_key
    key = key.encode() if isinstance(key, str) else key
    return hmac.new(key, b"operator-token:" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest(),
                    hashlib.sha256).hexdigest()[:40]


def signed_in() -> bool:
    """True if the session belongs to a currently configured export token."""
    held = session.get("auth")
    if not isinstance(held, str) or not current_app.secret_key:
        return False
    ok = False
    for token in state().config.server.export_tokens:
        ok |= hmac.compare_digest(held, _token_id(token))
    return ok


def csrf_token() -> str:
    """This session's CSRF token (created on first use)."""
    tok = session.get("csrf")
    if not isinstance(tok, str):
        tok = secrets.token_urlsafe(32)
        session["csrf"] = tok
    return tok


def csrf_ok() -> bool:
    sent, held = request.form.get("csrf_token", ""), session.get("csrf")
    return isinstance(held, str) and hmac.compare_digest(sent.encode(), held.encode())


def _safe_next(target: str | None) -> str:
    """A same-site path to return to after sign-in (never another host)."""
    if (not target or not target.startswith("/") or target.startswith("//") or "\\" in target
            or target.startswith("/signin")):
        return url_for("pages.campaigns")
    return target


@bp.before_request
def _guard():
    g.csp_nonce = secrets.token_urlsafe(16)
    if request.endpoint == "pages.static":
        return None
    if not current_app.secret_key and not load_secret(current_app):
        return _unavailable()
    if request.endpoint in PUBLIC_ENDPOINTS or signed_in():
        return None
    if request.endpoint in ("pages.campaigns_live", "pages.campaign_live"):
        return jsonify({"error": "unauthorized", "detail": "sign in again"}), 401
    nxt = request.full_path.rstrip("?") if request.method == "GET" else None
    return redirect(url_for("pages.signin", next=nxt) if nxt and nxt != "/" else url_for("pages.signin"))


@bp.after_request
def _headers(resp: Response) -> Response:
    nonce = g.get("csp_nonce", "")
    resp.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "same-origin"
    if request.endpoint != "pages.static":
        resp.headers["Cache-Control"] = "no-store"
    return resp


@bp.errorhandler(redis_lib.RedisError)
def _redis_down(exc: redis_lib.RedisError):
    log.warning("operator page: redis unavailable: %s", exc)
    return _unavailable()


def _unavailable():
    if request.endpoint in ("pages.campaigns_live", "pages.campaign_live"):
        return jsonify({"error": "unavailable", "detail": "storage is unavailable; retrying"}), 503
    return render_template("operator_error.html", title="Storage unavailable", status=503,
                           message="The server cannot reach its Redis storage right now. "
                                   "This page retries by itself every few seconds.",
                           retry=True), 503


@bp.context_processor
def _template_globals() -> dict:
    return {"csrf_token": csrf_token, "fmt": charts, "csp_nonce": lambda: g.get("csp_nonce", ""),
            "signed_in": request.endpoint not in PUBLIC_ENDPOINTS and signed_in()}


# --- sign-in -------------------------------------------------------------------------------

@bp.get("/signin")
def signin():
    if signed_in():
        return redirect(_safe_next(request.args.get("next")))
    csrf_token()
    return render_template("operator_signin.html", next=_safe_next(request.args.get("next")),
                           signed_out=request.args.get("signed_out") == "1")


@bp.post("/signin")
def signin_post():
    nxt = _safe_next(request.form.get("next"))
    if not csrf_ok():
        session.pop("csrf", None)
        csrf_token()
        return render_template("operator_signin.html", next=nxt,
                               error="This sign-in form expired or your browser did not keep its "
                                     "cookie. Please try again (cookies must be enabled)."), 400
    token = request.form.get("token", "").strip()
    if not token_ok(token or None, "export"):
        return render_template("operator_signin.html", next=nxt,
                               error="That token is not a valid export token."), 401
    session.clear()
    session.permanent = True
    session["auth"] = _token_id(token)
    session["csrf"] = secrets.token_urlsafe(32)
    return redirect(nxt)


@bp.post("/signout")
def signout():
    if not csrf_ok():
        return render_template("operator_error.html", title="Sign-out not confirmed", status=400,
                               message="The sign-out form expired. Go back, reload the page and try "
                                       "again."), 400
    session.clear()
    return redirect(url_for("pages.signin", signed_out=1))


# --- cheap per-campaign numbers ----------------------------------------------------------------

RATE_GAP_MS = 2000
RATE_SPAN_S = 60.0


def ingest_rate(r: redis_lib.Redis, name: str, accepted: int, now: float) -> float | None:
    """Accepted reports per second over about the last minute, from samples of the collector's
    counter that every page view records in Redis (shared by all workers); None until two
    samples at least ``RATE_GAP_MS`` apart exist."""
    now_ms = int(now * 1000)
    rows = r.eval(scripts.INGEST_RATE_SAMPLE, 1, keys.ingest_rate_key(name), now_ms, accepted,
                  RATE_GAP_MS, 64)
    samples = [tuple(int(x) for x in (row.decode() if isinstance(row, bytes) else row).split(":"))
               for row in rows]
    older = [(t, c) for t, c in samples if RATE_GAP_MS <= now_ms - t <= RATE_SPAN_S * 1000 + 5000]
    if not older:
        older = [(t, c) for t, c in samples if now_ms - t >= RATE_GAP_MS][:1]
    if not older:
        return None
    t0, c0 = min(older)
    return max(0.0, (accepted - c0) / ((now_ms - t0) / 1000.0))


@dataclass
class Status:
    """What the campaigns list and a campaign's header show; no decoding."""

    campaign: Campaign
    windows: dict[int, int]  # window → reports counted
    counted: int
    current_window: int
    current_reports: int
    accepted: int  # reports the collector stored
    lag_entries: int  # stream entries (batches) accepted but not yet counted
    lag_reports: int | None
    rate: float | None
    updated: float | None

    @property
    def released(self) -> bool:
        return self.current_reports >= self.campaign.min_reports


def campaign_status(r: redis_lib.Redis, campaign: Campaign, now: float | None = None) -> Status:
    now = time.time() if now is None else now
    summ = store.summary(r, campaign)
    cur = store.current_window(campaign, now)
    return Status(campaign=campaign, windows=summ.windows, counted=sum(summ.windows.values()),
                  current_window=cur,
                  current_reports=summ.windows.get(cur, 0), accepted=summ.accepted_reports,
                  lag_entries=summ.lag_entries, lag_reports=summ.lag_reports,
                  rate=ingest_rate(r, campaign.name, summ.accepted_reports, now), updated=summ.updated)


# --- descriptions ------------------------------------------------------------------------------

def mechanism_label(c: Campaign) -> str:
    if c.kind == "heavy_hitters":
        return f"Prefix tree + OLH ({c.params.get('levels')} levels)"
    if c.kind == "range":
        if c.params.get("method") == "hierarchical":
            b = c.params.get("branching")
            return "Hierarchical tree" + (f" (B = {b})" if b else "")
        return "Haar wavelet"
    if c.oracle == "rappor":
        p = c.params
        return f"RAPPOR ({p['bloom_bits']}-bit Bloom, {p['hashes']} hashes, {p['cohorts']} cohorts)"
    return ORACLE_LABELS.get(c.oracle or "", (c.oracle or "").upper())


def domain_label(c: Campaign) -> str:
    if c.kind == "heavy_hitters":
        return f"strings up to {c.params.get('max_length')} bytes"
    if c.kind == "range":
        return f"values 0 to {charts.fmt_count((c.domain_size or 1) - 1)}"
    if c.oracle == "rappor":
        return f"{len(c.params['candidates']):,} candidate strings"
    if c.domain is not None:
        return f"{len(c.domain):,} labels"
    return f"{c.domain_size:,} items (0 to {c.domain_size - 1:,})" if c.domain_size else ""


def epsilon_note(c: Campaign) -> Markup:
    """What ε means for this campaign, in plain words."""
    eps = float(c.epsilon or 0)
    e = charts.fmt_eps(eps)
    ratio = math.exp(eps)
    ratio_s = f"{ratio:,.1f}" if ratio < 100 else f"{ratio:,.0f}"
    what = {"heavy_hitters": "one prefix of its string",
            "range": "one coefficient of its value"}.get(c.kind, "its value")
    text = Markup(
        "Each device sends {what}, randomized on the device with ε = {e} per report. Whatever a device's "
        "true value, no report is more than e<sup>{e}</sup> ≈ {ratio} times as likely under it as under "
        "any other value, so a single report says little about its sender. Only counts over many devices "
        "carry signal; the error bars show the noise that remains. Smaller ε means more privacy and wider "
        "error bars.").format(what=what, e=e, ratio=ratio_s)
    if c.oracle == "rappor":
        text += Markup(" RAPPOR reuses the same noise for the same value, so a device that reports one value "
                       "again and again reveals at most ε∞ = {} in total.").format(
                           charts.fmt_eps(c.params.get("epsilon_inf")))
    elif c.window != "all":
        text += " A device that reports again in a later window spends another ε."
    return text


def window_label(c: Campaign, w: int) -> str:
    if c.window_seconds == 0:
        return "All time"
    start = datetime.fromtimestamp(w, UTC)
    if c.window_seconds == 3600:
        end = start + timedelta(hours=1)
        return f"{start:%Y-%m-%d %H:%M}–{end:%H:%M} UTC"
    return f"{start:%Y-%m-%d} (UTC day)"


def ago(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "never"
    dt = max(0.0, (time.time() if now is None else now) - ts)
    if dt < 5:
        return "just now"
    if dt < 60:
        return f"{int(dt)} s ago"
    if dt < 3600:
        return f"{int(dt // 60)} min ago"
    if dt < 86400:
        return f"{int(dt // 3600)} h ago"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def utc(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def status_view(st: Status) -> dict:
    """Display strings of a ``Status``."""
    c = st.campaign
    if st.lag_entries == 0:
        lag = "up to date"
    else:
        lag = f"{st.lag_entries:,} batch{'es' if st.lag_entries != 1 else ''} waiting"
        if st.lag_reports:
            lag += f" ({charts.fmt_count(st.lag_reports)} reports)"
    eps = charts.fmt_eps(c.epsilon)
    return {
        "name": c.name, "kind": KIND_LABELS.get(c.kind, c.kind), "mechanism": mechanism_label(c),
        "domain": domain_label(c), "description": c.description,
        "epsilon": eps,
        "epsilon_inf": charts.fmt_eps(c.params.get("epsilon_inf")) if c.oracle == "rappor" else None,
        "counted": charts.fmt_count(st.counted), "accepted": charts.fmt_count(st.accepted),
        "current_window": window_label(c, st.current_window),
        "current_reports": charts.fmt_count(st.current_reports), "current_n": st.current_reports,
        "rate": "measuring…" if st.rate is None else
        "0 reports/s" if st.rate == 0 else f"{charts.fmt_rate(st.rate)} reports/s",
        "lag": lag, "lag_ok": st.lag_entries == 0,
        "updated": ago(st.updated), "updated_utc": utc(st.updated),
        "min_reports": charts.fmt_count(c.min_reports), "released": st.released,
        "progress": min(1.0, st.current_reports / max(c.min_reports, 1)),
    }


# --- campaigns list ------------------------------------------------------------------------------

def _list_rows() -> list[dict]:
    st = state()
    now = time.time()
    return [status_view(campaign_status(st.redis, c, now)) for c in st.config.campaigns]


@bp.get("/")
def campaigns():
    rows = _list_rows()
    return render_template("operator_campaigns.html", rows=rows, live_url=url_for("pages.campaigns_live"),
                           version="", refresh=REFRESH_SECONDS)


@bp.get("/live")
def campaigns_live():
    html = render_template("operator_campaign_rows.html", rows=_list_rows())
    return jsonify({"version": "", "fragments": {"rows": html}})


# --- one campaign --------------------------------------------------------------------------------

class PageArgs:
    """The campaign page's query parameters (kept across links and by the auto-refresh)."""

    KEYS = ("window", "view", "sort", "show", "lo", "hi")

    def __init__(self, args) -> None:
        self.window = args.get("window") or "latest"
        self.view = "normalized" if args.get("view") == "normalized" else "raw"
        self.sort = "item" if args.get("sort") == "item" else "estimate"
        self.show_all = args.get("show") == "all"
        self.lo, self.hi = args.get("lo", ""), args.get("hi", "")

    def query(self, **changes: Any) -> dict:
        cur = {"window": None if self.window == "latest" else self.window,
               "view": None if self.view == "raw" else self.view,
               "sort": None if self.sort == "estimate" else self.sort,
               "show": "all" if self.show_all else None, "lo": self.lo or None, "hi": self.hi or None}
        cur.update(changes)
        return {k: v for k, v in cur.items() if v not in (None, "")}

    def qs(self, **changes: Any) -> str:
        return "?" + urlencode(self.query(**changes))


def _campaign_or_404(name: str) -> Campaign | tuple:
    c = state().config.campaign(name)
    if c is None:
        return render_template("operator_error.html", title="Unknown campaign", status=404,
                               message=f"There is no campaign named “{name}”.", back=True), 404
    return c


def _version(c: Campaign, window: int, n: int) -> str:
    updated = store.last_updated(state().redis, c, window)
    return f"{window}:{n}:{0 if updated is None else int(updated * 1000)}"


def _frequency_doc(c: Campaign, window: int, acc) -> dict:
    """The export API's estimate document (same function, same cache)."""
    return export.cached_document(c, window, acc)[1]


def _row_view(rank: int, item: dict) -> dict:
    return {"rank": rank, "value": item["value"], "label": charts.display_label(item["value"]), **{
        k: item.get(k) for k in ("estimate", "std_error", "ci_low", "ci_high", "estimate_normalized",
                                 "z_score", "levels_used")}}


def frequency_context(c: Campaign, window: int, acc, a: PageArgs) -> dict:
    doc = _frequency_doc(c, window, acc)
    key = "estimate_normalized" if a.view == "normalized" else "estimate"
    order = list(range(len(doc["items"])))
    if a.sort == "estimate":
        order.sort(key=lambda i: -(doc["items"][i][key] if doc["items"][i][key] is not None else -math.inf))
    rows = [_row_view(r + 1, doc["items"][i]) for r, i in enumerate(order)]
    shown = rows if a.show_all else rows[:TOP_N]
    raw = a.view == "raw"
    chart = charts.bar_chart(
        [charts.Bar(r["label"], r[key], r["ci_low"] if raw else None, r["ci_high"] if raw else None)
         for r in shown],
        whiskers=raw, axis_label="devices" if a.show_all else
        "estimated devices" + (" (raw, with 95% CI)" if raw else " (normalized)"),
        sticky_axis=a.show_all, aria_label=f"Estimated devices per item for {c.name}")
    return {"rows": shown, "total_items": len(rows), "chart": chart, "view": a.view,
            "negatives": sum(1 for r in rows if (r["estimate"] or 0) < 0),
            "normalized_sum": sum(r["estimate_normalized"] or 0 for r in rows)}


def heavy_hitters_context(c: Campaign, window: int, acc, a: PageArgs) -> dict:
    est = queries.cached_estimate(c, window, acc)
    items = [queries.finite_row(row) for row in est.items()]
    rows = [_row_view(i + 1, it) for i, it in enumerate(items)]
    shown = rows if a.show_all else rows[:TOP_N]
    chart = charts.bar_chart(
        [charts.Bar(r["label"], r["estimate"], r["ci_low"], r["ci_high"]) for r in shown],
        axis_label="devices" if a.show_all else "estimated devices (with 95% CI)",
        sticky_axis=a.show_all, aria_label=f"Heavy hitters of {c.name}") if shown else None
    return {"rows": shown, "total_items": len(rows), "chart": chart, "width": c.params.get("width")}


def range_context(c: Campaign, window: int, acc, a: PageArgs) -> dict:
    est = queries.cached_estimate(c, window, acc)
    d = est.domain_size
    n = max(acc.n, 1)
    xs = np.unique(np.linspace(0, d - 1, min(d, CDF_POINTS)).round().astype(np.int64))
    F = est.cdf()
    se = est.ranges(np.zeros(xs.size, np.int64), xs)[1] / n
    lo_band = np.clip(F[xs] - Z95 * se, 0, 1)
    hi_band = np.clip(F[xs] + Z95 * se, 0, 1)
    qrows = [queries.finite_row(row) for row in est.quantiles(list(QUANTILES))]
    answer, error = None, None
    if a.lo != "" or a.hi != "":
        try:
            answer = queries.finite_row(est.range(*queries.range_params(c)))
            answer["share"] = (answer["estimate"] or 0) / n
        except queries.BadParameter as exc:
            error = str(exc)
    markers = [charts.Marker(float(r["value"]), f"{label} {charts.fmt_count(r['value'])}")
               for r, label in ((q, {0.5: "median", 0.9: "p90", 0.99: "p99"}.get(q["q"])) for q in qrows)
               if label]
    chart = charts.cdf_chart(xs.tolist(), F[xs].tolist(), lo_band.tolist(), hi_band.tolist(),
                             domain=(0, d - 1), markers=markers,
                             highlight=(answer["lo"], answer["hi"]) if answer else None,
                             x_label=f"value (0 to {charts.fmt_count(d - 1)})",
                             aria_label=f"Estimated CDF of {c.name}")
    return {"chart": chart, "quantiles": qrows, "answer": answer, "error": error, "domain_size": d,
            "method": est.method or c.params.get("method")}


CONTENT: dict[str, Callable[[Campaign, int, Any, PageArgs], dict]] = {
    "frequency": frequency_context, "heavy_hitters": heavy_hitters_context, "range": range_context}


def campaign_context(c: Campaign, a: PageArgs, with_content: bool = True) -> dict:
    """Everything the campaign page renders (``with_content=False``: header numbers only, no
    decoding; ``add_content`` completes it)."""
    r = state().redis
    window_error = None
    try:
        window = store.resolve_window(r, c, None if a.window == "latest" else a.window)
    except store.WindowError as exc:
        window_error = str(exc)[:1].upper() + str(exc)[1:]
        window = store.resolve_window(r, c, None)
    st = campaign_status(r, c)
    n = st.windows.get(window, 0)
    ctx: dict[str, Any] = {
        "c": c, "a": a, "s": status_view(st), "window": window, "window_label": window_label(c, window),
        "window_error": window_error, "n": n, "n_fmt": charts.fmt_count(n),
        "released": n >= c.min_reports, "epsilon_note": epsilon_note(c),
        "windows": [(w, window_label(c, w)) for w in sorted(st.windows, reverse=True)[:MAX_WINDOWS]],
        "version": _version(c, window, n), "progress": min(1.0, n / max(c.min_reports, 1)),
        "kind_label": KIND_LABELS.get(c.kind, c.kind), "mechanism": mechanism_label(c),
        "domain": domain_label(c),
        "window_updated": ago(store.last_updated(r, c, window)),
    }
    return add_content(ctx) if with_content else ctx


def add_content(ctx: dict) -> dict:
    """Decode the window and add the kind's numbers (nothing below the release threshold)."""
    c: Campaign = ctx["c"]
    if ctx["released"]:
        acc, n = store.load_accumulator(state().redis, c, ctx["window"])
        if n >= c.min_reports:
            ctx["n"], ctx["n_fmt"] = n, charts.fmt_count(n)
            ctx["content"] = CONTENT[c.kind](c, ctx["window"], acc, ctx["a"])
        else:
            ctx["released"] = False
    return ctx


@bp.get("/campaigns/<name>")
def campaign(name: str):
    c = _campaign_or_404(name)
    if not isinstance(c, Campaign):
        return c
    a = PageArgs(request.args)
    ctx = campaign_context(c, a)
    live = url_for("pages.campaign_live", name=c.name) + a.qs()
    return render_template("operator_campaign.html", live_url=live, refresh=REFRESH_SECONDS, **ctx)


@bp.get("/campaigns/<name>/live")
def campaign_live(name: str):
    c = state().config.campaign(name)
    if c is None:
        return jsonify({"error": "not_found", "detail": f"unknown campaign {name!r}"}), 404
    ctx = campaign_context(c, PageArgs(request.args), with_content=False)
    changed = request.args.get("v") != ctx["version"]
    if changed:
        add_content(ctx)
    fragments = {"summary": render_template("operator_summary.html", **ctx)}
    if changed:
        fragments["content"] = render_template("operator_content.html", **ctx)
    return jsonify({"version": ctx["version"], "fragments": fragments})


# --- downloads (the export API's own responses, for signed-in users) ------------------------------

def _attachment(resp: Response, filename: str) -> Response:
    if resp.status_code == 200:
        resp.headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    resp.headers["Vary"] = "Cookie"
    return resp


def _api(view: Callable) -> Callable:
    """The undecorated export/query view (no bearer check: the session was checked)."""
    return getattr(view, "__wrapped__", view)


@bp.get("/campaigns/<name>/download/<what>")
def download(name: str, what: str):
    c = _campaign_or_404(name)
    if not isinstance(c, Campaign):
        return c
    w = request.args.get("window", "latest")
    if what in ("estimates.csv", "estimates.json") and c.kind == "frequency":
        resp = _api(export.estimates)(name)  # reads ?format= and ?window=
        return _attachment(resp, f"{name}-{w}.{what.rsplit('.', 1)[1]}")
    if what in ("heavy-hitters.json", "heavy-hitters.csv") and c.kind == "heavy_hitters":
        resp = _api(queries.heavy_hitters)(name)
        if what.endswith(".csv") and resp.status_code == 200:
            resp = Response(_rows_csv(json.loads(resp.get_data())["items"], HH_COLUMNS), mimetype="text/csv")
        return _attachment(resp, f"{name}-heavy-hitters-{w}.{what.rsplit('.', 1)[1]}")
    if what == "quantiles.json" and c.kind == "range":
        return _attachment(_api(queries.quantiles)(name), f"{name}-quantiles-{w}.json")
    if what == "cdf.csv" and c.kind == "range":
        loaded = export.load_released(c)
        if not isinstance(loaded, tuple):
            return loaded
        window, acc = loaded
        cdf = _cdf_csv(queries.cached_estimate(c, window, acc), acc.n)
        return _attachment(Response(cdf, mimetype="text/csv"), f"{name}-cdf-{w}.csv")
    return render_template("operator_error.html", title="No such download", status=404,
                           message=f"Campaign “{name}” has no download “{what}”.", back=True), 404


HH_COLUMNS = ("value", "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized", "z_score",
              "levels_used")


def _rows_csv(rows: list[dict], columns: tuple[str, ...]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow(["" if row.get(k) is None else row.get(k) for k in columns])
    return buf.getvalue()


def _cdf_csv(est, n: int) -> str:
    d = est.domain_size
    xs = np.unique(np.linspace(0, d - 1, min(d, CDF_CSV_POINTS)).round().astype(np.int64))
    F = est.cdf()[xs]
    se = est.ranges(np.zeros(xs.size, np.int64), xs)[1] / max(n, 1)
    rows = [{"value": int(x), "cdf": float(f), "cdf_ci_low": float(max(0.0, f - Z95 * s)),
             "cdf_ci_high": float(min(1.0, f + Z95 * s))} for x, f, s in zip(xs, F, se, strict=True)]
    return _rows_csv(rows, ("value", "cdf", "cdf_ci_low", "cdf_ci_high"))
