"""Redis key layout and stream-entry format shared by the collector and the aggregator.

All keys of one (campaign, shard) share the hash tag ``{ldptel:<campaign>:<shard>}`` so that a
Lua script or MULTI touching them runs on one Redis Cluster node.

- ``{…}:reports``      stream; one entry per accepted batch, fields:
                       ``batch`` (serialized ``ReportBatch``: payload, count, campaign, batch_id),
                       ``window`` (start of the receive-time window, epoch seconds; 0 for "all"),
                       ``count`` (reports in the batch). Nothing else: no IP, token, user agent
                       or precise time.
- ``{…}:seen:<hex id>`` dedupe marker of a batch_id (SET NX with a TTL), written atomically
                       with the XADD.
- ``{…}:state``        aggregator state (hash: field per window → accumulator bytes, plus
                       counters), written atomically with the XACK of the entries it includes.
- ``{…}:metrics``      collector counters of the (campaign, shard) (hash: ``accepted_batches``,
                       ``accepted_reports``, ``duplicate_batches``, ``duplicate_reports``), updated
                       by the same script as the XADD; read by ``/metrics``.
- consumer group ``aggregators`` on each stream.

A batch goes to shard ``xxh32(batch_id) mod shards``, so a retried batch meets its own dedupe
marker.
"""

from __future__ import annotations

from ldptel.client.hashing import xxh32_bytes

GROUP = "aggregators"
DEDUPE_TTL_SECONDS = 7 * 86400


def shard_of(batch_id: bytes, shards: int) -> int:
    return xxh32_bytes(batch_id, 0) % shards if shards > 1 else 0


def tag(campaign: str, shard: int) -> str:
    return f"{{ldptel:{campaign}:{shard}}}"


def stream_key(campaign: str, shard: int = 0) -> str:
    return f"{tag(campaign, shard)}:reports"


def seen_key(campaign: str, shard: int, batch_id: bytes) -> str:
    return f"{tag(campaign, shard)}:seen:{batch_id.hex()}"


def state_key(campaign: str, shard: int = 0) -> str:
    return f"{tag(campaign, shard)}:state"


def metrics_key(campaign: str, shard: int = 0) -> str:
    return f"{tag(campaign, shard)}:metrics"


def window_start(receive_time: float, window_seconds: int) -> int:
    """Receive time rounded down to its window (0 for the "all" window)."""
    if window_seconds <= 0:
        return 0
    return int(receive_time // window_seconds) * window_seconds
