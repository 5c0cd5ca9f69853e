"""Every Redis key and hash field the product uses, and the stream-entry format.

Per (campaign, shard) — all keys share the hash tag ``{ldptel:<campaign>:<shard>}`` so that a Lua
script or MULTI touching them runs on one Redis Cluster node:

- ``{…}:ingress``      stream (``ingress_key``), with ``[shuffler] enabled`` (the default): the
                       collector's short-lived stream, one entry per accepted batch (same fields
                       and id rule as ``{…}:reports``); ``ldptel shuffle`` reads it, and moves its
                       reports, permuted and re-packed, to ``{…}:reports`` (``scripts.SHUFFLE``).
- ``{…}:ingress_top``, ``{…}:reports_top`` string (``ingress_top_key``, ``stream_top_key``): the
                       last entry id the collector added to that stream (a window start and a
                       sequence number), kept by ``scripts.INGEST`` so the collector needs no
                       ``XINFO STREAM`` (whose ``FULL`` form lists every entry).
- ``{…}:shuffle_lease`` string (``shuffle_lease_key``): the shuffler that works on this stream
                       now (its random owner id), ``SET NX PX``, renewed (``scripts.LEASE``).
- ``{…}:shuffled``     shuffler counters (``shuffle_metrics_key``): hash, fields
                       ``INGRESS_BATCHES``, ``INGRESS_REPORTS`` (taken from ingress),
                       ``ANALYSIS_BATCHES``, ``ANALYSIS_REPORTS`` (written to ``{…}:reports``),
                       ``SHUFFLE_REFUSED`` (releases refused: their entries had been moved),
                       ``SHUFFLE_DISCARDED`` (reports of a shuffled campaign's window that closed
                       below ``batch_min``: deleted by ``scripts.DISCARD``, never released).
- ``{…}:sealed_keys``  hash (``sealed_keys_key``; shuffled campaigns): ``k:<key id hex>`` = ingress
                       entries sealed to that analyzer key (``scripts.INGEST`` +1; the shuffler's
                       moves and discards lower it, the field goes at 0). The collector's and
                       shuffler's only: it moves with every arrival, so the aggregator never reads it.
- ``{…:0}:handed:<hex id>`` string ``"1"`` (``handed_key``; shard 0's tag only, shuffled
                       campaigns with several shards): the sealed envelope of that batch id was
                       handed from its shard to shard 0 (``scripts.HANDOFF``: exactly once); it
                       expires as a dedupe marker does (``dedupe_expire_at``).
- ``{…:0}:handoff``    hash (``handoff_key``): ``read:<shard>`` = a window start at or before which
                       that shard's shuffler began a read that reached its ingress stream's end and
                       handed off all it read; shard 0 releases a closed window only once every
                       other shard's mark is past the window's close (``shuffler.handoff``).
- ``{…}:key_holds``    hash (``key_holds_key``): what the aggregator's keyring may read about a key
                       (``ldptel.store.key_refs``): ``a:<key id hex>`` = the last analysis entry id of
                       a release holding messages sealed to it (the shuffler's moves), ``q:<key id
                       hex>`` = the keyring asks whether a key past its grace is free, ``f:<key id
                       hex>`` = the shuffler's answer: no ingress entry is sealed to it (final: the
                       collector no longer takes it). At most three fields per live key.
- ``{…}:release``, ``{…}:release_batches``, ``{…}:release_ids`` (``release_key`` …): a release
                       too large for one bounded script call, in progress (``shuffler.release``):
                       a hash (its id, ``staging`` or ``committed``, sizes, progress), the staged
                       re-packed batches (stream, ids ``0-n``) and the ingress ids it moves (list).
- ``{…}:reports``      the analysis stream (``stream_key``) the aggregator reads; one entry per
                       accepted batch (shuffler disabled) or per re-packed shuffled batch, fields
                       ``batch`` (serialized ``ReportBatch``: payload, count, campaign, batch_id),
                       ``window`` (start of the receive-time window, epoch seconds; 0 for "all"),
                       ``count`` (reports in the batch). Nothing else: no IP, token, user agent
                       or precise time; the entry id is ``<window start ms>-<n>`` (never the
                       receive time; see ``scripts.INGEST``). Consumer group ``GROUP`` on each
                       stream.
- ``{…}:seen:<hex id>`` dedupe marker of a batch_id (``seen_key``; SET to ``"1"``), written
                       atomically with the XADD; it expires at ``dedupe_expire_at``: at least
                       ``DEDUPE_TTL_SECONDS`` after receipt, rounded UP to a multiple of
                       max(window, 1 day), so its expiry reveals no time finer than that.
- ``{…}:state``        aggregator state (``state_key``), written atomically with the XACK of the
                       entries it includes; read and written only by ``ldptel.aggregator.store``
                       (the aggregator role alone: the raw state of a window below
                       ``min_reports`` is no reader's). Fields: ``acc:<window>:<uid>``
                       accumulator bytes (``acc_field``).
- ``{…}:counts``       its counters (``counts_key``), written in the same ``scripts.COMMIT`` and
                       read by listings, pages and the export API (``ldptel.store.tally``): ``n:<window>``
                       reports counted, ``entries:<window>`` stream entries counted,
                       ``updated:<window>`` epoch ms of the last commit, ``rejected`` entries that
                       could not be decoded (or whose window had expired), ``expired_entries`` /
                       ``expired_reports`` the counts of the windows deleted past the campaign's
                       ``retention`` (``scripts.EXPIRE_WINDOWS``), ``rel:<window>:<release id>`` real
                       reports of one shuffled release (``privacy_mode`` shuffled*: the batch sizes
                       a window's claim rests on). State written before the split
                       held them in ``{…}:state``: ``scripts.MOVE_COUNTERS`` moves them (the
                       aggregator, at start).
                       This is campaign version 1's state; version v ≥ 2 has the same keys with
                       ``:v<v>`` (``{…}:state:v<v>``, ``{…}:counts:v<v>``): version 1 keeps the
                       names it had before versions existed, so state written then stays version
                       1's. A stream holds the batches of every version (each batch names its
                       ``campaign_version``).
- ``{…}:published:<window>`` (shard 0's tag only, ``published_key``; version v ≥ 2:
                       ``{…}:published:v<v>:<window>``) hash: the window's
                       estimate document as the aggregator last decoded it, written in one step
                       by ``scripts.PUBLISH`` and read by the export API and the pages with one
                       HGETALL (``ldptel.aggregator.publish``). Fields: ``PUB_N`` reports
                       decoded, ``PUB_DIGEST`` digest of the decoded state (and the campaign's
                       parameters), ``PUB_CONFIG`` digest of the campaign's parameters alone,
                       ``PUB_DECODED_AT`` epoch seconds, ``PUB_DOC`` the JSON
                       document, ``PUB_ARRAYS`` ``np.savez`` arrays (range campaigns), and
                       ``PUB_ERROR``: why the window's last publication failed (one line; set
                       by ``published.write_failure``, gone with the next ``PUBLISH``).
- ``{…}:publishing:<window>`` (shard 0's tag only, ``publish_claim_key``) string: epoch ms at
                       which an aggregator worker last started publishing the window, set by
                       ``scripts.PUBLISH_CLAIM`` (TTL: the longest gap a worker waits), so that
                       W workers publish a window at most once per interval between them.
- ``{…}:metrics``      collector counters (``metrics_key``; fields ``ACCEPTED_BATCHES``,
                       ``ACCEPTED_REPORTS``, ``DUPLICATE_BATCHES``, ``DUPLICATE_REPORTS``), updated
                       by the ingest script with the XADD; read by ``/metrics`` and the store.

Process-wide keys (no hash tag):

- ``ldptel:metrics``                       other collector counters (``GLOBAL_METRICS_KEY``).
- ``ldptel:ratelimit:<token id>:<minute>`` per-token request counter (``ratelimit_key``).
- ``ldptel:operator:session_secret``       operator-session signing secret (``SESSION_SECRET_KEY``).
- ``{ldptel:authfail}:<kind>:<digest>``    failed authentications of one client address (kind
                                           ``addr``) or token prefix (``prefix``) in the throttle
                                           window (``auth_failure_key``): counter whose TTL is the
                                           window; the digest is keyed (``server/throttle.py``),
                                           never the address or token itself.
- ``ldptel:operator:session:<id digest>``  one signed-in operator session (``session_key``): string,
                                           the session's token HMAC, TTL = the idle timeout
                                           (renewed per request, deleted at sign-out).
- ``{ldptel:registry}:campaigns``          the campaign registry (``REGISTRY_KEY``): hash, field =
                                           campaign name, value = its JSON record (versions,
                                           status; ``ldptel.store.registry``), written only by
                                           ``scripts.REGISTRY_PUT``.
- ``{ldptel:registry}:revision``           counter bumped by every registry write
                                           (``REGISTRY_REVISION_KEY``); every process polls it.
- ``{ldptel:registry}:history:<campaign>`` list of the campaign's changes, oldest first
                                           (``registry_history_key``): JSON entries (when, who,
                                           through what, action, version, what changed;
                                           ``ldptel.campaigns.records.entry``), appended by
                                           ``scripts.REGISTRY_PUT`` with the record; read by the
                                           admin API and ``ldptel campaigns history`` only.
- ``ldptel:shuffler:heartbeat``            the same for each running shuffler
                                           (``SHUFFLER_HEARTBEAT_KEY``; ``ldptel.store.heartbeat``).
- ``ldptel:analyzer:keys``                 hash, field = analyzer key id (decimal u32), value = JSON
                                           ``{"public": base64 raw X25519 key, "created": epoch s,
                                           "current_until": epoch s, "accepted_until": epoch s}``
                                           (``ANALYZER_KEYS_KEY``; written by the aggregator,
                                           ``ldptel.store.analyzer_keys``; the private keys never leave
                                           its data directory).
- ``ldptel:analyzer:opened:<key id hex>``  hash: the messages the aggregator opened with one analyzer
                                           key (``opened_key``; ``ldptel.store.opened``): field = a
                                           message's encapsulated key (``enc``, its first 32 bytes),
                                           value = 8 bytes naming the release that counted it. A
                                           message whose ``enc`` is there under another release is a
                                           replay and is never counted again. It expires when the
                                           key's private half is deleted (``accepted_until`` +
                                           ``key_overlap``) and is deleted with it.
- ``ldptel:aggregator:heartbeat``          hash, one field per running aggregator worker (its
                                           consumer name): ``"<beat ms> <last commit ms>
                                           <caught-up ms>"`` (``HEARTBEAT_KEY``; written by
                                           ``ldptel.store.heartbeat``, read by ``/healthz``).

A batch goes to shard ``xxh32(batch_id) mod shards``, so a retried batch meets its own dedupe
marker. The Lua scripts that write these keys are in ``ldptel.store.scripts``.
"""

