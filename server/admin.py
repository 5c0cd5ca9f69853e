"""Admin API: the campaign registry changed live (``ldptel.store.registry``), admin token
(``server.admin_tokens`` / ``$LDPTEL_ADMIN_TOKENS``; without one every request answers 401). Every
change is recorded in the campaign's history under the token's name (``[server] admin_tokens``
entries ``{name, token}``; an unnamed token is ``admin token <first 8 hex of its SHA-256>``).

- ``GET /v1/admin/campaigns`` → ``{"revision", "campaigns": [{"name", "status", "reason",
  "version", "config"}]}`` (the latest version's public config); a campaign whose record cannot
  be read is listed with ``"status": "broken"``, the reason in ``reason``, ``version`` and
  ``config`` null (quarantined: not served; a PUT repairs it);
- ``GET /v1/admin/campaigns/<name>`` → the campaign's record (``status``, ``reason``,
  ``versions``: each version's ``table``, ``created_at``, ``superseded_at``, and its public
  ``config``; ``broken``: why it cannot be read, if so);
- ``GET /v1/admin/campaigns/<name>/history`` → ``{"campaign", "history": [{"at", "by", "via",
  "action", "version", "changed", …}]}``, oldest first;
- ``PUT /v1/admin/campaigns/<name>`` with the campaign's table as a JSON object (the keys of a
  ``[[campaigns]]`` table; ``name`` may be left out) → ``201`` created, or ``200`` with
  ``{"action": "new_version" | "updated" | "unchanged", "version", "changed": [keys], "campaign":
  record}``: a changed randomization parameter makes a new version, the in-place keys
  (``registry_records``) change in place. The whole new record is checked before it is written:
  ``400 bad_config`` names the key (``campaigns[<name>].<key>: …``, as the TOML does) and nothing
  changes;
- ``PATCH /v1/admin/campaigns/<name>`` with some keys of the table → the same answers as ``PUT``,
  the other keys as they are (a ``PUT`` body lacking keys of the table says so and names PATCH);
- ``POST /v1/admin/campaigns/<name>/rollback`` with ``{"to": VERSION}`` → ``200`` as a PUT: a new
  version equal to version ``VERSION`` (the campaign-wide keys stay as they are);
- ``POST /v1/admin/campaigns/<name>/pause|resume|retire`` (optional JSON ``{"reason": "…"}``;
  without one, pausing a paused campaign keeps its reason) → ``200`` with the record. A paused
  campaign's reports are answered ``409 campaign_paused``, a
  retired one's ``410 campaign_retired`` (with the reason); a retired campaign cannot resume
  (``409``); its estimates stay readable.

Bodies are JSON objects nested at most ``MAX_JSON_DEPTH`` deep (else ``400 bad_request``, before
any parsing). Every collector worker and aggregator sees a change within about a second
(``registry.Live``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from flask import Blueprint, Response, g, jsonify, request

from ldptel.campaigns.config import ConfigError
from ldptel.server.app import state
from ldptel.server.auth import require_token
from ldptel.server.errors import ApiError
from ldptel.store import registry

bp = Blueprint("admin", __name__)

ACTIONS = {"pause": "paused", "resume": "active", "retire": "retired"}
MAX_JSON_DEPTH = 32
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def json_depth(raw: bytes) -> int:
    """How deep ``[``/``{`` nest in ``raw`` (strings skipped), without parsing it."""
    depth = deepest = 0
    for m in _JSON_TOKENS.finditer(raw):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif c in (b"]", b"}"):
            depth -= 1
    return deepest


def _body() -> dict[str, Any]:
    raw = request.get_data(cache=True) if request.content_length else b""
    if not raw:
        return {}
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise ApiError(400, "bad_request", f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        raise ApiError(400, "bad_request", "the body must be a JSON object")
    return body


def _who() -> str:
    """The admin token's name (``auth.authenticate``), for the history."""
    return str(g.get("ldptel_token_name") or "admin token")


def _described(record: dict[str, Any]) -> dict[str, Any]:
    """The record with each version's public config (``broken``: why it cannot be read)."""
    try:
        versions = {v.version: v for v in registry.readable_versions(record)}
    except ConfigError as exc:
        return {**record, "broken": str(exc)}
    return {**record, "versions": [{**entry, "config": versions[entry["version"]].public()}
                                   if entry["version"] in versions else entry
                                   for entry in record["versions"]]}


def _record(name: str) -> dict[str, Any]:
    """The registry's record of ``name``; a campaign only the config file declares is put in the
    registry first (as its version 1: its reports were randomized under the file's parameters)."""
    r = state().admin_redis
    rec = registry.record(r, name)
    if rec is None:
        table = next((t for t in state().config.tables if t.get("name") == name), None)
        if table is not None:
            registry.put(r, table, by=f"{_who()} (the file's version, before a change)", via="apply",
                         shuffler=state().config.shuffler)
            rec = registry.record(r, name)
    if rec is None:
        raise ApiError(404, "not_found", f"unknown campaign {name!r}")
    return rec


@bp.get("/v1/admin/campaigns", endpoint="admin_campaigns")
@require_token("admin")
def list_view() -> Response:
    rev, records = registry.load(state().admin_redis)
    rows: list[dict[str, Any]] = []
    for name in sorted(records):
        try:
            latest = registry.readable_versions(records[name])[-1]
        except ConfigError as exc:
            rows.append({"name": name, "status": "broken", "reason": str(exc), "version": None,
                         "config": None})
            continue
        rows.append({"name": name, "status": latest.status, "reason": latest.reason,
                     "version": latest.version, "config": latest.public()})
    return jsonify({"revision": rev, "campaigns": rows})


@bp.get("/v1/admin/campaigns/<name>", endpoint="admin_campaign")
@require_token("admin")
def show_view(name: str) -> Response:
    return jsonify(_described(_record(name)))


@bp.get("/v1/admin/campaigns/<name>/history", endpoint="admin_campaign_history")
@require_token("admin")
def history_view(name: str) -> Response:
    _record(name)
    return jsonify({"campaign": name, "history": registry.history(state().admin_redis, name)})


def _changed(change: registry.Change | None, name: str) -> tuple[Response, int]:
    state().refresh()
    assert change is not None
    doc = {"action": change.action, "version": change.version, "changed": change.changed,
           "campaign": _described(_record(name))}
    return jsonify(doc), 201 if change.action == "created" else 200


@bp.put("/v1/admin/campaigns/<name>", endpoint="admin_put_campaign")
@require_token("admin")
def put_view(name: str) -> tuple[Response, int]:
    table = _body()
    if table.get("name", name) != name:
        raise ApiError(400, "bad_config", f"campaigns[{name}].name: must be {name!r} (the URL's), "
                                          f"got {table['name']!r}")
    table = {**table, "name": name}
    r = state().admin_redis
    current = None
    try:
        if registry.record(r, name) is not None or any(t.get("name") == name for t in state().config.tables):
            current = _record(name)
        change = registry.put(r, table, by=_who(), via="admin", shuffler=state().config.shuffler)
    except ConfigError as exc:
        raise ApiError(400, "bad_config", str(exc) + _partial_hint(current, table)) from None
    return _changed(change, name)


@bp.patch("/v1/admin/campaigns/<name>", endpoint="admin_patch_campaign")
@require_token("admin")
def patch_view(name: str) -> tuple[Response, int]:
    """Change some keys of the campaign's latest table (a JSON object of those keys); the
    others stay as they are. Answers as PUT does; 404 for an unknown campaign."""
    changes = _body()
    _record(name)  # 404, or a campaign only the file declares put in the registry first
    try:
        change = registry.patch(state().admin_redis, name, changes, by=_who(), via="admin",
                                shuffler=state().config.shuffler)
    except ConfigError as exc:
        raise ApiError(400, "bad_config", str(exc)) from None
    if change is None:
        raise ApiError(404, "not_found", f"unknown campaign {name!r}")
    return _changed(change, name)


def _partial_hint(current: dict[str, Any] | None, table: dict[str, Any]) -> str:
    """For a PUT whose body lacks keys the campaign's table has: PUT replaces the whole table."""
    if current is None or not current.get("versions"):
        return ""
    missing = sorted(set(current["versions"][-1]["table"]) - set(table))
    if not missing:
        return ""
    return (f" (PUT replaces the whole [[campaigns]] table and this body lacks {', '.join(missing)}; "
            f"to change some keys only, send them with PATCH /v1/admin/campaigns/{current['name']})")


@bp.post("/v1/admin/campaigns/<name>/rollback", endpoint="admin_campaign_rollback")
@require_token("admin")
def rollback_view(name: str) -> tuple[Response, int]:
    to = _body().get("to")
    if isinstance(to, bool) or not isinstance(to, int) or to < 1:
        raise ApiError(400, "bad_request", f"give the version to roll back to: {{\"to\": N}}, got {to!r}")
    _record(name)
    try:
        change = registry.rollback(state().admin_redis, name, to, by=_who(), via="admin",
                                   shuffler=state().config.shuffler)
    except ConfigError as exc:
        raise ApiError(400, "bad_config", str(exc)) from None
    return _changed(change, name)


@bp.post("/v1/admin/campaigns/<name>/<action>", endpoint="admin_campaign_status")
@require_token("admin")
def status_view(name: str, action: str) -> Response:
    if action not in ACTIONS:
        raise ApiError(404, "not_found", f"no action {action!r} (pause, resume, retire, rollback)")
    reason = _body().get("reason")  # none: kept when the status does not change
    if reason is not None and (not isinstance(reason, str) or len(reason) > 500):
        raise ApiError(400, "bad_request", "reason must be a string of at most 500 characters")
    rec = _record(name)
    if rec["status"] == "retired" and action != "retire":
        raise ApiError(409, "campaign_retired", f"campaign {name!r} is retired; it cannot {action}")
    try:
        new = registry.set_status(state().admin_redis, name, ACTIONS[action], reason, by=_who(), via="admin")
    except ConfigError as exc:
        raise ApiError(400, "bad_config", str(exc)) from None
    assert new is not None
    state().refresh()
    return jsonify(_described(new))
