"""Errors carry their key as an attribute (issue 33): a ``ConfigError`` (and ``UncertifiableTarget``)
names the config key in ``.key``, and the mechanisms' and the planner's argument errors name their
argument (``argument_of``), so that no caller recovers a key by parsing a message."""

from __future__ import annotations

from typing import Any

import pytest

import ldptel
from ldptel.campaigns.campaign import parse_campaign
from ldptel.errors import ConfigError, UncertifiableTarget
from ldptel.mechanisms import create_mechanism
from ldptel.mechanisms.errors import argument_of
from ldptel.privacy.planner import compute_plan

RAPPOR = {"name": "r", "kind": "frequency", "oracle": "rappor", "bloom_bits": 32, "hashes": 2, "cohorts": 4,
          "f": 0.5, "p": 0.5, "q": 0.75, "candidates": ["a", "b"]}
FAKES = {"name": "f", "kind": "frequency", "privacy_mode": "shuffled-fakes", "domain_size": 1024,
         "central_epsilon": 0.5, "central_delta": 1e-8, "batch_min": 100}


@pytest.mark.parametrize(("table", "key"), [
    ({"name": "x", "epsilon": 50, "domain_size": 4}, "campaigns[x].epsilon"),
    ({**RAPPOR, "q": 0.25}, "campaigns[r].q"),  # RAPPOR's own check, through argument_of
    ({**RAPPOR, "f": 0.0}, "campaigns[r].f"),
    ({"name": "n", "kind": "numeric", "epsilon": 1.0, "lower": 5, "upper": 5}, "campaigns[n].upper"),
    ({"name": "n", "kind": "numeric", "epsilon": 1.0, "lower": 1e300, "upper": 2e300},
     "campaigns[n].lower"),
    ({"name": "g", "kind": "frequency", "privacy_mode": "shuffled-fakes", "oracle": "grr",
      "local_epsilon": 20, "domain_size": 8, "central_epsilon": 1.0, "batch_min": 100},
     "campaigns[g].local_epsilon"),
])
def test_a_config_error_names_its_key(table: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_campaign(table, "campaigns[0]")
    assert info.value.key == key and str(info.value).startswith(f"{key}: ")


def test_an_uncertifiable_target_names_central_epsilon() -> None:
    with pytest.raises(UncertifiableTarget) as info:
        parse_campaign(FAKES, "campaigns[0]")
    assert info.value.key == "campaigns[f].central_epsilon" and info.value.suggestion["batch_min"] > 100
    assert ldptel.UncertifiableTarget is UncertifiableTarget  # exported at the root, as errors.py says


def test_argument_errors_stay_plain_value_errors_and_name_the_argument() -> None:
    with pytest.raises(ValueError) as info:
        create_mechanism("grr", epsilon=0.0, domain_size=4)
    assert type(info.value) is ValueError and argument_of(info.value) == "epsilon"  # the SDK's contract
    with pytest.raises(ValueError) as info:
        compute_plan("shuffled", "grr", 16, 1.0, 2.0, 1000)
    assert argument_of(info.value) == "central_delta"
    assert argument_of(ValueError("central_delta is mentioned but not named")) is None
