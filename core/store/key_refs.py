"""Which analyzer keys the sealed messages of a stream still need (issue 36: rotation without loss).

A private key may be deleted only when no message sealed to it can still reach the aggregator.
Per (campaign, shard), two hashes say so, kept atomically with the moves that change them:

- ``keys.sealed_keys_key``, ``k:<key id hex>``: ingress entries sealed to the key —
  ``scripts.INGEST`` adds 1 with the XADD of a sealed envelope; the shuffler's ``SHUFFLE``,
  ``RELEASE_STEP`` (the step that ends a journaled release) and ``DISCARD`` lower it by the
  entries they delete (``spec``). It moves with every arrival, so only the collector and the
  shuffler hold it: the aggregator learns no arrival time from it.
- ``keys.key_holds_key``, the aggregator's view: ``a:<key id hex>`` = the last analysis entry id
  of a release holding messages sealed to the key (written by the same move; the aggregator
  commits a release with one ``COMMIT`` that acknowledges its entries, so the key's released
  messages are all opened once its consumer group was delivered every entry up to that id and none
  of them is pending); ``q:<key id hex>``, the keyring's question (``held``, of keys past their
  grace only: the collector takes none of them any more), and ``f:<key id hex>``, the shuffler's
  answer (``answer``, each round: no ingress entry is sealed to the key; final, since none can
  arrive).

``held`` runs ``scripts.KEYS_HELD`` on every stream of the shuffled campaigns (one call per stream,
bounded: at most three fields per live key); ``Keyring.ensure`` keeps a key while any stream
needs it. Entries written before the hashes existed are not counted (the key's time rule,
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
    """The ``key_ids`` (past their grace) that a (campaign, shard) of ``streams`` still needs, or
    whose freedom no shuffler has confirmed yet (the question is asked: module docstring)."""
    if not key_ids:
        return set()
    run = scripts.of(r)
    hexes = [f"{kid:08x}" for kid in key_ids]
    out: set[int] = set()
    for campaign, shard in streams:
        res = run.call("KEYS_HELD", args=[keys.GROUP, *hexes],
                       keys=[keys.key_holds_key(campaign, shard), keys.stream_key(campaign, shard)])
        text = res.decode() if isinstance(res, bytes) else str(res)
        out |= {kid for kid, c in zip(key_ids, text, strict=True) if c == "1"}
    return out


def answer(r: AnyRedis, campaign: str, shard: int) -> int:
    """The shuffler's answers to the keyring's questions of one stream (``scripts.KEYS_FREE``):
    the keys answered."""
    return int(scripts.of(r).call("KEYS_FREE", keys=[keys.sealed_keys_key(campaign, shard),
                                                     keys.key_holds_key(campaign, shard)]))


def forget(r: AnyRedis, streams: Iterable[tuple[str, int]], key_ids: Sequence[int]) -> None:
    """Delete the aggregator's fields of ``key_ids`` (their private keys were deleted; the
    ``k:`` fields went at 0 before)."""
    fields = [f"{p}:{kid:08x}" for kid in key_ids for p in ("a", "q", "f")]
    if fields:
        for campaign, shard in streams:
            r.hdel(keys.key_holds_key(campaign, shard), *fields)


__all__ = ["answer", "forget", "held", "spec"]
