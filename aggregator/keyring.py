"""The analyzer's HPKE key pairs (``ldptel.sealing``): private keys in files of the aggregator's
data directory, public halves published in Redis (``ldptel.store.analyzer_keys``).

Files in ``[analyzer] keys_dir`` (default ``<LDPTEL_DATA_DIR>/analyzer-keys``, mode 0700): per key
``<key id hex>.key`` (the raw 32-byte X25519 private key, mode 0600) and ``<key id hex>.json``
(``created``, ``current_until``, ``accepted_until``), and once for the directory
``signing.ed25519``: the raw 32-byte Ed25519 private key (mode 0600) that signs every published
key (``ldptel.key_signing``). It is made the first time the directory is used (or by
``ldptel analyzer-key show``, which prints its public half for apps to pin) and never rotated:
the HPKE rotation below leaves it alone, and deleting it makes every pinned app refuse the new
signatures until it ships the new public half. Several workers of one host share the
directory (key creation takes an ``flock``); workers on several hosts must share it too (a worker
that lacks the key of a release leaves it pending for one that has it, and logs so).

Rotation (``Keyring.ensure``, at the worker's start and every upkeep): when no key is current a
new one is made, current for ``key_rotation`` and accepted ``key_overlap`` longer; its public half
is withdrawn from Redis once it is no longer accepted. A private key is deleted at the earliest
``key_overlap`` after it stopped being accepted (requests in flight, clocks apart), and only once no
message sealed to it still waits (issue 36): the shuffler answered that no ingress entry of a
shuffled campaign's stream is sealed to it and the aggregator acknowledged every release holding
its messages (``ldptel.store.key_refs``, asked of the ``streams`` given to ``ensure``). A window sealed to it
therefore keeps it until the window is released or discarded, however long (``window = "all"``:
until its group reaches ``batch_min``). The record of the messages opened with a key
(``ldptel.store.opened``: what makes a replayed message count once) expires ``key_overlap`` after
the key's earliest deletion (``forget_at``), is made persistent while the key is kept past it, and
is deleted with the key.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldptel import key_signing, keys, sealing
from ldptel.campaigns.config import AnalyzerConfig
from ldptel.credentials import data_dir
from ldptel.durations import parse_duration
from ldptel.store import analyzer_keys, key_refs, opened
from ldptel.store.analyzer_keys import PublicKey
from ldptel.store.redis_client import AnyRedis

LOG = logging.getLogger("ldptel.aggregator")
SIGNING_FILE = "signing.ed25519"


def keys_dir(cfg: AnalyzerConfig) -> Path:
    return Path(cfg.keys_dir) if cfg.keys_dir else data_dir() / "analyzer-keys"


def signing_path(cfg: AnalyzerConfig) -> Path:
    return keys_dir(cfg) / SIGNING_FILE


def ensure_signing_key(cfg: AnalyzerConfig) -> Ed25519PrivateKey:
    """The directory's Ed25519 signing key, made (OS randomness, mode 0600) if it has none."""
    folder = keys_dir(cfg)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with (folder / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _signing_key(folder, create=True)  # type: ignore[return-value]


def _signing_key(folder: Path, create: bool = False) -> Ed25519PrivateKey | None:
    path = folder / SIGNING_FILE
    try:
        return Ed25519PrivateKey.from_private_bytes(path.read_bytes())
    except FileNotFoundError:
        if not create:
            return None
    key = Ed25519PrivateKey.generate()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                   serialization.NoEncryption()))
    LOG.info("analyzer: new signing key %s (%s); apps pin its public half: %s", path,
             "never rotated", key_signing.public_text(key.public_key()))
    return key


def signing_public_text(cfg: AnalyzerConfig) -> str:
    """What an app passes as ``analyzer_signing_key`` (the key is made if there is none)."""
    return key_signing.public_text(ensure_signing_key(cfg).public_key())


