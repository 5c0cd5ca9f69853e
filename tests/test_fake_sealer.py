"""``shuffler.sealer``: the shuffler's fakes sealed on a pool of processes (at once, or submitted
without waiting) are exactly what ``sealing.seal`` makes (each opens to its row, in order, under
the release's ``info``; every encapsulated key fresh); through the real shuffler
(``Shuffler.fakes``, real Redis, a signed published key) a release's fakes are sealed on the pool
without holding its loop (the release waits, then gets them, once) and open under the
aggregator's key; and ``[shuffler] fake_processes`` takes 0 to 256 and refuses anything else."""

from __future__ import annotations

import numpy as np
import pytest
import redis
from sealed_support import pinned, publish_keys, sealed_config

from ldptel import sealing
from ldptel.campaigns.config import ConfigError, parse_config
from ldptel.mechanisms.rows import from_rows
from ldptel.privacy.modes import ShuffledFakes
from ldptel.shuffler.held import Group
from ldptel.shuffler.sealer import MIN_PARALLEL, Sealer
from ldptel.shuffler.worker import Shuffler

BASE = {"campaigns": [{"name": "c", "oracle": "grr", "epsilon": 1.0, "domain_size": 4}]}
# d = 64 at central (1, 10⁻⁸) with the shuffler's fakes only: μ ≈ 62 per bucket, ~4,000 fakes a
# release (over MIN_PARALLEL: sealed on the pool)
FAKES = {"name": "sf-pool", "privacy_mode": "shuffled-fakes", "fake_source": "shuffler", "domain_size": 64,
         "central_epsilon": 1.0, "central_delta": 1e-8, "batch_min": 40, "min_reports": 1}


def test_pool_seals_what_one_process_seals() -> None:
    key = sealing.new_private()
    info = sealing.info("c", 1, 0, 7)
    rows = [i.to_bytes(4, "big") for i in range(MIN_PARALLEL + 501)]
    sealer = Sealer(2)
    try:
        pooled = sealer.seal(rows, key.public_key(), info)
        assert sealer._pool is not None, "a release over MIN_PARALLEL sealed without the pool"
        pending = sealer.submit(rows, key.public_key(), info)
        submitted = pending.result()
    finally:
        sealer.close()
    for out in (pooled, submitted):
        assert sealing.open_each(out, key, info, 4) == rows  # in row order, under this info only
        assert sealing.open_each(out[:5], key, sealing.info("c", 1, 1, 7), 4) == [None] * 5
    assert len({sealing.enc_of(m) for m in pooled + submitted}) == 2 * len(rows)  # fresh each


def test_small_release_and_one_process_seal_in_process() -> None:
    key = sealing.new_private()
    sealer = Sealer(4)
    sealed = sealer.seal([b"abcd"] * 10, key.public_key(), b"i")
    assert sealing.open_each(sealed, key, b"i", 4) == [b"abcd"] * 10
    assert sealer._pool is None and Sealer(1).processes == 1


@pytest.mark.parametrize("value", [0, 1, 2, 256])
def test_fake_processes_accepted(value: int) -> None:
    assert parse_config({**BASE, "shuffler": {"fake_processes": value}}).shuffler.fake_processes == value


@pytest.mark.parametrize("value", [-1, 257, True, 1.5, "2"])
def test_fake_processes_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="shuffler.fake_processes"):
        parse_config({**BASE, "shuffler": {"fake_processes": value}})


def test_shuffler_seals_a_release_of_fakes_on_the_pool(redis_client: redis.Redis, tmp_path) -> None:
    base = sealed_config(tmp_path, [FAKES], fake_processes=2)
    ring = publish_keys(base, redis_client)
    cfg = sealed_config(tmp_path, [FAKES], fake_processes=2, analyzer_signing_key=pinned(tmp_path))
    camp = cfg.campaign(FAKES["name"])
    assert camp is not None and isinstance(camp.mode, ShuffledFakes)
    mu = camp.mode.shuffler_fakes
    key_id = next(iter(ring.private))
    shuffler = Shuffler(cfg, redis_client, rng=np.random.default_rng(5))
    assert shuffler.sealer.processes == 2
    group = Group(version=camp.version, window=0, sealed=True, key_id=key_id)
    try:
        first = shuffler.fakes(camp, group, wait=False)  # drawn, submitted, not waited for
        assert shuffler.sealer._pool is not None
        assert first is None, "the loop waited for the fakes' seals"
        got = shuffler.fakes(camp, group, wait=True)  # the same set, now sealed (once: waits)
        assert got is not None and not shuffler._sealing  # used by one release, then forgotten
        out, sealed_to = got
    finally:
        shuffler.sealer.close()
    assert sealed_to == key_id
    d = camp.domain_size
    assert abs(len(out) - mu * d) < 5 * (mu * d) ** 0.5 and len(out) >= MIN_PARALLEL
    width = len(out[0]) - sealing.ENC_BYTES - sealing.TAG_BYTES
    info = sealing.info(camp.name, camp.version, 0, key_id)
    opened = sealing.open_each(out, ring.private[key_id], info, width)
    assert None not in opened
    values = from_rows(camp.mechanism(), b"".join(p for p in opened if p is not None))[0]["values"]
    counts = np.bincount(values, minlength=d)
    # Poisson(μ) per bucket: the mean over d buckets within 5 standard errors of μ, the variance ≈ μ
    assert abs(counts.mean() - mu) < 5 * (mu / d) ** 0.5
    assert 0.5 * mu < counts.var() < 1.6 * mu
