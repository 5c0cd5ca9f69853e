"""Helpers for the tests of campaigns in a shuffled privacy mode: a config with sealed campaigns,
the analyzer's keys in a temporary directory, devices through the real SDK, the shuffler and the
aggregator in this process."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import redis
from agg_support import INGEST_TOKEN, HttpStack, write_config

from ldptel.aggregator.keyring import SIGNING_FILE, Keyring
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import Config
from ldptel.client import TelemetryClient
from ldptel.shuffler.worker import Shuffler

FAKES = {"name": "sf-hist", "privacy_mode": "shuffled-fakes", "domain_size": 16, "central_epsilon": 1.0,
         "central_delta": 1e-6, "batch_min": 300, "min_reports": 1}
SHUFFLED = {"name": "sh-grr", "privacy_mode": "shuffled", "oracle": "grr", "domain_size": 8,
            "central_epsilon": 1.0, "central_delta": 1e-6, "batch_min": 300, "min_reports": 1}
LOCAL = {"name": "loc-grr", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "min_reports": 1}


def sealed_config(tmp: Path, campaigns: list[dict], **shuffler) -> Config:
    cfg = write_config(tmp / "c.toml", campaigns, shuffler={"batch_reports": 200, **shuffler})
    return dataclasses.replace(cfg, analyzer=dataclasses.replace(cfg.analyzer, keys_dir=str(tmp / "keys")))


def publish_keys(config: Config, r: redis.Redis) -> Keyring:
    ring = Keyring(config.analyzer)
    ring.ensure(r)
    return ring


def pinned(tmp: Path) -> str:
    """The analyzer signing key's public half (``analyzer_signing_key``) of the keys directory
    ``sealed_config`` gives (``tmp/keys``), made by ``publish_keys``."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ldptel import key_signing

    raw = (tmp / "keys" / SIGNING_FILE).read_bytes()
    return key_signing.public_text(Ed25519PrivateKey.from_private_bytes(raw).public_key())


def devices(stack: HttpStack, tmp: Path, name: str, campaign: str, values, seed: int | None = None,
            batch_size: int = 1000) -> int:
    """Report ``values`` (each one simulated device) through the SDK and flush; returns reports
    accepted. The devices pin the signing key of ``tmp/keys`` (``pinned``)."""
    rng = None if seed is None else np.random.default_rng(seed)
    with TelemetryClient(stack.url, INGEST_TOKEN, queue_path=tmp / f"{name}.sqlite", rng=rng,
                         accept_unrandomized=True, batch_size=batch_size,
                         analyzer_signing_key=pinned(tmp)) as client:
        client.report_many(campaign, list(values))
        result = client.flush(timeout=60)
        assert result.pending == 0, result
        return result.accepted


def shuffle_and_aggregate(config: Config, r: redis.Redis) -> None:
    Shuffler(config, r).run(once=True)
    Worker(config, r, log=lambda _m: None).run(once=True)