from __future__ import annotations

from ldptel.mechanisms.hashing import xxh32_bytes

GROUP = "aggregators"
DEDUPE_TTL_SECONDS = 7 * 86400
DAY_SECONDS = 86400

# stream entry fields (bytes: as redis-py returns them)
ENTRY_BATCH = b"batch"
ENTRY_WINDOW = b"window"

# collector counters of a (campaign, shard) (hash ``metrics_key``)
ACCEPTED_BATCHES = "accepted_batches"
ACCEPTED_REPORTS = "accepted_reports"
DUPLICATE_BATCHES = "duplicate_batches"
DUPLICATE_REPORTS = "duplicate_reports"

# shuffler counters of a (campaign, shard) (hash ``shuffle_metrics_key``; spelled in
# ``scripts.SHUFFLE`` too)
INGRESS_BATCHES = "ingress_batches"
INGRESS_REPORTS = "ingress_reports"
ANALYSIS_BATCHES = "analysis_batches"
ANALYSIS_REPORTS = "analysis_reports"
SHUFFLE_REFUSED = "refused"

# aggregator state fields (hash ``state_key``)
ACC_PREFIX = "acc:"
N_PREFIX = "n:"
ENTRIES_PREFIX = "entries:"
UPDATED_PREFIX = "updated:"
RELEASE_PREFIX = "rel:"  # rel:<window>:<release id> = real reports of one shuffled release
REPLAYED_PREFIX = "replayed:"  # replayed:<window>:<release id> = messages of it dropped as replays
SHUFFLE_DISCARDED = "discarded_reports"  # {…}:shuffled: shuffled* reports of windows below batch_min
REJECTED = "rejected"
EXPIRED_ENTRIES = "expired_entries"
EXPIRED_REPORTS = "expired_reports"

