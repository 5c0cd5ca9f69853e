"""Locust devices for the ldptel collector (run by ``loadtest/run.sh``; see the README).

Each simulated device (a ``FastHttpUser`` on one keep-alive connection) fetches the campaign
configs, then posts ``ReportBatch``es in a closed loop:

- valid batches of every campaign in the config (every mechanism and campaign kind), sizes drawn
  from ``LDPTEL_LT_SIZES`` (``"1-500"`` uniform, or a fixed ``"100"``), each with a fresh random
  batch_id — answered ``202 {"accepted": n}``;
- a share ``LDPTEL_LT_INVALID`` of invalid batches (malformed bytes, unknown campaign, wrong
  payload, a value out of range, a truncated bit row, an implausible bit weight, too many
  reports) — answered 400 (413 for too many reports) and never stored;
- a share ``LDPTEL_LT_RESEND`` of re-sends of an already accepted batch (same bytes, same
  batch_id) — answered ``202 {"accepted": 0, "duplicate": true}``;
- like the SDK, a request that fails with 429, a 5xx or a connection error is retried (same
  body, so the same batch_id) up to ``RETRIES`` times with backoff; a batch still unanswered then
  is given up (the SDK would keep it queued).

- a campaign in a shuffled privacy mode (``lt-sealed``) gets as many posts as any other campaign,
  each ONE device's envelope (as the SDK sends it: issue 36): one report on a Zipf value, sealed
  (one HPKE seal, ~0.1 ms) to the analyzer key of the collector's config once its signature
  verifies under ``[shuffler] analyzer_signing_key`` (``ldptel.client.sealed.pinned_key``, the
  SDK's check), a fresh batch_id each.

Load generation is cheap: a pool of batches per campaign is encoded once per process at start
(``LDPTEL_LT_POOL`` per campaign), and a request only writes a new batch_id into a copy of a pooled
body at a known offset.

Every process keeps a ledger of what the collector confirmed: per campaign the reports and
batches of every batch_id answered 202 (once per batch_id, whichever attempt got the answer), the
duplicate answers, the invalid batches by kind and answer, statuses per request kind, and the
batches that got no definitive answer (e.g. cut off when the run ended), which the checker
resolves through their dedupe markers in Redis, and the invalid batches and re-sends that got
none. The ledger is written to
``$LDPTEL_LT_OUT/ledger-<pid>.json`` when the test stops.
"""

from __future__ import annotations

import json
import os
import random
import resource
import time
from collections import defaultdict
from pathlib import Path

import gevent
import numpy as np
from locust import FastHttpUser, constant, constant_throughput, events, task

from ldptel import key_signing, keys, sealing
from ldptel.campaigns.config import Campaign, load_config
from ldptel.client.sealed import pinned_key
from ldptel.mechanisms.rows import row_bytes, to_rows
from ldptel.privacy.modes import is_shuffled
from ldptel.proto import SEALED_SCHEMA_VERSION, SealedBatch

ROOT = Path(__file__).resolve().parent
CONFIG = load_config(os.environ.get("LDPTEL_LT_CONFIG", ROOT / "ldptel.toml"))
OUT = Path(os.environ.get("LDPTEL_LT_OUT", ROOT / "out"))
TOKENS = CONFIG.server.ingest_tokens
SEALED = {c.name: c for c in CONFIG.campaigns if is_shuffled(c)}  # one device's sealed envelope a post
SEALED_MECHS = {name: c.mechanism() for name, c in SEALED.items()}
SIGNING = (key_signing.signing_public(CONFIG.shuffler.analyzer_signing_key)
           if CONFIG.shuffler.analyzer_signing_key else None)
SIZES = os.environ.get("LDPTEL_LT_SIZES", "1-500")
POOL = int(os.environ.get("LDPTEL_LT_POOL", "24"))
INVALID_SHARE = float(os.environ.get("LDPTEL_LT_INVALID", "0.02"))
RESEND_SHARE = float(os.environ.get("LDPTEL_LT_RESEND", "0.03"))
RATE_PER_USER = float(os.environ.get("LDPTEL_LT_RATE_PER_USER", "0"))  # requests/s; 0 = closed loop
RETRIES = 6  # backoff 0.05 … 1 s: about 2.5 s of retries
WORDS = ["news", "maps", "mail", "chat", "games", "shop", "weather", "music", "video", "bank",
         "travel", "sports", "recipes", "jobs", "cinema", "photos"]
