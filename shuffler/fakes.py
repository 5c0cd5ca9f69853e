"""The shuffler's fake messages (``fake_source = "shuffler"`` or ``"both"`` of a ``shuffled-fakes``
campaign; ``ldptel.privacy.fake_sources``): for every release, Poisson(μ_s) fakes per bucket of the
domain (``ShuffledFakes.shuffler_fakes``), drawn with OS randomness in production, each a row of
the version's row layout (``ldptel.mechanisms.rows``: an index, as a device's) sealed to the
release's analyzer key with the release's HPKE ``info`` (``ldptel.sealing.info``: campaign,
version, window, key id) exactly as a device seals its messages. ``shuffler.sealed.repack`` mixes
them into the release's one uniform permutation, so that after shuffling nothing tells a fake of
the shuffler from a device's message or fake: same length, same ``info``, fresh encapsulated key.

Cost: drawing is numpy (d Poisson counts, ``np.repeat``); sealing is one HPKE seal per fake (the
``cryptography`` package), ~d·μ_s per release, made on every core by the shuffler
(``shuffler.sealer.Sealer``, ``[shuffler] fake_processes``): ``bench/rows_fakes.py`` measures it.

``release_public_key`` is the one place the shuffler gets the key it seals to: the published
record in Redis (``ldptel.store.analyzer_keys``), whose id must be its key's, and, with
``[shuffler] analyzer_signing_key`` set, whose signature must verify under the aggregator's signing
key (``ldptel.key_signing``) — so a host that can write Redis cannot make the shuffler seal its
fakes to a key of its own (it could then open and subtract them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from ldptel import keys, sealing
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.fakes import poisson_counts
from ldptel.mechanisms.randomness import OS_RANDOM, OsRandom
from ldptel.mechanisms.rows import row_bytes, to_rows
from ldptel.store import analyzer_keys
from ldptel.store.redis_client import AnyRedis


def release_public_key(r: AnyRedis, key_id: int, signing: Ed25519PublicKey | None = None
                       ) -> X25519PublicKey | None:
    """The published analyzer key ``key_id`` (the one a release's envelopes are sealed to), or
    None when it is not published (or its record does not match its id, or, given ``signing``,
    its signature does not verify under it)."""
    record = r.hget(keys.ANALYZER_KEYS_KEY, str(key_id))
    if record is None:
        return None
    try:
        key = analyzer_keys.parse(key_id, record)
        if sealing.key_id(key.public) != key_id or (signing is not None and not key.verifies(signing)):
            return None
        return sealing.load_public(key.public)
    except (ValueError, KeyError, TypeError):
        return None


def draw_indices(mu: float, domain_size: int, rng: np.random.Generator | OsRandom = OS_RANDOM) -> np.ndarray:
    """The fakes' indices: Poisson(μ) of each bucket of [0, d), independent (one vectorized draw)."""
    counts = poisson_counts(rng, mu, domain_size)
    return np.repeat(np.arange(domain_size, dtype=np.int64), counts)


T = TypeVar("T")


def sealed_fakes(mech: Mechanism, mu: float, public: X25519PublicKey, info: bytes,
                 rng: np.random.Generator | OsRandom = OS_RANDOM,
                 seal: Callable[[Sequence[bytes], X25519PublicKey, bytes], T] = sealing.seal) -> T:  # type: ignore[assignment]
    """One release's fakes (``draw_indices``), each sealed on its own as a device's message
    (``seal``: ``sealing.seal``; ``shuffler.sealer.Sealer.seal`` on every core, or its ``submit``,
    which returns them being sealed)."""
    idx = draw_indices(mu, mech.domain_size, rng) if mu > 0 else np.zeros(0, dtype=np.int64)
    return seal(row_bytes(to_rows(mech, {"values": idx}, len(idx))), public, info)


__all__ = ["draw_indices", "release_public_key", "sealed_fakes"]
