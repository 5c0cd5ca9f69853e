"""``aggregator.opening``: a release opened on a pool of processes gives exactly
``sealing.open_each``'s plaintexts, in order (good, tampered, foreign-key and wrong-length messages
mixed), and ``[analyzer] open_processes`` takes 0 to 256 and refuses anything else."""

from __future__ import annotations

import pytest

from ldptel import sealing
from ldptel.aggregator.opening import MIN_PARALLEL, Opener
from ldptel.campaigns.config import ConfigError, parse_config
from ldptel.process import chunk_bounds, processes_for

BASE = {"campaigns": [{"name": "c", "oracle": "grr", "epsilon": 1.0, "domain_size": 4}]}


def test_chunks_cover_every_message_once() -> None:
    for n in (1, 2, 7, 2048, 10_001):
        for parts in (1, 2, 3, 8, 64):
            bounds = chunk_bounds(n, parts)
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
            sizes = [b - a for a, b in bounds]
            assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_pool_opens_exactly_what_one_process_opens() -> None:
    key, other = sealing.new_private(), sealing.new_private()
    info = sealing.info("c", 1, 0, 7)
    n = MIN_PARALLEL + 501
    messages = sealing.seal([i.to_bytes(4, "big") for i in range(n)], key.public_key(), info)
    messages[3] = messages[3][:-1]  # wrong length
    tampered = bytearray(messages[n // 2])
    tampered[40] ^= 1
    messages[n // 2] = bytes(tampered)
    messages[-1] = sealing.seal([b"abcd"], other.public_key(), info)[0]  # another key
    opener = Opener(2)
    try:
        pooled = opener.open_each(messages, key, info, 4)
        assert opener._pool is not None, "a release over MIN_PARALLEL opened without the pool"
    finally:
        opener.close()
    assert pooled == sealing.open_each(messages, key, info, 4)
    assert [i for i, p in enumerate(pooled) if p is None] == [3, n // 2, n - 1]
    assert pooled[1] == (1).to_bytes(4, "big")


def test_small_release_and_one_process_open_in_process() -> None:
    key = sealing.new_private()
    messages = sealing.seal([b"abcd"] * 10, key.public_key(), b"i")
    opener = Opener(4)
    assert opener.open_each(messages, key, b"i", 4) == [b"abcd"] * 10
    assert opener._pool is None
    assert Opener(1).processes == 1 and processes_for(0) >= 1 and processes_for(3) == 3


@pytest.mark.parametrize("value", [0, 1, 2, 256])
def test_open_processes_accepted(value: int) -> None:
    cfg = parse_config({**BASE, "analyzer": {"open_processes": value}})
    assert cfg.analyzer.open_processes == value


@pytest.mark.parametrize("value", [-1, 257, True, 1.5, "2"])
def test_open_processes_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="analyzer.open_processes"):
        parse_config({**BASE, "analyzer": {"open_processes": value}})


def test_pool_opens_a_release_sealed_to_two_keys() -> None:
    """A release around a rotation: message i opens with the key of ``key_ids[i]``."""
    old, new = sealing.new_private(), sealing.new_private()
    infos = {1: sealing.info("c", 1, 0, 1), 2: sealing.info("c", 1, 0, 2)}
    n = MIN_PARALLEL + 100
    ids = [1 + (i % 3 == 0) for i in range(n)]
    messages = [sealing.seal([i.to_bytes(4, "big")], (old if k == 1 else new).public_key(), infos[k])[0]
                for i, k in enumerate(ids)]
    ids[7] = 2 if ids[7] == 1 else 1  # named with the other key: does not open
    opener = Opener(2)
    try:
        pooled = opener.open_keyed(messages, ids, {1: old, 2: new}, infos, 4)
    finally:
        opener.close()
    assert pooled == sealing.open_keyed(messages, ids, {1: old, 2: new}, infos, 4)
    assert [i for i, p in enumerate(pooled) if p is None] == [7]
