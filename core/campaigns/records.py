"""A campaign's registry record, built and checked as a whole (no Redis here: ``ldptel.store.registry``
reads and writes it).

One record per campaign::

    {"name", "status": "active" | "paused" | "retired", "reason", "updated_at",
     "admin_since_apply": bool,
     "versions": [{"version": 1, "table": {...}, "created_at", "superseded_at"[, "plan"]
                   [, "unreadable"]}, ...]}

``table`` is the version's TOML table as given. ``plan`` (shuffled privacy modes only): the plan
pinned when the version was created (``ldptel.privacy.modes.Pinned``: ε₀, fake rate, μ, the
bound, the planner's version, and the inputs it is a plan of); every later parse of the version
uses it and never plans again, so a new planner (an upgrade) changes no live version's
randomization: only a new version is planned anew. A version written before plans were pinned
is planned when read, and pinned at its record's next write (``pin_missing``). Keys are of four
sorts:

- the randomization parameters, ``window`` and ``shards`` (``identity``): a change makes version
  n+1 (``shards`` cannot change: the streams are per shard);
- ``CAMPAIGN_WIDE_KEYS`` (``description``, ``min_reports``, ``accept_old_versions``,
  ``retention``): the latest table's value applies to every version (``retention`` to every
  version with windows of a fixed length: an ``"all"`` window never ends);
- ``VERSION_KEYS`` (``reports_per_window``, ``shuffle_min_reports``, ``shuffle_max_delay``,
  ``central_delta``): how that version's reports are collected and claimed; changed in place on
  the latest version only, never applied to older ones.
- ``PLAN_KEYS`` (``central_delta``): in place for a ``local`` campaign (δ of the claim stated for
  its releases), but for a campaign in a shuffled privacy mode they are planning keys — its ε₀ or
  fake rate follows from them (``ldptel.campaigns.modes``), so a change in place would re-randomize
  devices under the same version: there they are part of the identity, and a change of the
  effective value makes a new version naming the key (``identity``, ``in_place_keys``).

Every change goes through ``check_record`` before it is written: every version must parse with
what applies to it (a ``retention`` shorter than an older version's window is refused naming
``retention`` and the version), the shards must agree, and the campaign's entry in the device
answer must stay within ``campaign_limits``. A refused change raises ``ConfigError`` naming the
key and nothing is written. A version whose own table no longer parses (written by an older
ldptel or by hand: e.g. an ε below today's floor) makes the record unreadable: ``ldptel.store.registry``
quarantines that campaign alone, and the next successful write (an admin PUT, ``campaigns apply``)
repairs it: such versions are kept, stamped ``"unreadable": reason`` and skipped from then on.

Every write also yields one history entry (``entry``), kept apart from the record (the processes
that follow the registry never load it): when, who (the admin token's name, or the command),
through what (``admin``, ``apply``, ``serve``, ``cli``), the action, the version, and what changed
(in-place keys with their values before and after; new versions with the keys that differ and
their values before and after).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from ldptel.campaigns.config import (
    IN_PLACE_KEYS,
    Campaign,
    ConfigError,
    ShufflerConfig,
    check_file_rules,
    parse_campaign,
)
from ldptel.campaigns.limits import check_answer_bytes, json_bytes
from ldptel.durations import parse_window
from ldptel.privacy.modes import Shuffled, ShuffledFakes, is_shuffled

CAMPAIGN_WIDE_KEYS = ("description", "min_reports", "accept_old_versions", "retention")
VERSION_KEYS = tuple(k for k in IN_PLACE_KEYS if k not in CAMPAIGN_WIDE_KEYS)
PLAN_KEYS = ("central_delta",)  # in-place keys a shuffled campaign's plan depends on
DERIVED_KEYS = ("window_seconds",)  # public keys computed from others (not named as changed)
PRIVACY_ALLOWANCE = 2048  # bytes of a version's ``privacy`` object in the device answer (at most)
VIAS = ("admin", "apply", "serve", "cli")


@dataclass
class Change:
    """What a write did to one campaign: ``action`` is ``created``, ``new_version``, ``updated``
    (in-place keys only), ``unchanged``, or a status (``paused``, ``active``, ``retired``);
    ``version`` the latest version after it."""

    name: str
    action: str
    version: int
    changed: list[str] = dataclasses.field(default_factory=list)  # keys that differ

    def line(self) -> str:
        what = f" ({', '.join(self.changed)})" if self.changed else ""
        return f"{self.name}: {self.action.replace('_', ' ')}, version {self.version}{what}"


@dataclass
class Applied:
    """What ``apply`` did (or, with ``dry_run``, would do): each campaign's ``Change``, the drift
    of each campaign whose registry record differs from the file (name → key → [registry, file]),
    the campaigns refused (changed through the admin API since the last apply, without
    ``force``), and the campaigns whose records cannot be read."""

    changes: list[Change] = dataclasses.field(default_factory=list)
    drift: dict[str, dict[str, list[Any]]] = dataclasses.field(default_factory=dict)
    refused: list[str] = dataclasses.field(default_factory=list)
    kept: list[str] = dataclasses.field(default_factory=list)  # ``only_new``: held by the registry
    broken: dict[str, str] = dataclasses.field(default_factory=dict)


def where(name: str) -> str:
    return f"campaigns[{name}]"


def in_place_keys(campaign: Campaign) -> tuple[str, ...]:
    """The keys that change ``campaign`` in place: ``IN_PLACE_KEYS``, less ``PLAN_KEYS`` in a
    shuffled privacy mode (module docstring)."""
    if is_shuffled(campaign):
        return tuple(k for k in IN_PLACE_KEYS if k not in PLAN_KEYS)
    return IN_PLACE_KEYS


def identity(campaign: Campaign) -> dict[str, Any]:
    """What makes a version: the public parameters (less the version number and any in-place
    key), the window and the shards; in a shuffled privacy mode also the planning keys
    (``PLAN_KEYS``, their effective values: ``central_delta`` with its default applied)."""
    out = {k: v for k, v in campaign.public().items() if k != "version" and k not in IN_PLACE_KEYS}
    if is_shuffled(campaign):
        out.update({k: getattr(campaign, k) for k in PLAN_KEYS})
    return {**out, "window": campaign.window, "shards": campaign.shards}


def effective_table(table: Mapping[str, Any], latest: Mapping[str, Any]) -> dict[str, Any]:
    """An older version's table with the latest table's campaign-wide keys (``retention`` only
    for windows of a fixed length)."""
    out = {k: v for k, v in table.items() if k not in CAMPAIGN_WIDE_KEYS}
    out.update({k: latest[k] for k in CAMPAIGN_WIDE_KEYS if k in latest})
    if "retention" in out:
        try:
            if parse_window(out.get("window", "all")) == 0:
                del out["retention"]
        except ValueError:
            pass  # parse_campaign names the bad window
    return out


def readable(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The version entries not stamped ``unreadable``."""
    return [e for e in record["versions"] if not e.get("unreadable")]


