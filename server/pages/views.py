"""The operator pages' blueprint: routes, the sign-in guard, security headers and error pages."""

from __future__ import annotations

import logging
import os
import secrets
from typing import Any, cast

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
from flask.blueprints import BlueprintSetupState
from flask.typing import ResponseReturnValue
from markupsafe import escape

from ldptel.campaigns.config import Campaign
from ldptel.privacy.device_composition import device_composition
from ldptel.server import charts
from ldptel.server.app import state
from ldptel.server.auth import token_ok
from ldptel.server.errors import ApiError, PageError, render
from ldptel.server.pages import downloads
from ldptel.server.pages.contexts import (
    PageArgs,
    add_content,
    campaign_context,
    list_rows,
    page_campaign,
)
from ldptel.server.pages.mode_labels import composition_note
from ldptel.server.pages.session import (
    csrf_ok,
    csrf_token,
    install_sessions,
    load_secret,
    safe_next,
    security_headers,
    sign_in,
    sign_out,
    signed_in,
)
from ldptel.server.versions import find_campaign

log = logging.getLogger("ldptel.server.pages")

bp = Blueprint("pages", __name__, root_path=os.path.dirname(os.path.dirname(__file__)),
               template_folder="templates", static_folder="static", static_url_path="/operator-static")

REFRESH_SECONDS = 5
PUBLIC_ENDPOINTS = {"pages.signin", "pages.signin_post", "pages.static"}
LIVE_ENDPOINTS = {"pages.campaigns_live", "pages.campaign_live"}  # JSON for the page's script


@bp.record_once
def _setup(setup_state: BlueprintSetupState) -> None:
    install_sessions(cast(Flask, setup_state.app))  # a Blueprint is registered on a Flask app


@bp.before_request
def _guard() -> ResponseReturnValue | None:
    g.csp_nonce = secrets.token_urlsafe(16)
    if request.endpoint == "pages.static":
        return None
    if not current_app.secret_key and not load_secret(current_app):
        return _unavailable()
    if request.endpoint in PUBLIC_ENDPOINTS or signed_in():
        return None
    if request.endpoint in LIVE_ENDPOINTS:
        raise ApiError(401, "unauthorized", "sign in again")
    nxt = request.full_path.rstrip("?") if request.method == "GET" else None
    return redirect(url_for("pages.signin", next=nxt) if nxt and nxt != "/" else url_for("pages.signin"))


@bp.after_request
def _headers(resp: Response) -> Response:
    return security_headers(resp, g.get("csp_nonce", ""), request.endpoint == "pages.static")


@bp.errorhandler(redis_lib.RedisError)
def _redis_down(exc: redis_lib.RedisError) -> ResponseReturnValue:
    log.warning("operator page: redis unavailable: %s", exc)
    return _unavailable()


def _unavailable() -> ResponseReturnValue:
    if request.endpoint in LIVE_ENDPOINTS:
        return render(ApiError(503, "unavailable", "storage is unavailable; retrying"))
    return render_template("operator_error.html", title="Storage unavailable", status=503,
                           message="The server cannot reach its Redis storage right now. "
                                   "This page retries by itself every few seconds.",
                           retry=True), 503


@bp.errorhandler(PageError)
def _page_error(exc: PageError) -> tuple[str, int]:
    return render_template("operator_error.html", title=exc.title, status=exc.status, message=exc.message,
                           back=exc.back), exc.status


@bp.context_processor
def _template_globals() -> dict[str, Any]:
    return {"csrf_token": csrf_token, "fmt": charts, "csp_nonce": lambda: g.get("csp_nonce", ""),
            "signed_in": request.endpoint not in PUBLIC_ENDPOINTS and signed_in()}