PROTOBUF = "application/x-protobuf"
N_VALID, N_RESEND, N_INVALID, N_RETRY = ("POST /v1/reports", "POST /v1/reports [resend]",
                                         "POST /v1/reports [invalid]", "POST /v1/reports [retry]")


def retryable(status: int) -> bool:
    """Answers the SDK retries: none (connection error), 429 and 5xx."""
    return status == 0 or status == 429 or status >= 500


def size_range() -> tuple[int, int]:
    lo, _, hi = SIZES.partition("-")
    return int(lo), int(hi or lo)


class Body:
    """A serialized batch whose 16-byte batch_id sits at ``offset``."""

    __slots__ = ("campaign", "count", "data", "offset")

    def __init__(self, campaign: str, count: int, data: bytes, offset: int | None) -> None:
        self.campaign, self.count, self.data, self.offset = campaign, count, data, offset

    def fresh(self) -> tuple[bytes, bytes]:
        """(a copy of the body with a new random batch_id, that id)."""
        if self.offset is None:
            return self.data, b""
        bid = random.randbytes(16)
        return self.data[:self.offset] + bid + self.data[self.offset + 16:], bid


def _encode(camp: Campaign, mech, size: int, rng: np.random.Generator, campaign: str | None = None):
    if camp.kind == "heavy_hitters":
        values = [WORDS[i] for i in rng.zipf(1.5, size) % len(WORDS)]
    elif camp.kind == "range":
        values = np.clip(rng.lognormal(np.log(200), 0.7, size).round(), 0, camp.domain_size - 1).astype(int)
    elif camp.oracle == "rappor":
        labels = camp.labels()
        values = [labels[i] for i in rng.zipf(1.5, size) % len(labels)]
    else:
        values = rng.zipf(1.3, size) % camp.domain_size
    placeholder = bytes(rng.integers(0, 256, 16, dtype=np.uint8))
    batch = mech.encode_batch(values, rng=rng, campaign=campaign or camp.name, batch_id=placeholder)
    return batch, placeholder


def _body(batch, placeholder: bytes, campaign: str) -> Body:
    data = batch.SerializeToString()
    assert data.count(placeholder) == 1
    return Body(campaign, batch.count, data, data.index(placeholder))


def build_pool(seed: int) -> tuple[list[Body], list[tuple[str, int, Body]]]:
    """Valid bodies of every campaign, and the invalid ones as (kind, expected status, body)."""
    rng = np.random.default_rng(seed)
    lo, hi = size_range()
    valid: list[Body] = []
    invalid: list[tuple[str, int, Body]] = []
    mechs = {c.name: c.mechanism() for c in CONFIG.campaigns}
    for camp in CONFIG.campaigns:
        if camp.name in SEALED:  # sealed per post (``Device.sealed_body``): placeholders here
            valid += [Body(camp.name, 1, b"", None) for _ in range(POOL)]
            continue
        mech = mechs[camp.name]
        for _ in range(POOL):
            batch, ph = _encode(camp, mech, int(rng.integers(lo, hi + 1)), rng)
            valid.append(_body(batch, ph, camp.name))
        # a value out of range (the first report's), or a truncated bit row
        batch, ph = _encode(camp, mech, 20, rng)
        payload = batch.WhichOneof("payload")
        msg = getattr(batch, payload)
        if payload == "unary":
            msg.bits = msg.bits[:-1]
        elif payload == "rappor":
            msg.cohorts[0] = 2**31
        elif payload in ("heavy_hitters", "range"):
            msg.levels[0] = 2**31
        elif payload == "hadamard":
            msg.indices[0] = 2**31
        else:  # grr, olh
            msg.values[0] = 2**31
        invalid.append(("out_of_range", 400, _body(batch, ph, camp.name)))
        if camp.oracle == "sue":  # every bit set: impossible for an honest device
            batch, ph = _encode(camp, mech, 50, rng)
            batch.unary.bits = b"\xff" * len(batch.unary.bits)
            invalid.append(("implausible_bits", 400, _body(batch, ph, camp.name)))
    first = next(c for c in CONFIG.campaigns if c.name not in SEALED)
    batch, ph = _encode(first, mechs[first.name], 10, rng, campaign="no-such-campaign")
    invalid.append(("unknown_campaign", 400, _body(batch, ph, "no-such-campaign")))
    other = next(c for c in CONFIG.campaigns
                 if c.name not in SEALED and (c.kind != first.kind or c.oracle != first.oracle))
    batch, ph = _encode(first, mechs[first.name], 10, rng, campaign=other.name)
    invalid.append(("wrong_payload", 400, _body(batch, ph, other.name)))
    limit = CONFIG.server.max_reports_per_batch
    batch, ph = _encode(first, mechs[first.name], limit + 1, rng)
    invalid.append(("too_many_reports", 413, _body(batch, ph, first.name)))
    invalid.append(("malformed", 400, Body("", 0, b"\x0a\xff\xff\xff\xff\x0f not a batch", None)))
    return valid, invalid


