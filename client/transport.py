"""``TelemetryClient``: the SDK's batching HTTP transport.

    client = TelemetryClient("https://collector.example", token, queue_path="ldptel-queue.sqlite")
    client.report("homepage", "b")     # randomized now (ε-LDP); only the randomized report is queued
    client.flush()                     # or client.start() for a background sender

- Campaign configs come from ``GET /v1/campaigns`` and are cached (memory, and the SQLite file so
  reporting works offline after a restart), refreshed after ``config_ttl`` seconds.
- ``report(campaign, value)`` randomizes immediately with the campaign's mechanism and OS
  randomness; the raw value is never stored or sent. Reports wait in a SQLite queue
  (``ldptel.client.queue``), which survives restarts.
- ``flush()`` (and the background sender) posts the queue as columnar ``ReportBatch`` es, one per
  chunk of at most ``batch_size`` reports of one campaign, each chunk under a batch_id fixed before
  its first attempt, so a retry is deduplicated by the collector. What each answer means (retry
  with backoff, drop, regroup, stop) is ``ldptel.client.delivery.classify``.
- RAPPOR and heavy hitters: the device secret (RAPPOR's cohort and memoized permanent randomized
  response, the heavy-hitter level and seed-pool index) is created once and kept in the SQLite
  file; each campaign uses HMAC-SHA256(secret, campaign name) (``ldptel.client.device_secret``).
  Mechanisms are built from the public config by ``ldptel.client.builder``.

Thread-safe: ``report`` and ``flush`` may be called from any thread.
Depends only on the standard library, numpy and protobuf (through the mechanisms).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldptel.client import delivery
from ldptel.client.builder import CAMPAIGN_KINDS, build_mechanism, privacy_loss, uses_device_secret
from ldptel.client.delivery import AUTH_STATUS, CONTENT_TYPE, Action, Attempt, FlushResult, HttpStatus
from ldptel.client.device_secret import derive, device_secret
from ldptel.client.errors import CampaignRefused, TelemetryError, UnknownCampaign
from ldptel.client.mechanisms.base import Mechanism
from ldptel.client.queue import Chunk, ReportQueue
from ldptel.proto import ReportBatch

log = logging.getLogger("ldptel.client")

__all__ = ["CampaignRefused", "FlushResult", "TelemetryClient", "TelemetryError", "UnknownCampaign",
           "default_queue_path"]
DEFAULT_MAX_EPSILON = 8.0


def default_queue_path(url: str) -> Path:
    """``~/.cache/ldptel/queue-<hash of url>.sqlite``."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ldptel"
    return base / f"queue-{hashlib.sha256(url.encode()).hexdigest()[:12]}.sqlite"