def versions_of(record: Mapping[str, Any]) -> list[Campaign]:
    """The record's readable versions as ``Campaign`` objects, ascending; ``ConfigError`` naming
    the key (and the version) when one does not parse, or the shards differ."""
    name = str(record.get("name"))
    entries = readable(record)
    if not entries:
        raise ConfigError(f"{where(name)}: no readable version")
    latest = entries[-1]["table"]
    out = []
    for entry in entries:
        table = latest if entry is entries[-1] else effective_table(entry["table"], latest)
        try:
            camp = parse_campaign(dict(table), where(name), entry.get("plan"))
        except ConfigError as exc:
            raise ConfigError(f"{exc} (version {entry['version']})", exc.key) from None
        if camp.name != name:
            raise ConfigError(f"{where(name)}.name: version {entry['version']} names {camp.name!r}")
        out.append(dataclasses.replace(camp, version=int(entry["version"]),
                                       superseded_at=entry.get("superseded_at"),
                                       status=record.get("status", "active"),
                                       reason=record.get("reason", "")))
    shards = {c.shards for c in out}
    if len(shards) > 1:
        raise ConfigError(f"{where(name)}.shards: versions differ ({sorted(shards)}): the streams are "
                          "per shard")
    return out


def parse_stored(name: str, raw: bytes) -> dict[str, Any]:
    """A stored record; one that is not a JSON object comes back as ``{"name", "broken"}``
    (``versions_of`` then names why)."""
    try:
        rec = json.loads(raw)
    except ValueError as exc:
        return {"name": name, "broken": f"the stored record is not JSON ({exc})", "versions": []}
    entries = rec.get("versions") if isinstance(rec, dict) else None
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("table"), dict) and "version" in e for e in entries):
        return {"name": name, "broken": "the stored record has no list of versions", "versions": []}
    return cast("dict[str, Any]", rec)


