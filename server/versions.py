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

``GET /v1/campaigns/<name>/estimates?version=all[&window=…&format=json|csv]`` (frequency
campaigns) combines the released estimates of the window of every version that shares the domain
(same labels) of the latest version with reports (all of them must share its window length, else
400 ``bad_parameter`` naming the versions whose lengths differ), by inverse-variance weighting
(``aggregator/combine.py``: the formula, why it is unbiased and why its std error is exact):
``{"campaign", "version": "all", "versions": [used], "withheld_versions": [below min_reports
or not yet published], "other_domain_versions": [not combinable], "kind", "combination": "inverse_variance",
"n_reports", "window", "decoded_at", "items"}`` with the estimates endpoint's item columns; 409
when no version of the window is released. ``ETag`` over the publications used.
"""

from __future__ import annotations

import hashlib
import math
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np
from flask import Blueprint, Response, has_request_context, jsonify, request

from ldptel.campaigns.config import Campaign
from ldptel.mechanisms.combine import VersionPart, inverse_variance
from ldptel.numbers import ascii_int
from ldptel.server.app import state
from ldptel.server.auth import require_token
from ldptel.server.documents import (
    document_csv,
    format_param,
    json_text,
    load_released,
    no_window_ends,
    not_modified,
    resolve_window,
    window_complete,
)
from ldptel.server.errors import ApiError, BadParameter
from ldptel.server.validation import mechanism_of
from ldptel.store import tally
from ldptel.store.published import finite_row

bp = Blueprint("versions", __name__)


def campaign_versions(name: str) -> list[Campaign]:
    """Every version of campaign ``name``, ascending (``ApiError`` 404 if unknown)."""
    versions = state().config.versions(name)
    if not versions:
        raise ApiError(404, "not_found", f"unknown campaign {name!r}")
    return versions


def find_campaign(name: str, version: str | None = None) -> Campaign:
    """The campaign version named by ``version`` (default: the request's ``version=``): a version
    number, or ``latest``/empty/absent for the latest version with counted reports (the newest
    version if none has any) (``versions.resolve_version``). ``ApiError`` 404 ``not_found`` for
    an unknown campaign or version, 400 ``bad_parameter`` for a malformed one."""
    if version is None and has_request_context():
        version = request.args.get("version")
    return resolve_version(name, version)


def resolve_version(name: str, spec: str | None) -> Campaign:
    """The version ``spec`` names (see the module docstring); ``ApiError`` 404 / 400."""
    versions = campaign_versions(name)
    if spec is None or spec in ("", "latest"):
        if len(versions) == 1:
            return versions[0]
        r = state().redis
        return next((v for v in reversed(versions) if tally.list_windows(r, v)), versions[-1])
    number = ascii_int(spec, 9)
    if number is None:
        raise BadParameter("version", f"must be 'latest' or a version number, got {spec!r}")
    found = next((v for v in versions if v.version == number), None)
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
                     "n_reports": sum(tally.window_counts(r, v).values()), "config": v.public()})
    latest = versions[-1]
    return jsonify({"campaign": name, "latest": latest.version, "status": latest.status, "versions": rows})


def _column(items: list[dict[str, Any]], key: str) -> np.ndarray:
    """One numeric column of published items (None, a non-finite number in JSON, as NaN)."""
    return np.array([np.nan if it[key] is None else it[key] for it in items], dtype=np.float64)


def check_same_windows(members: list[Campaign]) -> None:
    """``BadParameter`` (400) naming the versions whose window length differs: a window start
    names a different span of time in each (windows are multiples of their length since the
    epoch, so one length means one alignment), and combining them would mix, e.g., a 20 s
    window of one version with the first 10 s of another's."""
    lengths: dict[str, list[int]] = {}
    for v in members:
        lengths.setdefault(v.window, []).append(v.version)
    if len(lengths) > 1:
        groups = "; ".join(f"version{'s' if len(vs) > 1 else ''} {', '.join(map(str, vs))}: window {w!r}"
                           for w, vs in lengths.items())
        raise BadParameter("version", f"'all' combines only versions with the same window length; {groups}")


def combined(name: str, window: str | None) -> tuple[dict[str, Any], str]:
    """(the ``version=all`` document, its ETag) of ``window`` (see the module docstring)."""
    versions = campaign_versions(name)
    latest = versions[-1]
    if latest.kind != "frequency":
        raise BadParameter("version", f"'all' combines frequency campaigns; {name!r} is {latest.kind}")
    base = resolve_version(name, None)  # the latest version with reports: its domain and window
    if str(window) == "latest" and not base.window_seconds:
        raise no_window_ends(base)
    try:
        start = resolve_window(base, window)
    except tally.WindowError as exc:
        raise ApiError(400, "bad_window", str(exc)) from None
    complete = window_complete(base, start)
    if str(window) in ("None", "", "latest") and base.window_seconds and not complete:
        raise ApiError(409, "no_complete_window",
                       {"window": start, "message": "no window of this campaign has ended with its "
                                                    "estimates released yet; the window in progress "
                                                    "is window=current"})
    members = [v for v in versions if v.kind == "frequency" and v.labels() == base.labels()]
    check_same_windows(members)
    parts, used, withheld, digests, decoded = [], [], [], [], 0.0
    for v in members:
        try:
            _, pub = load_released(v, start)
        except ApiError as exc:
            if exc.status not in (409, 503):
                raise
            withheld.append(v.version)
            continue
        assert pub.doc is not None
        items = pub.doc["items"]
        parts.append(VersionPart(pub.n, _column(items, "estimate"), _column(items, "std_error"),
                                 mechanism_of(v, state().mechanisms).variance_star()))
        used.append(v.version)
        digests.append(pub.digest)
        decoded = max(decoded, pub.decoded_at)
    if not parts:
        raise ApiError(409, "below_threshold", {"window": start, "withheld_versions": withheld,
                                                "message": "no version of this window is released"})
    est = inverse_variance(parts, base.labels())
    doc = {"campaign": name, "version": "all", "versions": used, "withheld_versions": withheld,
           "other_domain_versions": [v.version for v in versions if v not in members],
           "kind": "frequency", "combination": "inverse_variance", "n_reports": est.n, "window": start,
           "decoded_at": decoded, "complete": complete, "items": [finite_row(r) for r in est.items()]}
    etag = hashlib.sha256(":".join(digests).encode()).hexdigest()[:32]
    return doc, f'"{etag}"'


def combined_response(name: str, columns: tuple[str, ...]) -> Response:
    """The ``version=all`` answer of the estimates endpoint (JSON, or CSV of ``columns``)."""
    fmt = format_param(request.args)
    doc, etag = combined(name, request.args.get("window"))
    headers = {"ETag": etag, "Cache-Control": "private, no-cache", "Vary": "Authorization",
               "X-Ldptel-Campaign": name, "X-Ldptel-Window": str(doc["window"]),
               "X-Ldptel-N-Reports": str(doc["n_reports"])}
    if not_modified(etag, datetime.fromtimestamp(doc["decoded_at"], UTC)):
        return Response(status=304, headers=headers)
    if fmt == "csv":
        headers["Content-Disposition"] = f'attachment; filename="{name}-all-{doc["window"]}.csv"'
        return Response(document_csv(doc, doc["items"], columns), mimetype="text/csv", headers=headers)
    return Response(json_text(doc), mimetype="application/json", headers=headers)