class TelemetryClient:
    """Randomize on the device, queue on disk, send in batches (see the module docstring).

    ``rng`` (a seeded ``numpy.random.Generator``) is for tests and simulations only; without it
    all randomness comes from the OS. ``max_epsilon``: a device never trusts the server's ε
    blindly; a campaign whose per-report ε or lifetime ε∞ (``builder.privacy_loss``, computed
    from the config's parameters) exceeds it is refused: ``report`` raises ``CampaignRefused``
    naming it and nothing of it is sent.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        queue_path: str | os.PathLike | None = None,
        batch_size: int = 1000,
        timeout: float = 10.0,
        config_ttl: float = 300.0,
        flush_interval: float = 10.0,
        backoff_base: float = 0.2,
        max_backoff: float = 60.0,
        background: bool = False,
        rng: np.random.Generator | None = None,
        max_epsilon: float = DEFAULT_MAX_EPSILON,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http(s) URL, got {url!r}")
        if not isinstance(token, str) or not token:
            raise ValueError("token must be a non-empty string")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(max_epsilon, bool) or not isinstance(max_epsilon, (int, float)) or not max_epsilon > 0:
            raise ValueError(f"max_epsilon must be a positive number, got {max_epsilon!r}")
        self.max_epsilon = float(max_epsilon)
        self.url = url.rstrip("/")
        self.token = token
        self.batch_size = batch_size
        self.timeout = timeout
        self.config_ttl = config_ttl
        self.flush_interval = flush_interval
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.rng = rng
        self.queue = ReportQueue(queue_path or default_queue_path(self.url))
        self._lock = threading.RLock()  # configs and mechanisms
        self._flush_lock = threading.Lock()  # one flush at a time
        self._configs: dict[str, dict] = {}
        self._configs_at = -float("inf")
        self._mechs: dict[str, tuple[dict, Mechanism]] = {}
        self._jitter = random.Random()
        self._chunk_reports = batch_size
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._since_wake = 0
        self._thread: threading.Thread | None = None
        if background:
            self.start()

    # --- campaign configs ---------------------------------------------------------------------
    def campaigns(self, refresh: bool = False) -> dict[str, dict]:
        """Public campaign configs by name: fetched from the collector at most every
        ``config_ttl`` seconds; the last copy (memory, then the queue file) if it is unreachable."""
        with self._lock:
            fresh = time.monotonic() - self._configs_at < self.config_ttl
            if self._configs and fresh and not refresh:
                return self._configs
            try:
                data = json.loads(self._request("GET", "/v1/campaigns"))
                configs = {c["name"]: c for c in data["campaigns"]}
                self.queue.set_meta("campaigns", json.dumps(configs).encode())
            except HttpStatus as exc:
                if exc.status in AUTH_STATUS:
                    raise TelemetryError(f"collector refused the token ({exc.status})") from None
                configs = self._stored_configs(exc)
            except (OSError, ValueError, KeyError) as exc:
                configs = self._stored_configs(exc)
            self._configs, self._configs_at = configs, time.monotonic()
            return configs

    def _stored_configs(self, exc: Exception) -> dict[str, dict]:
        if self._configs:
            return self._configs
        stored = self.queue.get_meta("campaigns")
        if stored is None:
            raise TelemetryError(f"no campaign configs: the collector is unreachable ({exc})") from None
        log.info("using cached campaign configs (collector unreachable: %s)", exc)
        return json.loads(stored)

    def mechanism(self, campaign: str) -> Mechanism:
        """The mechanism of ``campaign`` as configured on the collector (cached)."""
        configs = self.campaigns()
        cfg = configs.get(campaign)
        if cfg is None:
            configs = self.campaigns(refresh=True)
            cfg = configs.get(campaign)
        if cfg is None:
            raise UnknownCampaign(f"unknown campaign {campaign!r} (collector has {sorted(configs)})")
        with self._lock:
            cached = self._mechs.get(campaign)
            if cached is None or cached[0] != cfg:
                if cfg.get("kind", "frequency") not in CAMPAIGN_KINDS:
                    raise TelemetryError(f"campaign {campaign!r}: unknown campaign kind {cfg['kind']!r}")
                secret = self._device_secret(campaign) if uses_device_secret(cfg) else None
                built = build_mechanism(cfg, secret)
                what, eps = privacy_loss(built)
                if eps > self.max_epsilon:
                    raise CampaignRefused(
                        f"campaign {campaign!r} refused: its {what} = {eps:.3g} exceeds this client's "
                        f"max_epsilon = {self.max_epsilon:g}; nothing is reported or sent for it")
                cached = self._mechs[campaign] = (cfg, built)
            return cached[1]

    def _config_and_mechanism(self, campaign: str) -> tuple[dict, Mechanism]:
        mech = self.mechanism(campaign)
        with self._lock:
            return self._mechs[campaign][0], mech

    def _device_secret(self, campaign: str) -> bytes:
        """HMAC-SHA256(device secret, campaign): the device secret is drawn once and kept in the
        queue file, so cohorts, memoized responses, levels and seed indices survive restarts."""
        device = self.queue.meta_setdefault("device_secret", device_secret)
        return derive(device, b"ldptel/campaign-secret\0" + campaign.encode())

    def _index(self, cfg: dict, value: Any) -> Any:
        """A categorical label → its index; integers (and RAPPOR strings) pass through."""
        labels = cfg.get("domain")
        if labels is not None and isinstance(value, str):
            try:
                return labels.index(value)
            except ValueError:
                raise ValueError(f"value {value!r} is not in the domain of {cfg['name']!r}") from None
        return value

    # --- reporting ----------------------------------------------------------------------------
    def report(self, campaign: str, value: Any) -> None:
        """Randomize ``value`` for ``campaign`` now and queue the randomized report."""
        cfg, mech = self._config_and_mechanism(campaign)
        value = self._index(cfg, value)
        if self.rng is not None and not uses_device_secret(cfg):
            batch = mech.encode_batch([value], rng=self.rng, campaign=campaign, batch_id=b"")
        else:
            batch = mech.encode(value, campaign=campaign)
            batch.batch_id = b""
        self.queue.append(campaign, 1, batch.SerializeToString())
        self._maybe_wake()

    def report_many(self, campaign: str, values: Sequence[Any]) -> int:
        """Randomize many values at once (vectorized), each as an independent report — for RAPPOR
        each value is a separate simulated device (own cohort and permanent response). For
        simulations and load tests; returns the number queued. (Heavy hitters: each value a device
        with its own level and seed index.)"""
        cfg, mech = self._config_and_mechanism(campaign)
        vals = [self._index(cfg, v) for v in values]
        rows = []
        for start in range(0, len(vals), self.batch_size):
            part = vals[start:start + self.batch_size]
            batch = mech.encode_batch(part, rng=self.rng, campaign=campaign, batch_id=b"")
            rows.append((campaign, len(part), batch.SerializeToString()))
        self.queue.append_many(rows)
        self._maybe_wake(len(vals))
        return len(vals)

    def pending(self) -> int:
        """Reports queued and not yet delivered."""
        return self.queue.pending()

    # --- sending ------------------------------------------------------------------------------
    def flush(self, timeout: float | None = 30.0) -> FlushResult:
        """Send everything queued; retry with backoff until done or ``timeout`` seconds have passed
        (None: no limit). What is not delivered stays queued."""
        deadline = None if timeout is None else time.monotonic() + timeout
        result = FlushResult()
        with self._flush_lock:
            attempt = 0
            while not (self._stop.is_set() and timeout is None):
                chunk = self.queue.next_chunk(self._chunk_reports)
                if chunk is None:
                    break
                outcome = self._attempt(chunk)
                if outcome.error is not None:
                    result.error = outcome.error
                if outcome.action is Action.SENT:
                    self.queue.complete(chunk)
                    if outcome.duplicate:
                        result.duplicates += chunk.count
                    else:
                        result.accepted += chunk.count
                    attempt = 0
                elif outcome.action is Action.DROP:
                    self._drop(chunk, result, outcome.reason)
                elif outcome.action is Action.REGROUP:
                    self._chunk_reports = max(1, chunk.count // 2)
                    log.warning("batch of %d reports too large; regrouping", chunk.count)
                    self.queue.release(chunk)
                elif outcome.action is Action.STOP:
                    log.error("collector refused the token (%s); keeping %d queued reports",
                              outcome.error, self.queue.pending())
                    break
                else:  # RETRY
                    delay = delivery.backoff(self._jitter, attempt, self.backoff_base,
                                             self.max_backoff, outcome.retry_after)
                    attempt += 1
                    log.info("send failed (%s); retrying in %.2f s", result.error, delay)
                    if not self._wait(delay, deadline):
                        break
        result.pending = self.queue.pending()
        if result.pending == 0:
            result.error = None
        return result

    def _attempt(self, chunk: Chunk) -> Attempt:
        """Build the chunk's body and post it once (no side effects on the queue)."""
        try:
            self.mechanism(chunk.campaign)  # refuses a campaign over max_epsilon
            body = self._batch_body(chunk)
        except (UnknownCampaign, CampaignRefused) as exc:
            return Attempt(Action.DROP, reason=str(exc))
        except TelemetryError as exc:  # no campaign configs yet: retry later
            return Attempt(Action.RETRY, error=str(exc))
        except ValueError as exc:  # rows that no longer match the campaign's config
            return Attempt(Action.DROP, reason=f"undecodable queued reports: {exc}")
        try:
            answer = json.loads(self._request("POST", "/v1/reports", body, CONTENT_TYPE) or b"{}")
        except HttpStatus as exc:
            return Attempt.from_status(exc, len(chunk.batches))
        except (OSError, ValueError) as exc:  # network errors, timeouts, garbled answers
            return Attempt(Action.RETRY, error=f"{type(exc).__name__}: {exc}")
        return Attempt(Action.SENT, duplicate=bool(answer.get("duplicate")))

    def _wait(self, delay: float, deadline: float | None) -> bool:
        """Sleep ``delay`` unless that passes the deadline or the client is stopping."""
        if deadline is not None and time.monotonic() + delay > deadline:
            return False
        return not self._stop.wait(delay)

    def _drop(self, chunk: Chunk, result: FlushResult, why: str) -> None:
        log.error("dropping %d reports of %s: %s", chunk.count, chunk.campaign, why)
        self.queue.complete(chunk)
        result.dropped += chunk.count

    def _batch_body(self, chunk: Chunk) -> bytes:
        """The chunk's rows as one columnar ``ReportBatch`` under the chunk's batch_id."""
        if len(chunk.batches) == 1:
            batch = ReportBatch.FromString(chunk.batches[0])
        else:
            mech = self.mechanism(chunk.campaign)
            parts = [mech.columns(ReportBatch.FromString(b)) for b in chunk.batches]
            columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            batch = mech.pack(columns, chunk.count, chunk.campaign)
        batch.campaign = chunk.campaign
        batch.batch_id = chunk.batch_id
        return batch.SerializeToString()

    def _request(self, method: str, path: str, body: bytes | None = None,
                 content_type: str | None = None) -> bytes:
        return delivery.request(self.url + path, self.token, self.timeout, method, body, content_type)

    # --- background sender ------------------------------------------------------------------
    def _maybe_wake(self, n: int = 1) -> None:
        """Wake the background sender once a full batch was queued since it last ran."""
        with self._lock:
            self._since_wake += n
            full = self._since_wake >= self.batch_size
        if full and self._thread is not None:
            self._wake.set()

    def start(self) -> None:
        """Start the background sender: flushes every ``flush_interval`` seconds, or sooner when a
        full batch is queued."""
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="ldptel-sender", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            with self._lock:
                self._since_wake = 0
            if self._stop.is_set():
                break
            try:
                self.flush(timeout=None)
            except Exception:  # keep the sender alive; the queue is intact
                log.exception("background flush failed")

    def close(self, flush_timeout: float | None = 5.0) -> FlushResult | None:
        """Stop the background sender, try a last flush (``flush_timeout`` seconds; None: skip),
        and close the queue file. Undelivered reports stay in it for the next start."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        self._stop.clear()
        result = None
        if flush_timeout is not None:
            try:
                result = self.flush(timeout=flush_timeout)
            except TelemetryError as exc:
                log.warning("final flush: %s", exc)
        self.queue.close()
        return result

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