VALID, INVALID = build_pool(seed=os.getpid())


class Ledger:
    """What the collector confirmed to this process (see the module doc)."""

    def __init__(self) -> None:
        self.accepted_reports: dict[str, int] = defaultdict(int)
        self.accepted_batches: dict[str, int] = defaultdict(int)
        self.duplicate_answers = 0
        self.invalid: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.status: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.pending: dict[bytes, tuple[str, int]] = {}  # sent, no definitive answer yet
        self.unanswered = {"invalid": 0, "resend": 0}  # in flight (or cut off at the end)
        self.unexpected: list[str] = []
        self.t_first: float | None = None
        self.t_last: float | None = None

    def note_unexpected(self, msg: str) -> None:
        if len(self.unexpected) < 100:
            self.unexpected.append(msg)

    def write(self) -> None:
        OUT.mkdir(parents=True, exist_ok=True)
        doc = {
            "pid": os.getpid(), "t_first": self.t_first, "t_last": self.t_last,
            "accepted_reports": dict(self.accepted_reports),
            "accepted_batches": dict(self.accepted_batches),
            "duplicate_answers": self.duplicate_answers,
            "invalid": {k: dict(v) for k, v in self.invalid.items()},
            "status": {k: dict(v) for k, v in self.status.items()},
            "ambiguous": [[c, bid.hex(), n] for bid, (c, n) in self.pending.items()],
            "unanswered": self.unanswered,
            "retries": RETRIES,
            "cpu_seconds": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
            "unexpected": self.unexpected,
        }
        tmp = OUT / f".ledger-{os.getpid()}.json.tmp"
        tmp.write_text(json.dumps(doc))
        tmp.replace(OUT / f"ledger-{os.getpid()}.json")


LEDGER = Ledger()


@events.test_stop.add_listener
def _on_stop(**_kw) -> None:
    LEDGER.write()


@events.quitting.add_listener
def _on_quit(**_kw) -> None:
    LEDGER.write()