def readable_versions(rec: Mapping[str, Any]) -> list[Campaign]:
    """``versions_of`` of a stored record; ``ConfigError`` saying why it cannot be read."""
    if rec.get("broken"):
        raise ConfigError(f"{where(str(rec.get('name')))}: {rec['broken']}")
    return versions_of(rec)


def entry_bytes(versions: list[Campaign], now: float) -> int:
    """Bytes of a campaign's entry in ``GET /v1/campaigns``: the latest version (each with its
    privacy claim, ``PRIVACY_ALLOWANCE``), the oldest version still accepted, and the largest
    older version still accepted, the one a device may ask for by number (issue 34 item 9: a
    device gets an old version only when it asks for it, so the entry does not grow with the
    number of changes)."""
    accepted = [v for v in versions[:-1] if now <= v.accepts_until()]
    old = max((json_bytes(v.public()) + PRIVACY_ALLOWANCE for v in accepted), default=0)
    return json_bytes(versions[-1].public()) + PRIVACY_ALLOWANCE + old + 40


def check_record(record: Mapping[str, Any], others: Mapping[str, int], now: float,
                 shuffler: ShufflerConfig | None = None) -> list[Campaign]:
    """Every rule of a whole record (module docstring); ``others``: the device-answer bytes of
    the other campaigns (``entry_bytes``); ``shuffler``: the running file's ``[shuffler]``, for
    the file's cross-key rules (``config.check_file_rules``, on the latest version: the one a
    write makes; None, a writer without the file: left to ``registry.Live``, which quarantines a
    record breaking them when it loads it). Returns the versions; ``ConfigError`` naming the key."""
    versions = versions_of(record)
    name = str(record["name"])
    if shuffler is not None:
        check_file_rules(versions[-1], shuffler)
    check_answer_bytes({**others, name: entry_bytes(versions, now)}, where(name), name)
    return versions


def own_table_error(table: Mapping[str, Any], name: str, pinned: Mapping[str, Any] | None = None
                    ) -> str | None:
    """Why a version's own table (with its pinned plan) does not parse (an older ldptel, or a hand
    edit), or None."""
    try:
        parse_campaign(dict(table), where(name), pinned)
    except ConfigError as exc:
        return str(exc)
    return None


def stamp_unreadable(record: dict[str, Any], before: Mapping[str, Any] | None) -> list[int]:
    """Repair: the older versions (all but the latest) whose own table does not parse and did
    not parse in ``before`` either are stamped ``unreadable`` (kept, skipped). Returns their
    numbers."""
    if before is None:
        return []
    was_bad = {e["version"] for e in before["versions"]
               if e.get("unreadable") or own_table_error(e["table"], record["name"], e.get("plan"))}
    stamped = []
    for e in record["versions"][:-1]:
        if e["version"] in was_bad and not e.get("unreadable"):
            reason = own_table_error(e["table"], record["name"], e.get("plan"))
            if reason is not None:
                e["unreadable"] = reason
                e["superseded_at"] = e.get("superseded_at") or time.time()
                stamped.append(e["version"])
    return stamped