def _campaign_or_404(name: str, a: PageArgs | None = None) -> Campaign:
    """The campaign version the page shows: ``?version=`` as on the export API (default: the
    latest version with reports; ``a``: the page's arguments, ``contexts.page_campaign``)."""
    if state().config.campaign(name) is None:
        raise PageError(404, "Unknown campaign", f"There is no campaign named “{name}”.", back=True)
    try:
        return find_campaign(name) if a is None else page_campaign(name, a)
    except ApiError as exc:
        raise PageError(exc.status, "Unknown version", str(exc.detail), back=True) from None


# --- sign-in -------------------------------------------------------------------------------

@bp.get("/signin")
def signin() -> Any:
    if signed_in():
        return redirect(safe_next(request.args.get("next")))
    csrf_token()
    return render_template("operator_signin.html", next=safe_next(request.args.get("next")),
                           signed_out=request.args.get("signed_out") == "1")


@bp.post("/signin")
def signin_post() -> Any:
    nxt = safe_next(request.form.get("next"))
    throttle = state().auth_throttle
    wait = throttle.blocked(request.remote_addr)
    if wait:
        return _too_many_failures(nxt, wait)
    if not csrf_ok():
        session.pop("csrf", None)
        csrf_token()
        return render_template("operator_signin.html", next=nxt,
                               error="This sign-in form expired or your browser did not keep its "
                                     "cookie. Please try again (cookies must be enabled)."), 400
    token = request.form.get("token", "").strip()
    if not token_ok(token or None, "export"):
        wait = throttle.failed(request.remote_addr, token) if token else 0
        if wait:
            return _too_many_failures(nxt, wait)
        return render_template("operator_signin.html", next=nxt,
                               error="That token is not a valid export token."), 401
    sign_in(token)
    return redirect(nxt)


def _too_many_failures(nxt: str, wait: int) -> ResponseReturnValue:
    page = render_template("operator_signin.html", next=nxt,
                           error=f"Too many failed sign-ins. Try again in {wait} s.")
    return page, 429, {"Retry-After": str(wait)}


@bp.post("/signout")
def signout() -> Any:
    if not csrf_ok():
        raise PageError(400, "Sign-out not confirmed",
                        "The sign-out form expired. Go back, reload the page and try again.")
    sign_out()
    return redirect(url_for("pages.signin", signed_out=1))


# --- pages -------------------------------------------------------------------------------------

@bp.get("/")
def campaigns() -> str:
    return render_template("operator_campaigns.html", rows=list_rows(),
                           live_url=url_for("pages.campaigns_live"), version="", refresh=REFRESH_SECONDS,
                           composition=composition_note(device_composition(state().config.campaigns)))


@bp.get("/live")
def campaigns_live() -> Response:
    html = render_template("operator_campaign_rows.html", rows=list_rows())
    return jsonify({"version": "", "fragments": {"rows": html}})


@bp.get("/campaigns/<name>")
def campaign(name: str) -> str:
    a = PageArgs(request.args)
    c = _campaign_or_404(name, a)
    ctx = campaign_context(c, a)
    live = url_for("pages.campaign_live", name=c.name) + a.qs()
    return render_template("operator_campaign.html", live_url=live, refresh=REFRESH_SECONDS, **ctx)


@bp.get("/campaigns/<name>/live")
def campaign_live(name: str) -> Response:
    a = PageArgs(request.args)
    ctx = campaign_context(page_campaign(name, a), a, with_content=False)
    changed = request.args.get("v") != ctx["version"]
    if changed:
        add_content(ctx)
    fragments = {"summary": render_template("operator_summary.html", **ctx), "trend": ctx["trend_html"],
                 "windows": render_template("operator_window_form.html", **ctx)}
    if changed:
        fragments["content"] = ctx["content_html"]
        fragments["central"] = render_template("operator_central.html", **ctx)
        fragments["central_head"] = str(escape(ctx["central_head"]))
    return jsonify({"version": ctx["version"], "fragments": fragments})


@bp.get("/campaigns/<name>/download/<what>")
def download(name: str, what: str) -> Response:
    return downloads.download(_campaign_or_404(name), what, request.args)

