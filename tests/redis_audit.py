"""What Redis holds once the shuffler has emptied the ingress streams, checked key by key
(``tests/test_shuffle_linkage.py``, issue 15): nothing that relates to a report may carry a time
finer than the campaign's window, a batch id, or the grouping of reports as a device sent them.

``audit(r, config)`` SCANs every key and returns the problems found (empty: clean):

- every key must match a known layout (``core/keys.py``); an unknown key is a problem until someone
  decides what it holds;
- ingress streams (``keys.ingress_key``) are empty, and their last generated id is a window start;
  no journaled release is in progress (``keys.release_key`` and its staged keys);
- analysis streams (``keys.stream_key``): every entry id's ms part, the stream's last generated id
  and its consumer groups' last delivered id are window starts; an entry holds exactly ``batch``,
  ``window``, ``count``; its batch parses, holds no batch id and no field beyond campaign, count,
  schema and campaign version, the payload, its dimension values (issue 28: public by
  declaration; each the campaign's declared value or ``other``, every dimension in its declared
  order) and a device-level window (a window start, the entry's own); no entry is pending (a
  pending entry carries its delivery time);
- dedupe markers (``keys.seen_key``) hold ``"1"`` and expire at a multiple of max(window, 1 day),
  at least 7 days ahead; their name is the batch id by design: nothing else holds one, so it links
  to no report;
- the aggregator's record of opened messages (``keys.opened_key``, one per analyzer key): every
  field is a 32-byte encapsulated key (random, as in the message it begins), every value an 8-byte
  release tag; it expires when the key's private half is deleted (a time of the key, not of a
  report);
- every other number in a report-related key, hash field, value or published JSON document that
  reads as an epoch time (seconds, milliseconds or minutes within 20 years of now) must be a
  multiple of the window; every TTL must be the marker's or an allowed one.

``ALLOWED`` lists the operational keys and fields that do carry fine times, each with the reason it
relates to no report. ``plant_leaks`` writes one of each kind of leak, the negative control.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import redis

from ldptel import keys
from ldptel.campaigns.config import Config
from ldptel.proto import ReportBatch, SealedBatch

TAG = r"\{ldptel:(?P<c>[^:}]+):(?P<s>\d+)\}"
VERSIONED = r"(?::v\d+)?"
YEARS_20 = 20 * 365 * 86400
# + the payload oneof; dimensions and window: checked by ``Audit.envelope``
BATCH_FIELDS = {"campaign", "count", "schema_version", "campaign_version", "dimensions", "window"}

# (key pattern, field pattern or "*" for the whole key, why it may hold a fine time)
ALLOWED: list[tuple[str, str, str]] = [
    (rf"{TAG}:counts{VERSIONED}$", r"updated:\d+",
     "epoch ms of the aggregator's last commit to the window (tally.summary's lag and the page's "
     "'last commit'): written after the shuffle, it names no report, batch or device"),
    (rf"{TAG}:published{VERSIONED}:\d+$", keys.PUB_DECODED_AT,
     "when the aggregator decoded the window's estimates (its progress), not when a report arrived"),
    (rf"{TAG}:publishing{VERSIONED}:\d+$", "*",
     "publication claim: when a worker started decoding the window, TTL the publish gap"),
    (rf"{TAG}:shuffle_lease$", "*",
     "a shuffler process's random owner id, TTL renewed each round: shuffler liveness"),
    (re.escape(keys.HEARTBEAT_KEY) + "$", "*", "aggregator workers' liveness and last commit"),
    (re.escape(keys.SHUFFLER_HEARTBEAT_KEY) + "$", "*",
     "shufflers' liveness: when each last ended a round with nothing overdue (no report, no batch)"),
    (re.escape(keys.RATELIMIT_PREFIX) + r":.+", "*",
     "requests per ingest token (an application, not a device) per minute, TTL; holds no report"),
    (re.escape(keys.SESSION_PREFIX) + r":.+", "*", "an operator's session, TTL = idle timeout"),
    (re.escape(keys.SESSION_SECRET_KEY) + "$", "*", "the sessions' random signing secret"),
    (re.escape(keys.AUTH_FAILURE_TAG) + r":.+", "*", "failed authentications per keyed digest, TTL"),
    (re.escape(keys.REGISTRY_KEY) + "$", r"created_at|superseded_at|updated_at",
     "when an operator applied, changed or superseded a campaign version"),
    (re.escape(keys.REGISTRY_HISTORY_PREFIX) + r":.+$", "*",
     "when an operator changed a campaign, and who: the admin history, no report"),
    (re.escape(keys.ANALYZER_KEYS_KEY) + "$", "*",
     "the analyzer's public keys and when each was made and stops being current or accepted"),
]
SEALED_FIELDS = {"campaign", "schema_version", "campaign_version", "key_id", "window", "messages", "release",
                 "release_parts", "release_reports", "release_part", "key_ids"}
# consumer idle times (XINFO CONSUMERS) are the aggregator's last read: allowed for the same
# reason as its heartbeat


def epoch_like(x: float, window_s: int, now: float) -> bool:
    """``x`` read as epoch seconds, ms or minutes lies within 20 years of ``now`` and is not a
    window start (a multiple of ``window_s``; with window "all" nothing is)."""
    for per_second in (1.0, 1000.0, 1 / 60):
        if abs(x / per_second - now) < YEARS_20:
            return not (window_s > 0 and x % (window_s * per_second) == 0)
    return False


def numbers(value: Any) -> Iterator[tuple[str, float]]:
    """(path, number) of every number in a JSON-like value (a str of digits counts)."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield "", float(value)
    elif isinstance(value, (str, bytes)):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        for m in re.finditer(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", text):
            yield "", float(m.group())
    elif isinstance(value, dict):
        for k, v in value.items():
            for path, x in numbers(v):
                yield f"{k}.{path}".rstrip("."), x
    elif isinstance(value, list):
        for v in value:
            yield from numbers(v)


def allowed(key: str, field: str = "*") -> bool:
    return any(re.match(kp, key) and (fp == "*" or re.fullmatch(fp, field)) for kp, fp, _ in ALLOWED)


class Audit:
    def __init__(self, r: redis.Redis, config: Config) -> None:
        self.r, self.config = r, config
        self.now = time.time()
        self.problems: list[str] = []

    def window(self, campaign: str) -> int:
        camp = self.config.campaign(campaign)
        assert camp is not None, f"a key of an unknown campaign {campaign!r}"
        return camp.window_seconds

    def flag(self, key: str, what: str) -> None:
        self.problems.append(f"{key}: {what}")

    def check_numbers(self, key: str, field: str, value: Any, window_s: int) -> None:
        if allowed(key, field):
            return
        for path, x in numbers(value):
            if allowed(key, path.rsplit(".", 1)[-1] or field):
                continue
            if epoch_like(x, window_s, self.now):
                self.flag(key, f"epoch-like number {x:.0f} in {field}{'.' + path if path else ''}")

    def check_id(self, key: str, what: str, eid: bytes | str, window_s: int) -> None:
        ms = int((eid.decode() if isinstance(eid, bytes) else eid).split("-")[0])
        if ms % max(window_s * 1000, 1) != 0 or (window_s == 0 and ms != 0):
            self.flag(key, f"{what} {eid!r} is not a window start")

    # --- per key kind --------------------------------------------------------------------------
    def stream(self, key: str, window_s: int, ingress: bool) -> None:
        if ingress and self.r.xlen(key):
            self.flag(key, f"ingress stream still holds {self.r.xlen(key)} entries")
        info = self.r.xinfo_stream(key)
        self.check_id(key, "last generated id", info["last-generated-id"], window_s)
        for group in self.r.xinfo_groups(key):
            self.check_id(key, "group's last delivered id", group["last-delivered-id"], window_s)
            if group["pending"]:
                self.flag(key, f"{group['pending']} pending entries (each holds its delivery time)")
        if ingress:
            return
        camp = self.config.campaign(re.fullmatch(rf"{TAG}:reports", key)["c"])  # type: ignore[index]
        for eid, fields in self.r.xrange(key):
            self.check_id(key, "entry id", eid, window_s)
            if set(fields) != {keys.ENTRY_BATCH, keys.ENTRY_WINDOW, b"count"}:
                self.flag(key, f"entry {eid!r} has fields {sorted(fields)}")
            self.check_numbers(key, "window", fields.get(keys.ENTRY_WINDOW, b""), window_s)
            if camp is not None and camp.privacy_mode != "local":  # a release part: ciphertext only
                part = SealedBatch.FromString(fields[keys.ENTRY_BATCH])
                extra = {f.name for f, _ in part.ListFields()} - SEALED_FIELDS - {"dimensions"}
                if extra:
                    self.flag(key, f"entry {eid!r} has sealed fields {sorted(extra)}")
                self.envelope(key, eid, part, int(fields.get(keys.ENTRY_WINDOW, b"0")))
                continue
            batch = ReportBatch.FromString(fields[keys.ENTRY_BATCH])
            if batch.batch_id:
                self.flag(key, f"entry {eid!r} carries a batch id")
            extra = {f.name for f, _ in batch.ListFields()} - BATCH_FIELDS - {batch.WhichOneof("payload")}
            if extra:
                self.flag(key, f"entry {eid!r} has batch fields {sorted(extra)}")
            self.envelope(key, eid, batch, int(fields.get(keys.ENTRY_WINDOW, b"0")))

    def envelope(self, key: str, eid: bytes, batch: ReportBatch | SealedBatch, window: int) -> None:
        """A batch's dimension values are the campaign's canonical ones (declared values or
        ``other``, every dimension, in name order); its window, if any, is the entry's."""
        camp = self.config.campaign(batch.campaign)
        dims = camp.dimensions if camp is not None else None
        given = [(d.name, d.value) for d in batch.dimensions]
        if dims is None and given or dims is not None and given != dims.pairs(dims.canonical(dict(given))):
            self.flag(key, f"entry {eid!r} has dimension values {given} (not the campaign's canonical ones)")
        if batch.window and batch.window != window:
            self.flag(key, f"entry {eid!r} names window {batch.window}, its entry {window}")

    def marker(self, key: str, window_s: int) -> None:
        if self.r.get(key) != b"1":
            self.flag(key, "dedupe marker holds more than '1'")
        expires_ms = self.now * 1000 + self.r.pttl(key)
        unit = max(window_s, 86400) * 1000
        off = min(expires_ms % unit, unit - expires_ms % unit)
        if off > 1000 or expires_ms < (self.now + keys.DEDUPE_TTL_SECONDS - 60) * 1000:
            self.flag(key, f"dedupe marker expires at {expires_ms:.0f} ms (not a multiple of {unit} ms "
                      "at least 7 days ahead)")

    def hash(self, key: str, window_s: int, fields_re: str) -> None:
        for field, value in self.r.hgetall(key).items():
            name = field.decode()
            if not re.fullmatch(fields_re, name):
                self.flag(key, f"unexpected field {name!r}")
            window = re.search(r":(\d+)(?::|$)", name)
            if window:
                self.check_numbers(key, name, window.group(1), window_s)
            if name.startswith(keys.ACC_PREFIX) or name == keys.PUB_ARRAYS:
                continue  # accumulator / estimate arrays: binary
            if name == keys.PUB_DOC:
                value = json.loads(value)
            self.check_numbers(key, name, value, window_s)

    def key(self, key: str) -> None:
        m = re.fullmatch(rf"{TAG}:(?P<rest>.+)", key)
        rest = m["rest"] if m else ""
        ttl_ok = allowed(key)
        if m and rest in ("ingress", "reports"):
            self.stream(key, self.window(m["c"]), ingress=rest == "ingress")
        elif m and re.fullmatch(r"seen:[0-9a-f]{32}", rest):
            self.marker(key, self.window(m["c"]))
            ttl_ok = True
        elif m and re.fullmatch(rf"state{VERSIONED}", rest):
            self.hash(key, self.window(m["c"]), r"acc:\d+:.+")
        elif m and re.fullmatch(rf"counts{VERSIONED}", rest):
            self.hash(key, self.window(m["c"]), r"(n:\d+|entries:\d+|updated:\d+|rejected"
                                                r"|expired_entries|expired_reports|rel:\d+:[0-9a-f]{32}"
                                                r"|replayed:\d+:[0-9a-f]{32})")
        elif m and rest in ("ingress_top", "reports_top"):  # the last id the collector wrote
            self.check_id(key, "last id", self.r.get(key), self.window(m["c"]))
        elif m and re.fullmatch(rf"published{VERSIONED}:\d+", rest):
            self.check_numbers(key, "key", rest.rsplit(":", 1)[1], self.window(m["c"]))
            self.hash(key, self.window(m["c"]), r"n|digest|config|decoded_at|doc|arrays|error")
        elif m and rest in ("release", "release_batches", "release_ids"):  # keys.release_key …
            self.flag(key, "a release in progress (shuffler.release): the shuffler has not finished it")
        elif m and re.fullmatch(r"handed:[0-9a-f]{32}", rest):  # keys.handed_key: a dedupe-like marker
            self.marker(key, self.window(m["c"]))
            ttl_ok = True
        elif m and rest == "handoff":  # keys.handoff_key: window starts
            self.hash(key, self.window(m["c"]), r"read:\d+")
        elif m and rest in ("sealed_keys", "key_holds"):  # what still needs each analyzer key
            for field, value in self.r.hgetall(key).items():
                name = field.decode()
                if re.fullmatch(r"a:[0-9a-f]{8}", name):  # a release's last analysis entry id
                    self.check_id(key, name, value, self.window(m["c"]))
                elif re.fullmatch(r"[kqf]:[0-9a-f]{8}", name):  # entries sealed to it; question, answer
                    self.check_numbers(key, name, value, self.window(m["c"]))
                else:
                    self.flag(key, f"unexpected field {name!r}")
        elif m and rest in ("metrics", "shuffled"):
            self.hash(key, self.window(m["c"]), r"[a-z_]+")
        elif re.fullmatch(re.escape(keys.OPENED_PREFIX) + r":[0-9a-f]{8}", key):
            for name, value in self.r.hgetall(key).items():
                if len(name) != 32 or len(value) != 8:
                    self.flag(key, f"a field of {len(name)} bytes or a value of {len(value)}: not an enc "
                                   "and a release tag")
            ttl_ok = True  # the key's deletion (accepted_until + key_overlap): no report's time
        elif key == keys.GLOBAL_METRICS_KEY:
            self.hash(key, 0, r".+")
        elif key == keys.REGISTRY_REVISION_KEY:
            self.check_numbers(key, "value", self.r.get(key), 0)
        elif key == keys.REGISTRY_KEY:
            for name, record in self.r.hgetall(key).items():
                self.check_numbers(key, name.decode(), json.loads(record), 0)
        elif not allowed(key):
            self.flag(key, "unknown key: decide whether it holds anything about a report")
        if self.r.pttl(key) >= 0 and not ttl_ok:
            self.flag(key, f"expires in {self.r.pttl(key)} ms (an expiry time)")


def audit(r: redis.Redis, config: Config) -> list[str]:
    """Every problem found in the database of ``r`` (see the module docstring)."""
    a = Audit(r, config)
    for raw in r.scan_iter(count=1000):
        a.key(raw.decode())
    return a.problems


def plant_leaks(r: redis.Redis, config: Config) -> list[str]:
    """Write one of each leak the audit must find into ``config``'s first campaign; returns a
    substring of each expected problem."""
    camp = config.campaigns[0]
    mech = camp.mechanism()
    marker = keys.seen_key(camp.name, 0, bytes(range(16)))
    r.set(marker, "1", ex=keys.DEDUPE_TTL_SECONDS)  # the receive second + 7 days
    batch = mech.encode_batch([0, 1], campaign=camp.name)  # carries a random batch id
    stream = keys.stream_key(camp.name, 0)
    r.xadd(stream, {"batch": batch.SerializeToString(), "window": 0, "count": 2})  # id: receive ms
    r.xadd(keys.ingress_key(camp.name, 0), {"batch": batch.SerializeToString(), "window": 0, "count": 2},
           id="0-1")
    now_ms = int(time.time() * 1000) + 1
    r.hset(keys.metrics_key(camp.name, 0), "last_accept_ms", now_ms)
    pub = keys.published_key(camp.name, 0)
    r.hset(pub, mapping={"n": 2, "doc": json.dumps({"items": [], "received_at": now_ms / 1000})})
    r.set("ldptel:something:new", 1)
    r.set(keys.GLOBAL_METRICS_KEY + "-x", 1, ex=60)
    ingress = keys.ingress_key(camp.name, 0)
    return [f"{marker}: dedupe marker expires", f"{stream}: entry id", f"{stream}: last generated id",
            "carries a batch id", f"{ingress}: ingress stream still",
            f"{keys.metrics_key(camp.name, 0)}: epoch-like number {now_ms}",
            f"{pub}: epoch-like number", "ldptel:something:new: unknown key", "expires in"]
