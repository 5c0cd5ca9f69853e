"""Campaign versions on the export side: which version a request means, and the version list.

``GET /v1/campaigns/<name>/versions`` (export token) → ``{"campaign", "latest", "status",
"versions": [{"version", "status", "superseded_at", "accepted_until", "n_reports", "config"}]}``:
every version of the campaign, ascending; ``status`` is ``"current"`` for the latest version,
``"accepted"`` for a superseded version whose reports the collector still takes, ``"closed"``
after its ``accept_old_versions``; ``n_reports`` is what the aggregator counted for it (all
windows); ``config`` its public parameters (what ``GET /v1/campaigns`` served for it).

Every export endpoint takes ``version=`` (``resolve_version``): a version number, or ``latest``
(the default): the latest version with counted reports, so that right after a change the
estimates stay those of the version devices are still reporting under until the new one counts.
"""

from __future__ import annotations

import math
import time

from flask import Blueprint, Response, jsonify

from ldptel.aggregator import store
from ldptel.config import Campaign
from ldptel.server.app import state
from ldptel.server.auth import require_token
from ldptel.server.errors import ApiError, BadParameter

bp = Blueprint("versions", __name__)


def campaign_versions(name: str) -> list[Campaign]:
    """Every version of campaign ``name``, ascending (``ApiError`` 404 if unknown)."""
    versions = state().config.versions(name)
    if not versions:
        raise ApiError(404, "not_found", f"unknown campaign {name!r}")
    return versions


def resolve_version(name: str, spec: str | None) -> Campaign:
    """The version ``spec`` names (see the module docstring); ``ApiError`` 404 / 400."""
    versions = campaign_versions(name)
    if spec is None or spec in ("", "latest"):
        if len(versions) == 1:
            return versions[0]
        r = state().redis
        return next((v for v in reversed(versions) if store.list_windows(r, v)), versions[-1])
    if not spec.isdigit() or len(spec) > 9:
        raise BadParameter("version", f"must be 'latest' or a version number, got {spec!r}")
    found = next((v for v in versions if v.version == int(spec)), None)
    if found is None:
        raise ApiError(404, "not_found", f"campaign {name!r} has no version {spec} "
                                         f"(versions: {', '.join(str(v.version) for v in versions)})")
    return found


def version_status(campaign: Campaign, now: float) -> str:
    if campaign.superseded_at is None:
        return "current"
    return "accepted" if now <= campaign.accepts_until() else "closed"


@bp.get("/v1/campaigns/<name>/versions", endpoint="versions")
@require_token("export")
def versions_view(name: str) -> Response:
    versions = campaign_versions(name)
    r, now = state().redis, time.time()
    rows = []
    for v in versions:
        until = v.accepts_until()
        rows.append({"version": v.version, "status": version_status(v, now),
                     "superseded_at": v.superseded_at,
                     "accepted_until": None if math.isinf(until) else until,
                     "n_reports": sum(store.window_counts(r, v).values()), "config": v.public()})
    latest = versions[-1]
    return jsonify({"campaign": name, "latest": latest.version, "status": latest.status, "versions": rows})