class Keyring:
    """The key pairs of one keys directory (module docstring)."""

    def __init__(self, cfg: AnalyzerConfig) -> None:
        self.dir = keys_dir(cfg)
        self.rotation = parse_duration(cfg.key_rotation)
        self.overlap = parse_duration(cfg.key_overlap)
        self.private: dict[int, X25519PrivateKey] = {}
        self.public: dict[int, PublicKey] = {}
        self.signing: Ed25519PrivateKey | None = None

    @property
    def pinned(self) -> str:
        """The signing key's public half as apps pin it (base64; ``ensure`` makes the key)."""
        if self.signing is None:
            raise LookupError(f"{self.dir}: no signing key yet (Keyring.ensure makes it)")
        return key_signing.public_text(self.signing.public_key())

    def _signed(self, pub: PublicKey) -> PublicKey:
        if self.signing is None:
            return pub
        sig = key_signing.sign(self.signing, sealing.SUITE_ID, pub.public, pub.key_id, pub.current_until,
                               pub.accepted_until)
        return dataclasses.replace(pub, signature=sig)
        self.kept: set[int] = set()  # keys no longer accepted that waiting messages still need

    def load(self) -> None:
        """Read every key file of the directory."""
        private, public = {}, {}
        if self.dir.is_dir() and self.signing is None:
            self.signing = _signing_key(self.dir)
        if self.dir.is_dir():
            for meta in self.dir.glob("*.json"):
                try:
                    doc = json.loads(meta.read_text())
                    key = sealing.load_private(meta.with_suffix(".key").read_bytes())
                except (OSError, ValueError):
                    continue
                raw = sealing.public_bytes(key.public_key())
                kid = sealing.key_id(raw)
                private[kid] = key
                pub = PublicKey(kid, raw, float(doc["created"]), float(doc["current_until"]),
                                float(doc["accepted_until"]))
                public[kid] = self._signed(pub)
        self.private, self.public = private, public

    def ensure(self, r: AnyRedis | None = None, now: float | None = None,
               streams: Sequence[tuple[str, int]] = ()) -> None:
        """Rotate if no key is current, delete keys past their grace that no waiting message of
        ``streams`` (the shuffled campaigns' (name, shard); ``key_refs.held``) needs, publish
        (``r``)."""
        at = time.time() if now is None else now
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with (self.dir / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.signing = _signing_key(self.dir, create=True)
            self.load()
            if not any(at < k.current_until for k in self.public.values()):
                self._create(at)
            past = [kid for kid, key in self.public.items() if at >= key.accepted_until + self.overlap]
            self.kept = key_refs.held(r, streams, past) if r is not None else set()
            deleted = []
            for kid in past:
                if kid not in self.kept:
                    for suffix in (".key", ".json"):
                        (self.dir / f"{kid:08x}{suffix}").unlink(missing_ok=True)
                    del self.public[kid], self.private[kid]
                    deleted.append(kid)
        if r is not None:
            for kid in self.kept:  # its record lives as long as the key
                r.persist(keys.opened_key(kid))
            opened.forget(r, deleted)  # without r, the record expires at ``forget_at`` anyway
            key_refs.forget(r, streams, deleted)
            self.publish(r, at)

    def _create(self, at: float) -> None:
        key = sealing.new_private()
        raw = sealing.public_bytes(key.public_key())
        kid = sealing.key_id(raw)
        path = self.dir / f"{kid:08x}.key"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(sealing.private_bytes(key))
        created = float(int(at))
        pub = self._signed(PublicKey(kid, raw, created, created + self.rotation,
                                     created + self.rotation + self.overlap))
        meta = {"created": pub.created, "current_until": pub.current_until,
                "accepted_until": pub.accepted_until}
        (self.dir / f"{kid:08x}.json").write_text(json.dumps(meta))
        self.private[kid], self.public[kid] = key, pub
        LOG.info("analyzer: new key %08x, current until %s", kid, time.strftime(
            "%Y-%m-%d %H:%M UTC", time.gmtime(pub.current_until)))

    def publish(self, r: AnyRedis, now: float | None = None) -> None:
        """Publish the accepted keys' public halves; withdraw the others."""
        at = time.time() if now is None else now
        live = [k for k in self.public.values() if at < k.accepted_until]
        published = analyzer_keys.read(r)
        stale = [kid for kid in published if kid not in {k.key_id for k in live}]
        other = [k.key_id for k in live if k.key_id in published and published[k.key_id].signature
                 and published[k.key_id].signature != k.signature]
        if other:  # Ed25519 is deterministic: another signature means another signing key
            LOG.error("analyzer: key(s) %s were published signed by another signing key than %s: every "
                      "aggregator host must hold the same keys directory (docs/operations.md#analyzer-keys); "
                      "apps pinning the other key refuse these signatures",
                      ", ".join(f"{kid:08x}" for kid in other), self.dir / SIGNING_FILE)
        analyzer_keys.publish(r, live, stale)

    def forget_at(self, key_id: int) -> float | None:
        """Epoch s at which the record of the messages opened with ``key_id`` expires by itself:
        ``key_overlap`` after the key's earliest deletion (``accepted_until`` + ``key_overlap``),
        so that ``ensure``, which deletes it with the key or makes it persistent while the key is
        kept for waiting messages, runs before; None when the key is not known or kept."""
        pub = self.public.get(key_id)
        return None if pub is None or key_id in self.kept else pub.accepted_until + 2 * self.overlap

    def key(self, key_id: int) -> X25519PrivateKey | None:
        """The private key of ``key_id`` (the directory read again once if it is not known)."""
        if key_id not in self.private:
            self.load()
        return self.private.get(key_id)


__all__ = ["SIGNING_FILE", "Keyring", "ensure_signing_key", "keys_dir", "signing_path", "signing_public_text"]
