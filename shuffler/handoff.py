"""One release per (version, window, cell) across shards (issue 38): a shuffled campaign with several
shards has every sealed envelope handed to shard 0, whose shuffler alone releases the campaign's
groups (``shuffler.sealed``), so ``batch_min`` holds for the union of the shards and a window is
released once, not once per shard.

- ``hand_off``: the envelopes a shard's shuffler read (of a shuffled version, shard ≠ 0) go to
  shard 0's ingress (``scripts.HANDOFF``, atomic in shard 0's hash slot: each is added with its
  marker ``keys.handed_key``, never twice), then are deleted from their shard
  (``scripts.HANDOFF_DEL``, atomic in that shard's slot). Exactly once: a crash between the two
  leaves the envelope in its shard, the next read hands it again and shard 0's marker skips it; an
  envelope is released only from shard 0, where it exists once. The counts of the ingress groups
  and of the analyzer keys (``key_refs``) move with the entries.
- ``mark``: a shard whose read reached the end of its ingress and handed off all it read records
  when that read began (``keys.handoff_key``, rounded down to a window start). Every envelope of a
  window is in its shard's ingress before the window closes (``durations.window_close``), so once
  every other shard's mark is at or past the close, shard 0 holds the whole window: only then does
  it release or discard it (``settled``): one release per window (``shuffler.sealed.due``).
  ``window = "all"`` never closes: its groups are released at ``shuffle_early_release`` (default
  ``batch_min``) as they fill, the handed envelopes joining shard 0's next release.

Shard 0's shuffler sees every shard's envelopes: the shuffler's trust domain is unchanged (one
shuffler role holds every shard's stream), and the envelopes stay sealed to the analyzer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ldptel import keys
from ldptel.campaigns.config import Campaign
from ldptel.durations import window_close
from ldptel.proto import SealedBatch
from ldptel.store import scripts
from ldptel.store.redis_client import AnyRedis

CALL_ENTRIES = 500  # envelopes per HANDOFF / HANDOFF_DEL call (a script blocks every client)
OWNER = 0  # the shard that releases a shuffled campaign's groups


def hand_off(r: AnyRedis, campaign: Campaign, shard: int,
             entries: Sequence[tuple[bytes, int, SealedBatch, str]]) -> bool:
    """Hand ``entries`` (entry id, window, envelope, ingress group) of ``shard`` to shard 0, then
    delete them from ``shard``. False if the shard's stream is busy with a journaled release (the
    entries stay; handed again later)."""
    run = scripts.of(r)
    name = campaign.name
    owner = [keys.ingress_key(name, OWNER), keys.ingress_top_key(name, OWNER),
             keys.ingress_groups_key(name, OWNER), keys.sealed_keys_key(name, OWNER)]
    source = [keys.ingress_key(name, shard), keys.ingress_groups_key(name, shard),
              keys.sealed_keys_key(name, shard), keys.release_key(name, shard)]
    expire = keys.dedupe_expire_at(time.time(), campaign.window_seconds)
    for s in range(0, len(entries), CALL_ENTRIES):
        chunk = entries[s:s + CALL_ENTRIES]
        args: list[Any] = [expire]
        markers = []
        deletes: list[Any] = []
        for eid, window, env, group in chunk:
            markers.append(keys.handed_key(name, bytes(env.batch_id)))
            args += [env.SerializeToString(), window, 1, group, f"{env.key_id:08x}"]  # one device
            deletes += [eid, group, f"{env.key_id:08x}"]
        run.call("HANDOFF", keys=[*owner, *markers], args=args)
        res = run.call("HANDOFF_DEL", keys=source, args=deletes)
        status = res[0].decode() if isinstance(res[0], bytes) else str(res[0])
        if status != "ok":
            return False
    return True


def mark(r: AnyRedis, campaign: Campaign, shard: int, read_start: float) -> None:
    """Record that ``shard``'s read begun at ``read_start`` reached its stream's end with all it
    read handed off (a window start of the campaign's window length: no finer time)."""
    length = campaign.window_seconds
    if length:
        r.hset(keys.handoff_key(campaign.name), f"read:{shard}", int(read_start // length) * length)


def marks(r: AnyRedis, campaign: str) -> dict[int, int]:
    """Every shard's mark (``mark``)."""
    out: dict[int, int] = {}
    raw: Any = r.hgetall(keys.handoff_key(campaign))
    for field, value in raw.items():
        name = field.decode() if isinstance(field, bytes) else str(field)
        if name.startswith("read:"):
            out[int(name[5:])] = int(value)
    return out


def settled(found: dict[int, int], shards: int, window: int, window_seconds: int) -> bool:
    """Whether every shard but 0 handed off all its envelopes of ``window`` (its mark is at or past
    the window's close); always for one shard, and for ``"all"`` (which never closes)."""
    if shards <= 1 or window_seconds == 0:
        return True
    close = window_close(window, window_seconds)
    return all(found.get(s, -1) >= close for s in range(1, shards))


__all__ = ["CALL_ENTRIES", "OWNER", "hand_off", "mark", "marks", "settled"]