class Device(FastHttpUser):
    """A device (or an app's batching sender) posting report batches."""

    wait_time = constant_throughput(RATE_PER_USER) if RATE_PER_USER > 0 else constant(0)
    connection_timeout = 10.0
    network_timeout = 30.0

    def on_start(self) -> None:
        self.headers = {"Content-Type": PROTOBUF, "Authorization": f"Bearer {random.choice(TOKENS)}"}
        self.sent: list[Body] = []  # accepted batches with their ids, for re-sends
        self.sealed_cfg: dict[str, dict] = {}  # shuffled campaigns' configs (their analyzer key)
        self.rng = np.random.default_rng()
        self.fetch_configs()

    @task(1)
    def fetch_configs(self) -> None:
        if LEDGER.t_first is None:
            LEDGER.t_first = time.time()
        with self.client.get("/v1/campaigns", headers={"Authorization": self.headers["Authorization"]},
                             name="GET /v1/campaigns", catch_response=True) as resp:
            LEDGER.status["GET /v1/campaigns"][str(resp.status_code)] += 1
            if resp.status_code != 200:
                resp.failure(f"status {resp.status_code}")
            elif len(resp.json()["campaigns"]) != len(CONFIG.campaigns):
                resp.failure("campaign list incomplete")
            else:
                self.sealed_cfg = {c["name"]: c for c in resp.json()["campaigns"] if c["name"] in SEALED}

    def sealed_body(self, name: str) -> tuple[bytes, bytes]:
        """(one device's envelope of shuffled campaign ``name``, its batch_id): one Zipf value,
        sealed to the config's analyzer key once it verifies under the pinned signing key."""
        cfg, camp = self.sealed_cfg[name], SEALED[name]
        public, key_id = pinned_key(cfg, name, SIGNING)
        version = int(cfg.get("version", camp.version))
        window = keys.window_start(time.time(), int(cfg.get("window_seconds", camp.window_seconds)))
        value = np.array([int(self.rng.zipf(1.3)) % int(camp.domain_size or 1)])
        row = row_bytes(to_rows(SEALED_MECHS[name], {"values": value}, 1))
        bid = random.randbytes(16)
        env = SealedBatch(campaign=name, campaign_version=version, schema_version=SEALED_SCHEMA_VERSION,
                          batch_id=bid, reports=1, key_id=key_id, window=window,
                          messages=sealing.seal(row, public, sealing.info(name, version, window, key_id)))
        return env.SerializeToString(), bid

    @task(200)
    def post_batch(self) -> None:
        u = random.random()
        if u < INVALID_SHARE:
            kind, expected, body = random.choice(INVALID)
            data, _ = body.fresh()
            LEDGER.unanswered["invalid"] += 1
            status, _doc = self._send(data, N_INVALID, expect=expected)
            LEDGER.unanswered["invalid"] -= 1
            LEDGER.invalid[kind][str(status)] += 1
            if status != expected and not retryable(status):
                LEDGER.note_unexpected(f"invalid {kind}: status {status}, expected {expected}")
            return
        if u < INVALID_SHARE + RESEND_SHARE and self.sent:
            body = random.choice(self.sent)
            LEDGER.unanswered["resend"] += 1
            status, doc = self._send(body.data, N_RESEND, expect=202)
            LEDGER.unanswered["resend"] -= 1
            if status == 202:
                if doc.get("duplicate") and doc.get("accepted") == 0:
                    LEDGER.duplicate_answers += 1
                else:
                    LEDGER.note_unexpected(f"re-sent batch stored again: {doc}")
            elif not retryable(status):
                LEDGER.note_unexpected(f"re-sent batch answered {status}: {doc}")
            return
        template = random.choice(VALID)
        data, bid = self.sealed_body(template.campaign) if template.campaign in SEALED else template.fresh()
        LEDGER.pending[bid] = (template.campaign, template.count)
        status, doc = self._send(data, N_VALID, expect=202)
        if status == 202:
            del LEDGER.pending[bid]
            if doc.get("duplicate"):  # an earlier attempt was stored; its answer was lost
                LEDGER.duplicate_answers += 1
            elif doc.get("accepted") != template.count:
                LEDGER.note_unexpected(f"accepted {doc.get('accepted')} of {template.count}")
            LEDGER.accepted_reports[template.campaign] += template.count
            LEDGER.accepted_batches[template.campaign] += 1
            kept = Body(template.campaign, template.count, data, None)
            if len(self.sent) < 64:
                self.sent.append(kept)
            else:
                self.sent[random.randrange(64)] = kept
        elif not retryable(status):  # a valid batch must not be refused
            del LEDGER.pending[bid]
            LEDGER.note_unexpected(f"valid batch of {template.campaign} answered {status}: {doc}")
        # else still pending (retries used up): the checker looks up its dedupe marker

    def _send(self, data: bytes, name: str, expect: int) -> tuple[int, dict]:
        """POST with the SDK's policy: 429, 5xx and connection errors are retried (same body, so
        the same batch_id) with exponential backoff and jitter. Returns the last answer."""
        for attempt in range(RETRIES + 1):
            status, doc = self._post(data, name if attempt == 0 else N_RETRY, expect)
            if not retryable(status) or attempt == RETRIES:
                return status, doc
            gevent.sleep(min(0.05 * 2**attempt, 1.0) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    def _post(self, data: bytes, name: str, expect: int) -> tuple[int, dict]:
        t0 = time.time()
        if LEDGER.t_first is None:
            LEDGER.t_first = t0
        with self.client.post("/v1/reports", data=data, headers=self.headers, name=name,
                              catch_response=True) as resp:
            status = resp.status_code or 0
            LEDGER.status[name][str(status)] += 1
            LEDGER.t_last = time.time()
            try:
                doc = resp.json() if status else {}
            except ValueError:
                doc = {}
            if status == expect:
                resp.success()
            else:
                resp.failure(f"status {status}, expected {expect}")
            return status, doc

