"""``TelemetryClient``: the SDK's batching HTTP transport.

    client = TelemetryClient("https://collector.example", token, queue_path="ldptel-queue.sqlite")
    client.report("homepage", "b")     # randomized now (ε-LDP); only the randomized report is queued
    client.report("homepage", "b", dimensions={"arm": "treatment"})  # a campaign's public dimensions
    client.flush()                     # or client.start() for a background sender

- Campaign configs and the collector's limits come from ``GET /v1/campaigns``, cached in memory
  and the SQLite file, refreshed in the background (``ldptel.client.configs``): ``report`` never
  makes a network request (a device's first run waits at most ``timeout`` s for the first answer).
- ``report(campaign, value)`` randomizes immediately with the campaign's mechanism and OS
  randomness; the raw value is never stored or sent (dimension values and the device-level kinds:
  ``ldptel.client.reporting``). Reports wait in a SQLite queue (``ldptel.client.queue``), which
  survives restarts. When the queue cannot be opened or written (disk full, read-only directory)
  the report is dropped and counted, never raised into the app: ``health()`` says why.
  ``UnknownCampaign`` and ``ValueError`` (naming the campaign) are the app's mistakes and are
  raised.
- ``flush()`` (and the background sender) posts the queue as columnar ``ReportBatch`` es, one per
  chunk of one campaign within the collector's limits, each chunk under a batch_id fixed before
  its first attempt, so a retry is deduplicated by the collector (``ldptel.client.sending``; what
  each answer means is ``ldptel.client.delivery.classify``).
- The device secret (RAPPOR's cohort and permanent response, the heavy-hitter level and seed
  index) is drawn once and kept in the SQLite file (in a data directory, ``queue.store_path``);
  each campaign uses HMAC-SHA256(secret, campaign name) (``ldptel.mechanisms.device_secret``).

Thread-safe. Depends only on the standard library, numpy, protobuf and platformdirs.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ldptel import key_signing
from ldptel.client import delivery, reporting
from ldptel.client.configs import MAX_ANSWER_BYTES as ANSWER_CAP
from ldptel.client.configs import MAX_ASKED, META_KEY, CampaignConfigs, config_for, version_config
from ldptel.client.delivery import FlushResult
from ldptel.client.device_level import DeviceWindows, is_device_level
from ldptel.client.errors import (
    CampaignRefused,
    QueueUnavailable,
    TelemetryError,
    UnknownCampaign,
    VersionClosed,
)
from ldptel.client.health import DropCounter, Health
from ldptel.client.ledger import REFUSALS, PrivacyLedger, check_limit
from ldptel.client.limits import Limits
from ldptel.client.mechanism_cache import MechanismCache
from ldptel.client.queue import ReportQueue, default_queue_path, store_path
from ldptel.client.sealed import ClockOffset, is_sealed
from ldptel.client.sending import BackgroundSender, Sender
from ldptel.client.tokens import TokenWallet
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.builder import value_index
from ldptel.mechanisms.claims import report_cost
from ldptel.mechanisms.device_secret import derive, device_secret

log = logging.getLogger("ldptel.client")

__all__ = ["CampaignRefused", "FlushResult", "Health", "TelemetryClient", "TelemetryError",
           "UnknownCampaign", "default_queue_path"]
DEFAULT_MAX_EPSILON = 8.0

# what a full disk, a read-only directory or a broken queue file raise
STORAGE_ERRORS = (sqlite3.Error, OSError, QueueUnavailable)
QUEUE_RETRY_SECONDS = 10.0


class TelemetryClient:
    """Randomize on the device, queue on disk, send in batches (see the module docstring).

    ``rng`` (a seeded ``numpy.random.Generator``) is for tests and simulations only; without it
    all randomness comes from the OS. ``max_epsilon``: a device never trusts the server's ε
    blindly; a campaign whose per-report ε or lifetime ε∞ (``builder.privacy_loss``, computed
    from the config's parameters) exceeds it is refused: ``report`` raises ``CampaignRefused``
    naming it and nothing of it is sent. ``accept_unrandomized``: also report to
    ``shuffled-fakes`` campaigns without local randomization, whose report is the true index
    (sealed to the analyzer; its privacy is central only: the shuffler, the fakes and the
    encryption, docs/privacy.md); refused by default. ``analyzer_signing_key``: the aggregator's
    Ed25519 public key (base64, ``ldptel analyzer-key show``) the app pins; reports of shuffled
    campaigns are sealed only to an analyzer key signed by it (without it they wait in the queue
    and ``health().sealing_error`` names the option; ``ldptel.client.sealed.pinned_key``).
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        queue_path: str | os.PathLike[str] | None = None,
        batch_size: int = 1000,
        timeout: float = 10.0,
        config_ttl: float = 300.0,
        flush_interval: float = 10.0,
        backoff_base: float = 0.2,
        max_backoff: float = 60.0,
        background: bool = False,
        rng: np.random.Generator | None = None,
        max_epsilon: float = DEFAULT_MAX_EPSILON,
        lifetime_epsilon: float | None = None,
        scope: str = "campaign",
        accept_unrandomized: bool = False,
        dimensions: Mapping[str, Any] | None = None,
        analyzer_signing_key: str | bytes | None = None,
        attestation: Callable[[], str] | None = None,
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
        self.analyzer_signing_key = (None if analyzer_signing_key is None
                                     else key_signing.signing_public(analyzer_signing_key))
        self._sealing_errors: dict[str, str] = {}  # campaign → why its reports are not sealed
        self.lifetime_epsilon, self.scope = check_limit(lifetime_epsilon, scope)
        self._ledger: PrivacyLedger | None = None
        self.url = url.rstrip("/")
        self.token = token
        self.batch_size = batch_size
        self.timeout = timeout
        self.flush_interval = flush_interval
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.rng = rng
        self.dimensions = dict(dimensions or {})  # default dimension values (``client.reporting``)
        self.device_windows = DeviceWindows(self)
        self.queue_path = store_path(queue_path, self.url)
        self._queue: ReportQueue | None = None
        self._queue_error: str | None = None  # why the queue cannot be opened or written
        self._queue_retry_at = -float("inf")
        self._dropped = DropCounter(announce=True)  # every drop on the device is logged (rate-limited)
        self._clipped = DropCounter()  # numeric values clipped to [lower, upper], by campaign
        # issue 37: campaigns with require_tokens send each envelope with a Privacy Pass token from
        # the issuer; ``attestation`` returns a fresh attestation for it (e.g. the app backend's JWT)
        if attestation is not None and not callable(attestation):
            raise ValueError("attestation must be a function returning a fresh attestation string")
        self.attestation = attestation
        self.tokens = TokenWallet(self)
        self._lock = threading.RLock()  # the queue and the ledger
        self._flush_lock = threading.Lock()  # one flush at a time
        self._configs = CampaignConfigs(self._get_campaigns,
                                        lambda: self.queue.get_meta(META_KEY),
                                        lambda data: self.queue.set_meta(META_KEY, data), config_ttl)
        self._mechs = MechanismCache(self.max_epsilon, self._device_secret, accept_unrandomized)
        self.clock = ClockOffset()  # the collector's clock (sealed campaigns bind a window)
        self._configs.on_answer = lambda data: self.clock.heard(data.get("server_time"))
        self._sender = Sender(self)
        self._stop = threading.Event()
        self._background = BackgroundSender(lambda: self.flush(timeout=None), self._stop,
                                            flush_interval, batch_size)
        self._open_queue()
        if background:
            self.start()

    # --- the queue file -----------------------------------------------------------------------
    def _open_queue(self) -> ReportQueue | None:
        """Open the queue file (again at most every ``QUEUE_RETRY_SECONDS`` after a failure)."""
        with self._lock:
            if self._queue is None and time.monotonic() >= self._queue_retry_at:
                try:
                    self._queue, self._queue_error = ReportQueue(self.queue_path), None
                except STORAGE_ERRORS as exc:
                    self._queue_error = f"cannot open {self.queue_path}: {type(exc).__name__}: {exc}"
                    self._queue_retry_at = time.monotonic() + QUEUE_RETRY_SECONDS
                    log.error("report queue unavailable: %s", self._queue_error)
            return self._queue

    @property
    def queue(self) -> ReportQueue:
        """The SQLite queue; ``QueueUnavailable`` when its file cannot be opened."""
        queue = self._open_queue()
        if queue is None:
            raise QueueUnavailable(self._queue_error or "queue unavailable")
        return queue

    def _store(self, campaign: str, rows: list[tuple[Any, ...]], n: int,
               guard: Callable[[sqlite3.Connection], bool] | None = None) -> bool:
        """Queue ``rows`` (``guard``, the ledger, admits them in the same transaction); on a storage
        error or a store lost (deleted or replaced while open) drop, count and say why (``health``)."""
        if self._queue is not None and (lost := self._queue.lost()) is not None:
            self._drop_here("store_lost", n, f"campaign {campaign!r}: {lost}; dropped until the app restarts")
            return False
        try:
            queued = self.queue.append_many(rows, guard)
        except STORAGE_ERRORS as exc:
            self._drop_here("queue_write_failed", n, f"campaign {campaign!r}: cannot queue "
                                                     f"{n} reports: {type(exc).__name__}: {exc}")
            return False
        self._queue_error = None
        return queued

    def _drop_here(self, reason: str, n: int, error: str) -> None:
        self._queue_error = error if reason.startswith("queue") else self._queue_error
        self._dropped.add(reason, n, error)  # logged, at most once a minute per reason

    def health(self) -> Health:
        """Whether reports are being queued, and what was dropped on the device and why."""
        config_error = None if self._configs.configs else (self._configs.last_error or "no configs yet")
        store_error = self._queue.lost() if self._queue is not None else None
        sealing_error = "; ".join(v for _, v in sorted(self._sealing_errors.items())) or None
        return Health(ok=self._queue_error is None and config_error is None and store_error is None
                      and sealing_error is None,
                      queue_error=self._queue_error, config_error=config_error,
                      dropped=self._dropped.snapshot(), last_error=self._dropped.last_error,
                      pending=self.pending(), clipped=self._clipped.snapshot(), store_error=store_error,
                      sealing_error=sealing_error, waiting=self.tokens.waiting())

    # --- campaign configs ---------------------------------------------------------------------
    def campaigns(self, refresh: bool = False) -> dict[str, dict[str, Any]]:
        """Public campaign configs by name: fetched from the collector (blocking) when older than
        ``config_ttl`` seconds; the last copy (memory, then the queue file) if it is unreachable."""
        if self._configs.configs and self._configs.fresh() and not refresh:
            return self._configs.configs
        return self._configs.fetch()

    @property
    def limits(self) -> Limits:
        """The collector's ``max_body_bytes`` and ``max_reports_per_batch`` as last heard."""
        return self._configs.limits

    def mechanism(self, campaign: str, version: int | None = None) -> Mechanism:
        """The mechanism of ``campaign`` as configured on the collector (cached; may fetch); of
        campaign ``version`` if given (``VersionClosed`` if the collector no longer takes it)."""
        configs = self.campaigns()
        if campaign not in configs or not version_config(configs[campaign], version):
            if version is not None:  # an old version's config comes only when asked for by number
                self._configs.wanted.add((campaign, version))
            configs = self.campaigns(refresh=True)
        return self._mechanism(campaign, configs, version)[1]

    def sealed_config(self, campaign: str, version: int | None = None) -> dict[str, Any] | None:
        """The config of ``campaign`` (``version``) if it is in a shuffled privacy mode (its
        reports are sealed at flush time, ``ldptel.client.sealed``), else None."""
        cfg = config_for(campaign, self.campaigns(), version)
        return cfg if is_sealed(cfg) else None

    def _mechanism(self, campaign: str, configs: dict[str, dict[str, Any]],
                   version: int | None = None) -> tuple[dict[str, Any], Mechanism]:
        return self._mechs.get(campaign, config_for(campaign, configs, version))

    def _for_report(self, campaign: str, n: int) -> tuple[dict[str, Any], Mechanism] | None:
        """Config and mechanism for reporting, without a network request; None (the reports are
        dropped and counted) when no config is known or the device secret cannot be stored."""
        configs = self._configs.current(wait=self.timeout)
        if configs is None:
            self._drop_here("no_config", n, f"campaign {campaign!r}: no campaign configs "
                                              f"({self._configs.last_error})")
            return None
        if campaign not in configs:
            self._configs.refresh_in_background()
        try:
            return self._mechanism(campaign, configs)
        except VersionClosed as exc:  # a retired campaign: nothing to report to
            self._drop_here(exc.reason, n, str(exc))
            return None
        except (UnknownCampaign, CampaignRefused):  # the app's call, or the device's own limit
            raise
        except STORAGE_ERRORS as exc:
            self._drop_here("queue_unavailable", n, f"campaign {campaign!r}: no device secret: "
                                                    f"{type(exc).__name__}: {exc}")
            return None
        except TelemetryError as exc:  # a campaign config this SDK cannot use
            self._drop_here("bad_config", n, str(exc))
            return None

    @property
    def ledger(self) -> PrivacyLedger:
        """The device's privacy ledger (``ldptel.client.ledger``), in the queue file."""
        with self._lock:
            if self._ledger is None:
                self._ledger = PrivacyLedger(self.queue, self._device_secret(None),
                                             self.lifetime_epsilon, self.scope)
            return self._ledger

    def privacy_ledger(self) -> dict[str, Any]:
        """What this device has spent, per campaign and version (``PrivacyLedger.snapshot``);
        ``QueueUnavailable`` when the queue file cannot be opened."""
        return self.ledger.snapshot()

    def _device_secret(self, campaign: str | None) -> bytes:
        """HMAC-SHA256(device secret, campaign) (None: the ledger's key): the device secret is
        drawn once and kept in the queue file, so cohorts, memoized responses, levels and seed
        indices survive restarts."""
        device = self.queue.meta_setdefault("device_secret", device_secret)
        if campaign is None:
            return derive(device, b"ldptel/ledger-key")
        return derive(device, b"ldptel/campaign-secret\0" + campaign.encode())

    def device_mechanism(self, campaign: str, version: int) -> tuple[dict[str, Any], Mechanism] | None:
        """A device-level window's config and mechanism (``client.reporting.device_mechanism``)."""
        return reporting.device_mechanism(self, campaign, version)

    # --- reporting ----------------------------------------------------------------------------
    storage_errors = STORAGE_ERRORS

    def report(self, campaign: str, value: Any, dimensions: Mapping[str, Any] | None = None) -> bool:
        """Randomize ``value`` for ``campaign`` now and queue the randomized report; True if it was
        queued. Never makes a network request and never raises for storage or network trouble
        (the report is dropped and counted: ``health``); ``UnknownCampaign`` / ``ValueError``
        name the campaign. False, counted in the ledger and ``health().dropped``, and nothing
        queued, for a report beyond the campaign's ``reports_per_window`` in the current window,
        or one whose ε would take the ledger past ``lifetime_epsilon`` (``privacy_ledger``).
        ``dimensions``: the campaign's public dimension values (``client.reporting``). A
        device-level campaign records the event in its window's aggregate instead (one report
        per window, at its end: ``client.device_level``)."""
        prepared = self._for_report(campaign, 1)
        if prepared is None:
            return False
        cfg, mech = prepared
        dims = reporting.dimension_pairs(campaign, cfg, dimensions, self.dimensions)
        if is_device_level(cfg):
            return reporting.record_event(self, campaign, cfg, value, dims)
        value = value_index(cfg, value)
        batch = reporting.encoded(self, campaign, cfg, mech, value, dims)
        try:
            charge = self.ledger.charge(campaign, cfg, report_cost(cfg, mech), value, time.time())
        except STORAGE_ERRORS as exc:
            self._drop_here("queue_unavailable", 1, f"campaign {campaign!r}: no ledger: "
                                                    f"{type(exc).__name__}: {exc}")
            return False
        guard = self.ledger.guard(charge, lambda why: self._dropped.add(why, 1, f"campaign {campaign!r}: "
                                                                        f"report refused ({REFUSALS[why]})"))
        if not self._store(campaign, [reporting.queue_row(self, campaign, cfg, mech, batch)], 1, guard):
            return False
        self._background.queued(1)
        return True

    def report_many(self, campaign: str, values: Sequence[Any], dimensions: Mapping[str, Any] | None = None,
                    window: int | None = None) -> int:
        """Randomize many values at once (vectorized), each an independent report of a simulated
        device (RAPPOR: its own cohort and permanent response; heavy hitters: level and seed index)
        sharing ``dimensions``, for simulations and load tests: the ledger and
        ``reports_per_window`` do not apply. Rows fit the collector's ``max_body_bytes``. A
        device-level campaign takes one simulated device's window per value (its number of
        events, or its events' values) for ``window`` (default: the last one that ended). Returns
        the number queued (``client.reporting.report_many``)."""
        return reporting.report_many(self, campaign, values, dimensions, window)

    def pending(self) -> int:
        """Reports queued and not yet delivered (0 when the queue file cannot be read)."""
        try:
            return self.queue.pending()
        except STORAGE_ERRORS:
            return 0

    # --- sending ------------------------------------------------------------------------------
    def flush(self, timeout: float | None = 30.0) -> FlushResult:
        """Send everything queued; retry with backoff until done or ``timeout`` seconds have passed
        (None: no limit). What is not delivered stays queued; one chunk that must wait does not
        hold up the others (``ldptel.client.sending``)."""
        with self._flush_lock:
            reporting.device_round(self)  # device-level windows that ended: their reports queued
            return self._sender.flush(timeout)

    def stopping(self) -> bool:
        """True while ``close`` is stopping the background sender."""
        return self._stop.is_set()

    def sleep(self, delay: float) -> bool:
        """Sleep ``delay`` seconds; True if the client started stopping meanwhile."""
        return self._stop.wait(delay)

    def _request(self, method: str, path: str, body: bytes | None = None,
                 content_type: str | None = None, authorization: str | None = None) -> bytes:
        """One request; the campaigns digest of its answer (``delivery.HINT_HEADER``, on errors
        too) refreshes the configs when the campaigns changed (``CampaignConfigs.notice``)."""
        seen: dict[str, str] = {}
        try:
            return delivery.request(self.url + path, self.token, self.timeout, method, body,
                                    content_type, seen, authorization=authorization)
        finally:
            self._configs.notice(seen.get(delivery.HINT_HEADER))

    def _get_campaigns(self) -> tuple[bytes, str | None]:
        """``GET /v1/campaigns``: the answer and its campaigns digest."""
        seen: dict[str, str] = {}
        wanted = sorted(self._configs.wanted)[:MAX_ASKED]  # the old versions it holds reports of
        query = ("?" + urllib.parse.urlencode({"versions": ",".join(f"{c}:{v}" for c, v in wanted)})
                 if wanted else "")
        body = delivery.request(self.url + "/v1/campaigns" + query, self.token, self.timeout, "GET",
                                headers_seen=seen, max_bytes=ANSWER_CAP)  # larger: refused while read
        return body, seen.get(delivery.HINT_HEADER)

    # --- background sender ------------------------------------------------------------------
    def start(self) -> None:
        """Start the background sender: flushes every ``flush_interval`` seconds, or sooner when a
        full batch is queued."""
        self._background.start()

    def close(self, flush_timeout: float | None = 5.0) -> FlushResult | None:
        """Stop the background sender, try a last flush (``flush_timeout`` seconds; None: skip),
        and close the queue file. Undelivered reports stay in it for the next start."""
        self._stop.set()
        self._background.join()
        self._stop.clear()
        result = None
        if flush_timeout is not None:
            try:
                result = self.flush(timeout=flush_timeout)
            except TelemetryError as exc:
                log.warning("final flush: %s", exc)
        self._configs.close()
        if self._queue is not None:
            self._queue.close()
        return result

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