# published estimate fields (hash ``published_key``)
PUB_N = "n"
PUB_DIGEST = "digest"
PUB_CONFIG = "config"
PUB_DECODED_AT = "decoded_at"
PUB_DOC = "doc"
PUB_ARRAYS = "arrays"
PUB_ERROR = "error"

GLOBAL_METRICS_KEY = "ldptel:metrics"
RATELIMIT_PREFIX = "ldptel:ratelimit"
SESSION_SECRET_KEY = "ldptel:operator:session_secret"
SESSION_PREFIX = "ldptel:operator:session"
AUTH_FAILURE_TAG = "{ldptel:authfail}"
HEARTBEAT_KEY = "ldptel:aggregator:heartbeat"
ANALYZER_KEYS_KEY = "ldptel:analyzer:keys"
OPENED_PREFIX = "ldptel:analyzer:opened"
SHUFFLER_HEARTBEAT_KEY = "ldptel:shuffler:heartbeat"
REGISTRY_KEY = "{ldptel:registry}:campaigns"
REGISTRY_REVISION_KEY = "{ldptel:registry}:revision"
REGISTRY_HISTORY_PREFIX = "{ldptel:registry}:history"


def registry_history_key(campaign: str) -> str:
    """The history list of ``campaign`` (same hash tag as the registry: one script writes both)."""
    return f"{REGISTRY_HISTORY_PREFIX}:{campaign}"


