"""The SDK's answer table (``ldptel.client.delivery.classify``) and the one config → mechanism
builder (``ldptel.mechanisms.builder``) shared by the server and the SDK."""

from __future__ import annotations

import random

import pytest

from ldptel.campaigns.config import parse_config
from ldptel.client.delivery import Action, backoff, classify
from ldptel.mechanisms import GRR, OLH, RAPPOR
from ldptel.mechanisms.builder import build_mechanism, uses_device_secret
from ldptel.mechanisms.heavy_hitters import HeavyHitters
from ldptel.mechanisms.range_haar import RangeHaar
from ldptel.mechanisms.range_hierarchical import RangeHierarchical


@pytest.mark.parametrize(("status", "batches", "action"), [
    (401, 1, Action.STOP), (403, 3, Action.STOP),
    (413, 2, Action.REGROUP), (413, 1, Action.DROP),
    (408, 1, Action.RETRY), (425, 1, Action.RETRY), (429, 1, Action.RETRY),
    (500, 1, Action.RETRY), (502, 1, Action.RETRY), (503, 4, Action.RETRY), (504, 1, Action.RETRY),
    (400, 1, Action.DROP), (404, 1, Action.DROP), (409, 1, Action.DROP), (415, 1, Action.DROP),
    (422, 1, Action.DROP),
])
def test_classify(status: int, batches: int, action: Action) -> None:
    assert classify(status, batches) is action


def test_backoff_is_full_jitter_at_least_retry_after() -> None:
    jitter = random.Random(1)
    delays = [backoff(jitter, 3, 0.5, 60.0, None) for _ in range(2000)]
    assert 0 <= min(delays) and max(delays) <= 4.0 and max(delays) > 3.5
    assert all(backoff(jitter, 0, 0.5, 60.0, 7.0) >= 7.0 for _ in range(100))
    assert backoff(jitter, 50, 0.5, 60.0, 1e6) == 60.0


CONFIG = {
    "campaigns": [
        {"name": "f", "epsilon": 1.0, "oracle": "grr", "domain": ["a", "b", "c"]},
        {"name": "o", "epsilon": 2.0, "domain_size": 100},
        {"name": "r", "oracle": "rappor", "bloom_bits": 32, "hashes": 2, "cohorts": 8, "f": 0.5,
         "p": 0.5, "q": 0.75, "candidates": ["x", "y"]},
        {"name": "hh", "kind": "heavy_hitters", "epsilon": 3.0, "max_length": 4, "width": 8},
        {"name": "rh", "kind": "range", "epsilon": 1.0, "domain_size": 64},
        {"name": "rt", "kind": "range", "epsilon": 1.0, "domain_size": 64,
         "method": "hierarchical", "branching": 4},
    ],
}


def test_server_and_sdk_build_the_same_mechanism() -> None:
    """``Campaign.mechanism`` and the SDK (``build_mechanism`` of ``GET /v1/campaigns``'s dict)
    give mechanisms with the same public parameters."""
    config = parse_config(CONFIG)
    types = {"f": GRR, "o": OLH, "r": RAPPOR, "hh": HeavyHitters, "rh": RangeHaar,
             "rt": RangeHierarchical}
    for camp in config.campaigns:
        server = camp.mechanism()
        public = camp.public()
        secret = b"s" * 32 if uses_device_secret(public) else None
        sdk = build_mechanism(public, secret)
        assert type(server) is type(sdk) is types[camp.name]
        assert server.public_params() == sdk.public_params()
    assert [uses_device_secret(c.public()) for c in config.campaigns] == \
        [False, False, True, True, False, False]


def test_build_mechanism_names_a_bad_kind_or_method() -> None:
    with pytest.raises(ValueError, match="kind"):
        build_mechanism({"kind": "histogram", "epsilon": 1.0})
    with pytest.raises(ValueError, match="method"):
        build_mechanism({"kind": "range", "epsilon": 1.0, "domain_size": 8, "method": "tree"})
    with pytest.raises(ValueError, match="branching"):
        build_mechanism({"kind": "range", "epsilon": 1.0, "domain_size": 8, "branching": 2})
