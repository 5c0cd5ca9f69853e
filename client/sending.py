"""The SDK's flush: sending the queued chunks of a ``TelemetryClient`` to the collector.

- Each chunk is one ``ReportBatch`` of one campaign under a batch_id fixed before its first
  attempt (``ldptel.client.queue``), at most ``max_reports_per_batch`` reports and, as far as the
  rows' sizes tell, ``max_body_bytes`` (``ldptel.client.limits``); a body that still comes out
  larger is split without being sent.
- What an answer means is ``ldptel.client.delivery.classify``; a chunk that is too large (413, or
  the connection was cut while a large body was written) is split — a single row into halves —
  and sent again under new batch_ids (the collector stored nothing of it).
- One chunk never holds up the others: after a retryable failure the next chunk is tried; the
  flush pauses (backoff with full jitter) only when two chunks in a row failed or none is left.
- A paused campaign (``409 campaign_paused``) holds nothing up: its reports stay queued, the rest
  of this flush skips that campaign, and the flush returns as soon as everything else is
  delivered (``FlushResult.held``); a later flush (the background sender's) tries it again.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ldptel import privacy_pass
from ldptel.client import delivery
from ldptel.client.configs import CampaignConfigs
from ldptel.client.delivery import CONTENT_TYPE, Action, Attempt, BodyCutOff, FlushResult, HttpStatus
from ldptel.client.envelope import copy_envelope
from ldptel.client.errors import (
    CampaignRefused,
    KeyNotTrusted,
    QueueUnavailable,
    TelemetryError,
    UnknownCampaign,
    VersionClosed,
)
from ldptel.client.health import DropCounter
from ldptel.client.limits import LARGE_BODY, Limits, split_batch
from ldptel.client.queue import Chunk, ReportQueue
from ldptel.client.sealed import ClockOffset, Sealed, accepted_windows, bodies, seal_rows
from ldptel.client.tokens import NoToken, TokenWallet
from ldptel.mechanisms.base import Mechanism
from ldptel.proto import ReportBatch, SealedBatch

log = logging.getLogger("ldptel.client")

LONGEST_NAME = 64  # bytes of a campaign name assumed when budgeting rows
# the collector's answers about a campaign's status (``server/validation.py``)
CAMPAIGN_ANSWERS = ("campaign_paused", "campaign_retired", "version_retired")


class FlushingClient(Protocol):
    """What the flush loop uses of its ``TelemetryClient`` (``ldptel.client.transport``)."""

    batch_size: int
    clock: ClockOffset
    rng: np.random.Generator | None
    backoff_base: float
    max_backoff: float
    _configs: CampaignConfigs
    _dropped: DropCounter
    _sealing_errors: dict[str, str]
    analyzer_signing_key: Ed25519PublicKey | None
    tokens: TokenWallet  # issue 37: the Privacy Pass tokens of require_tokens campaigns

    @property
    def queue(self) -> ReportQueue: ...

    @property
    def limits(self) -> Limits: ...

    def mechanism(self, campaign: str, version: int | None = None) -> Mechanism: ...

    def sealed_config(self, campaign: str, version: int | None = None) -> dict[str, Any] | None: ...

    def pending(self) -> int: ...

    def stopping(self) -> bool: ...

    def sleep(self, delay: float) -> bool: ...

    def _request(self, method: str, path: str, body: bytes | None = None,
                 content_type: str | None = None, authorization: str | None = None) -> bytes: ...


class Sender:
    """The flush loop of ``client`` (one flush at a time: the caller holds its flush lock)."""

    def __init__(self, client: FlushingClient) -> None:
        self.client = client
        self.chunk_reports = client.batch_size  # lowered after a 413 for a chunk of several rows
        self._jitter = random.Random()

    def max_reports(self) -> int:
        c = self.client
        return min(self.chunk_reports, c.batch_size, c.limits.max_reports_per_batch)

    def flush(self, timeout: float | None) -> FlushResult:
        c = self.client
        deadline = None if timeout is None else time.monotonic() + timeout
        result = FlushResult()
        try:
            queue = c.queue
        except QueueUnavailable as exc:
            result.error = str(exc)
            return result
        attempt = 0
        deferred: set[int] = set()  # chunks that asked for a retry since the last pause
        held: dict[str, str] = {}  # paused campaigns → the collector's answer
        streak = 0  # retryable failures in a row
        retry_after: float | None = None
        while not (c.stopping() and timeout is None):
            budget = c.limits.row_budget(" " * LONGEST_NAME)  # the body is checked again once built
            chunk = queue.next_chunk(self.max_reports(), budget, skip=deferred, skip_campaigns=held)
            if chunk is None and not deferred:
                break
            if chunk is None or streak >= 2:
                delay = delivery.backoff(self._jitter, attempt, c.backoff_base, c.max_backoff, retry_after)
                attempt, streak = attempt + 1, 0
                log.info("send failed (%s); retrying in %.2f s", result.error, delay)
                if not self._wait(delay, deadline):
                    break
                deferred.clear()
                continue
            outcome = self.attempt(chunk)
            if outcome.error is not None:
                result.error = outcome.error
            if outcome.action is Action.SENT:
                queue.complete(chunk)
                sent = chunk.count if outcome.accepted is None else outcome.accepted
                if outcome.duplicate:
                    result.duplicates += sent
                else:
                    result.accepted += sent
                attempt = streak = 0
            elif outcome.action is Action.HOLD:
                held[chunk.campaign] = outcome.error or "paused"
            elif outcome.action is Action.DROP:
                self._drop(queue, chunk, result, outcome.reason, outcome.code)
            elif outcome.action is Action.REGROUP and self._split(queue, chunk, result, outcome.error):
                pass
            elif outcome.action is Action.STOP:
                log.error("collector refused the token (%s); keeping %d queued reports",
                          outcome.error, queue.pending())
                break
            else:  # RETRY (or a split that must wait for the campaign configs): others first
                deferred.add(chunk.id)
                streak += 1
                retry_after = outcome.retry_after
        result.pending = c.pending()
        result.held = {name: queue.pending(name) for name in held}
        for name, why in held.items():
            log.info("campaign %s is held (%s): %d reports wait in the queue", name, why,
                     result.held[name])
        if result.pending == 0:
            result.error = None
        return result

    def attempt(self, chunk: Chunk) -> Attempt:
        """Build the chunk's body and post it once (no side effects on the queue)."""
        c = self.client
        try:
            mech = c.mechanism(chunk.campaign, chunk.version)  # refuses a campaign over max_epsilon
            cfg = c.sealed_config(chunk.campaign, chunk.version)
            if cfg is not None and cfg.get("require_tokens"):  # issue 37: a token per envelope
                return self.attempt_tokens(chunk, cfg, mech)
            if cfg is not None:  # a shuffled privacy mode: sealed envelopes (``client.sealed``)
                return self.attempt_sealed(chunk, cfg, mech)
            body = self.batch_body(chunk)
        except VersionClosed as exc:  # the collector no longer takes this version: counted
            return Attempt(Action.DROP, reason=str(exc), code=exc.reason)
        except (UnknownCampaign, CampaignRefused) as exc:
            return Attempt(Action.DROP, reason=str(exc))
        except TelemetryError as exc:  # no campaign configs yet, or a config the SDK refuses
            # (``BadConfig``: a fake_rate over its bound, …; never sealed with it): retry later
            return Attempt(Action.RETRY, error=str(exc))
        except ValueError as exc:  # rows that no longer match the campaign's config
            return Attempt(Action.DROP, reason=f"undecodable queued reports: {exc}")
        limit = c.limits.max_body_bytes
        if len(body) > limit:  # never sent: the collector would refuse it
            why = f"body of {len(body)} bytes over max_body_bytes {limit}"
            return Attempt(delivery.classify(delivery.TOO_LARGE, chunk.count), error=why, reason=why)
        try:
            answer = json.loads(c._request("POST", "/v1/reports", body, CONTENT_TYPE) or b"{}")
        except HttpStatus as exc:
            return self.refused(exc, chunk)
        except BodyCutOff as exc:  # nothing of it was stored: split a large body, else retry
            split = len(body) >= LARGE_BODY and chunk.count > 1
            return Attempt(Action.REGROUP if split else Action.RETRY, error=f"BodyCutOff: {exc}")
        except (OSError, ValueError) as exc:  # network errors, timeouts, garbled answers
            return Attempt(Action.RETRY, error=f"{type(exc).__name__}: {exc}")
        return Attempt(Action.SENT, duplicate=bool(answer.get("duplicate")))

    def attempt_sealed(self, chunk: Chunk, cfg: dict[str, Any], mech: Mechanism) -> Attempt:
        """Seal the chunk's envelopes (``client.sealed.seal_rows``: one per device) and post them
        (``client.sealed.bodies``: several per POST within the limits); configs without
        a usable analyzer key, or an answer that the key or the window is not the collector's
        (``unknown_key``, ``wrong_window``), fetch the configs again and retry (sealed anew, same
        batch ids: nothing is lost or doubled)."""
        envelopes = self._seal(chunk, cfg, mech, self.client.clock.now())
        if isinstance(envelopes, Attempt):
            return envelopes
        accepted = duplicate = 0
        limits = self.client.limits
        for body, count in bodies(envelopes, limits.max_body_bytes, limits.max_reports_per_batch):
            if len(body) > limits.max_body_bytes:
                why = f"sealed body of {len(body)} bytes over max_body_bytes {limits.max_body_bytes}"
                return Attempt(delivery.classify(delivery.TOO_LARGE, chunk.count), error=why, reason=why)
            answer = self._post_sealed(chunk, body)
            if isinstance(answer, Attempt):
                return answer
            dups = int(answer.get("duplicates", count if answer.get("duplicate") else 0))
            duplicate += dups
            accepted += count - dups
        return Attempt(Action.SENT, duplicate=duplicate > 0 and accepted == 0, accepted=accepted or duplicate)

    def untrusted(self, chunk: Chunk, exc: KeyNotTrusted) -> Attempt:
        """Never sealed to a key the pinned signing key did not sign: the chunk is held in the
        queue and the reason said in ``health().sealing_error`` (logged once per reason)."""
        c = self.client
        if c._sealing_errors.get(chunk.campaign) != str(exc):
            log.warning("%s", exc)
        c._sealing_errors[chunk.campaign] = str(exc)
        if c.analyzer_signing_key is not None:  # a rotation may bring a signed key
            c._configs.refresh_in_background()
        return Attempt(Action.HOLD, error=str(exc))

    def attempt_tokens(self, chunk: Chunk, cfg: dict[str, Any], mech: Mechanism) -> Attempt:
        """A campaign with ``require_tokens`` (issue 37): each report (one device's) sealed into an
        envelope of its own (``seal_rows``: batch id derived from the chunk's, the window and the
        report's index, so a retry is the same envelope), each sent with its own Privacy Pass token
        (``client.tokens``); without a token the chunk waits (``no_token``), never sent. The
        envelopes' tokens are forgotten once the whole chunk is taken."""
        c = self.client
        now = c.clock.now()
        c.tokens.prune(chunk.campaign, min(accepted_windows(cfg, now)))
        sealed = self._seal(chunk, cfg, mech, now)
        if isinstance(sealed, Attempt):
            return sealed
        envelopes = [(env, SealedBatch.FromString(env.body).window) for env in sealed]
        accepted = duplicate = 0
        for env, window in envelopes:
            try:
                token = c.tokens.for_envelope(cfg, chunk.campaign, window, env.batch_id, len(envelopes))
            except NoToken as exc:
                c.tokens.waited(chunk.count, str(exc))
                log.info("no token: %s; %d reports wait", exc, chunk.count)
                return Attempt(Action.RETRY, error=f"no_token: {exc}")
            answer = self._post_sealed(chunk, env.body, token, env.batch_id)
            if isinstance(answer, Attempt):
                return answer
            if answer.get("duplicate"):
                duplicate += env.reports
            else:
                accepted += env.reports
        c.tokens.cleared()
        for env, _ in envelopes:
            c.tokens.discard(env.batch_id)
        return Attempt(Action.SENT, duplicate=duplicate > 0 and accepted == 0, accepted=accepted or duplicate)

    def _seal(self, chunk: Chunk, cfg: dict[str, Any], mech: Mechanism, now: float) -> list[Sealed] | Attempt:
        """The chunk's envelopes (``seal_rows``, only to a key the pinned signing key signed;
        reports of a window the collector no longer takes counted as ``stale_window``), or the
        ``Attempt`` when they cannot be sealed; configs without a usable analyzer key are asked
        for again and ``TelemetryError`` raised (``attempt`` retries)."""
        c = self.client
        try:
            envelopes, stale = seal_rows(cfg, mech, chunk.campaign, chunk.version, chunk.batch_id,
                                         chunk.batches, now, c.rng, c.analyzer_signing_key)
        except KeyNotTrusted as exc:
            return self.untrusted(chunk, exc)
        except TelemetryError:  # no usable analyzer key in the configs held (the aggregator had
            c._configs.refresh_in_background()  # published none yet): ask again; ``attempt`` retries
            raise
        except (MemoryError, OverflowError) as exc:  # never raised from flush(); not kept to fail again
            why = f"campaign {chunk.campaign!r}: cannot seal its reports ({type(exc).__name__}: {exc})"
            return Attempt(Action.DROP, error=why, reason=why, code="bad_config")
        c._sealing_errors.pop(chunk.campaign, None)
        if stale:
            why = f"campaign {chunk.campaign!r}: {stale} reports of a window the collector no longer takes"
            log.warning("dropping %s", why)
            c._dropped.add("stale_window", stale, why)
        return envelopes

    def _post_sealed(self, chunk: Chunk, body: bytes, token: privacy_pass.Token | None = None,
                     token_batch: bytes | None = None) -> dict[str, Any] | Attempt:
        """POST one sealed body (with ``token``'s ``PrivateToken`` authorization if given): the
        answer's JSON, or the ``Attempt`` after a failure. ``token_spent``/``bad_token``: that
        envelope's token (``token_batch``) is never offered again, retry; ``unknown_key``/
        ``wrong_window``: the configs are fetched again, retry (sealed anew, same batch ids)."""
        c = self.client
        auth = privacy_pass.authorization(token) if token is not None else None
        try:
            return dict(json.loads(c._request("POST", "/v1/reports", body, CONTENT_TYPE,
                                              authorization=auth) or b"{}"))
        except HttpStatus as exc:
            code = delivery.error_code(exc.body)
            if code in ("token_spent", "bad_token") and token_batch is not None:
                c.tokens.discard(token_batch)
                return Attempt(Action.RETRY, error=str(exc))
            if code in ("unknown_key", "wrong_window"):
                try:
                    c._configs.fetch()
                except TelemetryError:
                    pass
                return Attempt(Action.RETRY, error=str(exc))
            return self.refused(exc, chunk)
        except (OSError, ValueError) as exc:
            return Attempt(Action.RETRY, error=f"{type(exc).__name__}: {exc}")

    def refused(self, exc: HttpStatus, chunk: Chunk) -> Attempt:
        """What to do after a non-2xx answer (``delivery.classify``), except for a campaign's
        status answers, after which the configs are fetched again: ``409 campaign_paused`` keeps
        the chunk (``HOLD``: this flush skips the campaign; it is valid once it resumes), ``409
        version_retired`` and ``410 campaign_retired`` drop it, counted under that reason."""
        code = delivery.error_code(exc.body) if exc.status in (409, 410) else None
        if code not in CAMPAIGN_ANSWERS:
            return Attempt.from_status(exc, chunk.count)
        self.client._configs.refresh_in_background()
        if code == "campaign_paused":
            return Attempt(Action.HOLD, error=str(exc))
        return Attempt(Action.DROP, error=str(exc), reason=f"collector answered {exc}", code=code)

    def batch_body(self, chunk: Chunk) -> bytes:
        """The chunk's rows as one columnar ``ReportBatch`` of the chunk's campaign version under
        its batch_id (rows of several reports are packed with that version's mechanism; the rows
        of a chunk share their window and dimension values, ``ldptel.client.envelope``)."""
        if len(chunk.batches) == 1:
            batch = ReportBatch.FromString(chunk.batches[0])
        else:
            mech = self.client.mechanism(chunk.campaign, chunk.version)
            parts = [mech.columns(ReportBatch.FromString(b)) for b in chunk.batches]
            columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            batch = copy_envelope(ReportBatch.FromString(chunk.batches[0]),
                                  mech.pack(columns, chunk.count, chunk.campaign))
        batch.campaign = chunk.campaign
        batch.batch_id = chunk.batch_id
        batch.campaign_version = chunk.version
        return batch.SerializeToString()

    def _split(self, queue: ReportQueue, chunk: Chunk, result: FlushResult, why: str | None) -> bool:
        """Send a too-large chunk's rows in smaller chunks; a single row is split into halves
        (under new batch_ids: the collector stored nothing of it). False when that must wait (no
        campaign config to split a row with)."""
        log.warning("batch of %d reports of %s too large (%s); splitting", chunk.count, chunk.campaign, why)
        if len(chunk.batches) > 1:
            self.chunk_reports = max(1, min(self.chunk_reports, chunk.count // 2))
            queue.release(chunk)
            return True
        try:
            mech = self.client.mechanism(chunk.campaign, chunk.version)
            parts = split_batch(mech, ReportBatch.FromString(chunk.batches[0]))
        except VersionClosed as exc:
            self._drop(queue, chunk, result, str(exc), exc.reason)
        except UnknownCampaign as exc:
            self._drop(queue, chunk, result, str(exc))
        except ValueError as exc:
            self._drop(queue, chunk, result, f"undecodable queued reports: {exc}")
        except TelemetryError as exc:
            result.error = str(exc)
            return False
        else:
            queue.split(chunk, [(p.count, p.SerializeToString()) for p in parts])
        return True

    def _wait(self, delay: float, deadline: float | None) -> bool:
        """Sleep ``delay`` unless that passes the deadline or the client is stopping."""
        if deadline is not None and time.monotonic() + delay > deadline:
            return False
        return not self.client.sleep(delay)

    def _drop(self, queue: ReportQueue, chunk: Chunk, result: FlushResult, why: str,
              code: str = "") -> None:
        """Drop a chunk; ``code``: counted in ``health().dropped`` under that reason."""
        log.error("dropping %d reports of %s: %s", chunk.count, chunk.campaign, why)
        queue.complete(chunk)
        result.dropped += chunk.count
        if code:
            self.client._dropped.add(code, chunk.count, why, logged=True)


class BackgroundSender:
    """The background sender of a client: calls ``flush()`` every ``interval`` seconds, or sooner
    once ``batch_size`` reports were queued since it last ran; ``stop_event`` set ends it."""

    def __init__(self, flush: Callable[[], object], stop_event: threading.Event, interval: float,
                 batch_size: int) -> None:
        self._flush, self._stop, self.interval, self.batch_size = flush, stop_event, interval, batch_size
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._since_wake = 0
        self._thread: threading.Thread | None = None

    def queued(self, n: int) -> None:
        """``n`` reports were queued: wake the sender once a full batch is waiting."""
        with self._lock:
            self._since_wake += n
            full = self._since_wake >= self.batch_size
        if full and self._thread is not None:
            self._wake.set()

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="ldptel-sender", daemon=True)
            self._thread.start()

    def join(self) -> None:
        """Wait for the sender to end (after ``stop_event`` was set)."""
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            with self._lock:
                self._since_wake = 0
            if self._stop.is_set():
                break
            try:
                self._flush()
            except Exception:  # keep the sender alive; the queue is intact
                log.exception("background flush failed")