def opened_key(key_id: int | str) -> str:
    """The ``enc`` of every message opened with analyzer key ``key_id`` (a u32; ``"*"`` in an ACL
    pattern)."""
    return f"{OPENED_PREFIX}:{key_id:08x}" if isinstance(key_id, int) else f"{OPENED_PREFIX}:{key_id}"


def shard_of(batch_id: bytes, shards: int) -> int:
    return xxh32_bytes(batch_id, 0) % shards if shards > 1 else 0


def tag(campaign: str, shard: int) -> str:
    return f"{{ldptel:{campaign}:{shard}}}"


def stream_key(campaign: str, shard: int = 0) -> str:
    return f"{tag(campaign, shard)}:reports"


def ingress_key(campaign: str, shard: int = 0) -> str:
    return f"{tag(campaign, shard)}:ingress"


def ingress_groups_key(campaign: str, shard: int = 0) -> str:
    """Hash: the entries the ingress stream holds per (version, window, cell) group
    (``ingress_group``), kept by ``scripts.INGEST`` (+1) and the shuffler's moves and discards
    (−n, the field deleted at 0), atomically with the stream: the bound of ingress is per group."""
    return f"{tag(campaign, shard)}:ingress_groups"


def ingress_group(version: int, window: int, cell: tuple[tuple[str, str], ...] = ()) -> str:
    """A field of ``ingress_groups_key``: ``<version>:<window>[:<name>=<value>,…]`` (the cell's
    canonical dimension values, in name order, as the collector stores them)."""
    tail = ",".join(f"{n}={v}" for n, v in cell)
    return f"{version}:{window}:{tail}" if tail else f"{version}:{window}"


def sealed_keys_key(campaign: str, shard: int = 0) -> str:
    """Hash: the analyzer keys the stream's sealed entries and releases still need (module docstring)."""
    return f"{tag(campaign, shard)}:sealed_keys"


def key_holds_key(campaign: str, shard: int = 0) -> str:
    """Hash: the keyring's questions and the shuffler's answers about analyzer keys (module docstring)."""
    return f"{tag(campaign, shard)}:key_holds"


def handed_key(campaign: str, batch_id: bytes) -> str:
    """Marker (shard 0's tag): the sealed envelope ``batch_id`` was handed to shard 0 (``HANDOFF``)."""
    return f"{tag(campaign, 0)}:handed:{batch_id.hex()}"


def handoff_key(campaign: str) -> str:
    """Hash (shard 0's tag): ``read:<shard>`` = the window start (of the latest version's window
    length) at or before which that shard's shuffler began a read that reached the end of its
    ingress stream and handed off everything it read (``shuffler.handoff``)."""
    return f"{tag(campaign, 0)}:handoff"


def shuffle_lease_key(campaign: str, shard: int = 0) -> str:
    return f"{tag(campaign, shard)}:shuffle_lease"


def shuffle_metrics_key(campaign: str, shard: int = 0) -> str:
    return f"{tag(campaign, shard)}:shuffled"