def _latest_identity(record: Mapping[str, Any]) -> tuple[Campaign | None, dict[str, Any] | None]:
    entries = readable(record)
    if not entries:
        return None, None
    try:
        camp = parse_campaign(dict(entries[-1]["table"]), where(str(record["name"])), entries[-1].get("plan"))
    except ConfigError:
        return None, None
    return camp, identity(camp)


def pinned_plan(campaign: Campaign) -> dict[str, Any] | None:
    """The ``plan`` of ``campaign``'s version entry: its shuffled mode's pinned plan (None for a
    local campaign, whose entry has none: local records are as they were)."""
    mode = campaign.mode
    return mode.plan.to_json() if isinstance(mode, (Shuffled, ShuffledFakes)) else None


def new_entry(version: int, table: Mapping[str, Any], campaign: Campaign, now: float) -> dict[str, Any]:
    """A version entry for ``table`` parsed as ``campaign``, its plan pinned (module docstring)."""
    out: dict[str, Any] = {"version": version, "table": dict(table), "created_at": now, "superseded_at": None}
    pin = pinned_plan(campaign)
    if pin is not None:
        out["plan"] = pin
    return out


def pin_missing(record: dict[str, Any]) -> list[int]:
    """Pin the plan of every readable version written before plans were pinned (module
    docstring), in place; returns their numbers. A version that does not parse is left as it is
    (``check_record`` names it)."""
    entries = readable(record)
    pinned = []
    for entry in entries:
        if "plan" in entry:
            continue
        table = entries[-1]["table"] if entry is entries[-1] else effective_table(entry["table"],
                                                                                  entries[-1]["table"])
        try:
            pin = pinned_plan(parse_campaign(dict(table), where(str(record["name"]))))
        except ConfigError:
            continue
        if pin is not None:
            entry["plan"] = pin
            pinned.append(int(entry["version"]))
    return pinned


def _parse_put(table: Mapping[str, Any], pinned: Mapping[str, Any] | None) -> tuple[Campaign, bool]:
    """``table`` parsed with the latest version's pinned plan when it is a plan of the same
    inputs (an in-place change or none: nothing planned), else planned anew; (campaign, whether
    the pin was used)."""
    name = table.get("name")
    if pinned is not None:
        try:
            return parse_campaign(dict(table), where(str(name)), pinned), True
        except ConfigError as exc:
            if not (exc.key or "").endswith(".plan"):
                raise
    return parse_campaign(dict(table), where(str(name))), False


