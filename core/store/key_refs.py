"""Which analyzer keys the sealed messages of a stream still need (issue 36: rotation without loss).

A private key may be deleted only when no message sealed to it can still reach the aggregator.
Per (campaign, shard), the hash ``keys.sealed_keys_key`` says so, kept atomically with the moves
that change it:

- ``k:<key id hex>``: ingress entries sealed to the key — ``scripts.INGEST`` adds 1 with the
  XADD of a sealed envelope; the shuffler's ``SHUFFLE``, ``RELEASE_STEP`` (the step that ends a
  journaled release) and ``DISCARD`` lower it by the entries they delete (``spec``);
- ``a:<key id hex>``: the last analysis entry id of a release holding messages sealed to the key,
  written by the same move. The aggregator commits a release with one ``COMMIT`` that acknowledges
  its entries, so the key's released messages are all opened once its consumer group was delivered
  every entry up to that id and none of them is pending.

``held`` runs ``scripts.KEYS_HELD`` (read-only, one call per stream, bounded: two fields per live
key) on every stream of the shuffled campaigns; ``Keyring.ensure`` keeps a key while any stream
needs it. Entries written before the hash existed are not counted (the key's time rule,
``accepted_until`` + ``key_overlap``, still holds for them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ldptel import keys
from ldptel.store import scripts
from ldptel.store.redis_client import AnyRedis


def spec(entries: Mapping[int, int]) -> str:
    """The entries per analyzer key of a move or discard as the scripts take it:
    ``"<key id hex>=<n>,…"``."""
    return ",".join(f"{kid:08x}={n}" for kid, n in sorted(entries.items()) if n > 0)


def held(r: AnyRedis, streams: Iterable[tuple[str, int]], key_ids: Sequence[int]) -> set[int]:
    """The ``key_ids`` that a (campaign, shard) of ``streams`` still needs (module docstring)."""
    if not key_ids:
        return set()
    run = scripts.of(r)
    hexes = [f"{kid:08x}" for kid in key_ids]
    out: set[int] = set()
    for campaign, shard in streams:
        res = run.call("KEYS_HELD", args=[keys.GROUP, *hexes],
                       keys=[keys.sealed_keys_key(campaign, shard), keys.stream_key(campaign, shard)])
        text = res.decode() if isinstance(res, bytes) else str(res)
        out |= {kid for kid, c in zip(key_ids, text, strict=True) if c == "1"}
    return out


def forget(r: AnyRedis, streams: Iterable[tuple[str, int]], key_ids: Sequence[int]) -> None:
    """Delete the fields of ``key_ids`` (their private keys were deleted)."""
    fields = [f"{p}:{kid:08x}" for kid in key_ids for p in ("k", "a")]
    if fields:
        for campaign, shard in streams:
            r.hdel(keys.sealed_keys_key(campaign, shard), *fields)


__all__ = ["forget", "held", "spec"]
