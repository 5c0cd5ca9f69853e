"""``GET /healthz`` (Redis reachable?) and ``GET /metrics`` (Prometheus text format, counters of
all workers, see ``server.metrics``). Neither needs a token; neither exposes a report."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from ldptel import __version__
from ldptel.server.app import state

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    """200 ``{"status": "ok"}`` when Redis answers; a Redis error answers 503 (app handler)."""
    state().redis.ping()
    return jsonify({"status": "ok", "redis": "ok", "version": __version__})


@bp.get("/metrics")
def metrics() -> Response:
    st = state()
    return Response(st.metrics.render(st.config), mimetype="text/plain; version=0.0.4")