def put_table(record: Mapping[str, Any] | None, table: Mapping[str, Any], now: float
              ) -> tuple[dict[str, Any], Change, dict[str, Any]]:
    """(the record after putting ``table``, what changed, the history entry's ``changed``).
    Only ``table`` is checked here; ``check_record`` checks the result. A stored record that is
    not a record at all (``broken``: not JSON, no versions) is replaced by a new one. A new
    version's plan is made now and pinned in its entry; an in-place change keeps the pinned one."""
    if record is None or record.get("broken"):  # new, or a stored record that is not one at all
        new = parse_campaign(dict(table), where(str(table.get("name"))))
        rec: dict[str, Any] = {"name": new.name, "status": "active", "reason": "", "updated_at": now,
                               "versions": [new_entry(1, table, new, now)]}
        return rec, Change(new.name, "created", 1), {}
    rec = copy.deepcopy(dict(record))
    entries = readable(rec)
    new, kept_plan = _parse_put(table, entries[-1].get("plan") if entries else None)
    latest, before = _latest_identity(rec)
    after = identity(new)
    if before is not None and before["shards"] != after["shards"]:
        raise ConfigError(f"{where(new.name)}.shards: cannot change ({before['shards']} → "
                          f"{after['shards']}): the reports streams are per shard; create a new campaign")
    last = rec["versions"][-1]
    if before is None:  # the latest table cannot be read on its own: the put is a new version
        changed = ["table"]
    else:
        changed = sorted(k for k in set(before) | set(after)
                         if before.get(k) != after.get(k) and k not in DERIVED_KEYS)
    if changed or last.get("unreadable"):
        if kept_plan:  # a new version is planned anew (the latest's plan stays the latest's)
            new = parse_campaign(dict(table), where(new.name))
            if before is not None:
                after = identity(new)
                changed = sorted(k for k in set(before) | set(after)
                                 if before.get(k) != after.get(k) and k not in DERIVED_KEYS) or changed
        version = max(int(e["version"]) for e in rec["versions"]) + 1
        last["superseded_at"] = last.get("superseded_at") or now
        rec["versions"].append(new_entry(version, table, new, now))
        rec["updated_at"] = now
        # issue 35: the history said {"keys": ["epsilon"]} without "2 → 1"
        values = {} if before is None else {k: [before.get(k), after.get(k)] for k in changed}
        return rec, Change(new.name, "new_version", version, changed), {"keys": changed, "values": values}
    assert latest is not None
    # (a shuffled campaign's PLAN_KEYS reach here only with their effective value unchanged,
    # e.g. central_delta written out at its default: the identity holds them)
    in_place = {k: [last["table"].get(k), table.get(k)] for k in IN_PLACE_KEYS
                if last["table"].get(k) != table.get(k)}
    if not in_place:
        return rec, Change(new.name, "unchanged", latest.version), {}
    last["table"] = dict(table)
    if "plan" not in last and pinned_plan(new) is not None:  # a version written before plans were pinned
        last["plan"] = pinned_plan(new)
    rec["updated_at"] = now
    return rec, Change(new.name, "updated", int(last["version"]), sorted(in_place)), {"values": in_place}


def rollback_table(record: Mapping[str, Any], to: int) -> dict[str, Any]:
    """The table that makes a new version equal to version ``to``: its randomization parameters,
    window and version keys, with the campaign-wide keys as they are now (``effective_table``: a
    rollback does not lower a ``min_reports`` raised since). ``ConfigError`` for a version that is unknown or
    unreadable."""
    entries = {int(e["version"]): e for e in record["versions"]}
    target = entries.get(int(to))
    if target is None or target.get("unreadable"):
        known = ", ".join(str(v) for v, e in sorted(entries.items()) if not e.get("unreadable"))
        raise ConfigError(f"{where(str(record['name']))}.version: no readable version {to} "
                          f"(versions: {known})")
    return effective_table(target["table"], readable(record)[-1]["table"])


def drift(record: Mapping[str, Any], table: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The keys where ``table`` (a file's) differs from the registry's latest version: key →
    [registry's value, file's value] (absent keys as None)."""
    entries = readable(record)
    current = entries[-1]["table"] if entries else {}
    return {k: [current.get(k), table.get(k)] for k in sorted(set(current) | set(table))
            if current.get(k) != table.get(k)}


def entry(action: str, version: int, by: str, via: str, now: float, **detail: Any) -> dict[str, Any]:
    """One history entry (module docstring)."""
    if via not in VIAS:
        raise ValueError(f"via must be one of {VIAS}, got {via!r}")
    return {"at": now, "by": by, "via": via, "action": action, "version": version,
            **{k: v for k, v in detail.items() if v not in (None, {}, [])}}


__all__ = ["CAMPAIGN_WIDE_KEYS", "DERIVED_KEYS", "PLAN_KEYS", "VERSION_KEYS", "Applied", "Change",
           "check_record", "drift", "effective_table", "entry", "entry_bytes", "identity", "in_place_keys",
           "new_entry", "own_table_error", "parse_stored", "pin_missing", "pinned_plan", "put_table",
           "readable", "readable_versions", "rollback_table",
           "stamp_unreadable", "versions_of", "where"]