def release_key(campaign: str, shard: int = 0) -> str:
    """The stream's release in progress (``shuffler.release``; ``scripts.RELEASE_*``)."""
    return f"{tag(campaign, shard)}:release"


def release_batches_key(campaign: str, shard: int = 0) -> str:
    return f"{tag(campaign, shard)}:release_batches"


def release_ids_key(campaign: str, shard: int = 0) -> str:
    return f"{tag(campaign, shard)}:release_ids"


def seen_key(campaign: str, shard: int, batch_id: bytes) -> str:
    return f"{tag(campaign, shard)}:seen:{batch_id.hex()}"


def spent_key(campaign: str, shard: int, window: int | str) -> str:
    """Set: the digests of the Privacy Pass tokens spent on (campaign, shard, window) (issue 37;
    ``scripts.INGEST_TOKEN`` checks and adds in the ingest's round trip; the shard is the token's,
    ``shard_of(digest)``, so one token always meets the same set). Expires with the window."""
    return f"{tag(campaign, shard)}:spent:{window}"


def issuer_quota_key(subject_digest: str, window: int | str) -> str:
    """Counter: tokens issued to one attested subject (its SHA-256, never the subject) in one
    issuer window (``scripts.ISSUE_QUOTA``); the issuer's alone."""
    return f"ldptel:issuer:quota:{subject_digest}:{window}"


def _versioned(version: int) -> str:
    """The key suffix of a campaign version: none for version 1 (its keys predate versions)."""
    return "" if version == 1 else f":v{version}"


def state_key(campaign: str, shard: int = 0, version: int = 1) -> str:
    return f"{tag(campaign, shard)}:state{_versioned(version)}"


def counts_key(campaign: str, shard: int = 0, version: int = 1) -> str:
    return f"{tag(campaign, shard)}:counts{_versioned(version)}"


def ingress_top_key(campaign: str, shard: int = 0) -> str:
    """The last entry id the collector added to the ingress stream (``scripts.INGEST``): its
    next id follows from it, so the collector needs no XINFO (which lists entries)."""
    return f"{tag(campaign, shard)}:ingress_top"


def stream_top_key(campaign: str, shard: int = 0) -> str:
    """``ingress_top_key`` of the analysis stream (the collector's target without the shuffler)."""
    return f"{tag(campaign, shard)}:reports_top"


def metrics_key(campaign: str, shard: int = 0) -> str:
    return f"{tag(campaign, shard)}:metrics"


def published_key(campaign: str, window: int, version: int = 1) -> str:
    return f"{tag(campaign, 0)}:published{_versioned(version)}:{window}"


def publish_claim_key(campaign: str, window: int, version: int = 1) -> str:
    return f"{tag(campaign, 0)}:publishing{_versioned(version)}:{window}"


def ratelimit_key(token_id: str, minute: int) -> str:
    return f"{RATELIMIT_PREFIX}:{token_id}:{minute}"


def auth_failure_key(kind: str, digest: str) -> str:
    return f"{AUTH_FAILURE_TAG}:{kind}:{digest}"


def session_key(session_digest: str) -> str:
    return f"{SESSION_PREFIX}:{session_digest}"


def acc_field(window: int, uid: str) -> str:
    return f"{ACC_PREFIX}{window}:{uid}"


def field_window(field: str | bytes) -> int | None:
    """The window of an ``acc:<window>:<uid>`` field name, else None."""
    if isinstance(field, bytes):
        field = field.decode()
    if not field.startswith(ACC_PREFIX):
        return None
    try:
        return int(field[len(ACC_PREFIX):].split(":", 1)[0])
    except ValueError:
        return None


def window_start(receive_time: float, window_seconds: int) -> int:
    """Receive time rounded down to its window (0 for the "all" window)."""
    if window_seconds <= 0:
        return 0
    return int(receive_time // window_seconds) * window_seconds


def dedupe_expire_at(receive_time: float, window_seconds: int) -> int:
    """Epoch second at which a dedupe marker expires: ``DEDUPE_TTL_SECONDS`` after
    ``receive_time``, rounded UP to a multiple of max(window, 1 day) (1 day for "all"), so the
    marker's expiry tells no more than the day (or window) in which its batch id was received."""
    unit = max(window_seconds, DAY_SECONDS)
    return -(-int(receive_time + DEDUPE_TTL_SECONDS) // unit) * unit
