"""Numbers in query strings are ASCII digits only (issue 24, item 11): ``²`` once passed
``str.isdigit()`` and then failed ``int()`` with a 500 on ``window=``, ``version=``, ``from=``,
``to=`` and ``items=`` of the export endpoints. Every such value now answers 400."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from agg_support import HttpStack, write_config

from ldptel.numbers import ascii_int

CAMPAIGNS = [
    {"name": "freq", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "window": "1h"},
    {"name": "hh", "kind": "heavy_hitters", "epsilon": 2.0, "max_length": 4, "window": "1h"},
    {"name": "rng", "kind": "range", "epsilon": 1.0, "domain_size": 16, "window": "1h"},
    {"name": "num", "kind": "numeric", "epsilon": 1.0, "lower": 0, "upper": 10, "window": "1h"},
]
ENDPOINTS = [("freq", "estimates"), ("num", "mean"), ("hh", "heavy-hitters"), ("rng", "range?lo=1&hi=2"),
             ("rng", "quantiles?q=0.5"), ("freq", "windows"), ("rng", "series?items=1")]
NOT_ASCII = ["²", "٣", "１", "3²"]
QUOTED = [quote(v) for v in NOT_ASCII]


def test_ascii_int_takes_ascii_digits_only() -> None:
    assert ascii_int("0") == 0 and ascii_int("1700000000") == 1_700_000_000
    for bad in [*NOT_ASCII, "", " 5", "5 ", "+5", "-5", "1_0", "5\n", "0x10", None, 5]:
        assert ascii_int(bad) is None, bad
    assert ascii_int("1" * 13, 12) is None and ascii_int("1" * 12, 12) == int("1" * 12)


@pytest.fixture
def http(tmp_path: Path, redis_url: str, redis_client: redis.Redis):
    stack = HttpStack(write_config(tmp_path / "c.toml", CAMPAIGNS), redis_url)
    yield stack
    stack.close()


@pytest.mark.parametrize("name,endpoint", ENDPOINTS)
def test_unicode_digits_answer_400_not_500(http: HttpStack, name: str, endpoint: str) -> None:
    sep = "&" if "?" in endpoint else "?"
    listing = endpoint.startswith(("windows", "series"))
    params = ["version", "from", "to"] if listing else ["window", "version"]
    for param in params:
        for value in QUOTED:
            status, _, body = http.get(f"/v1/campaigns/{name}/{endpoint}{sep}{param}={value}")
            assert status == 400, (endpoint, param, value, status, body)
            assert json.loads(body)["error"] in ("bad_parameter", "bad_window"), body
    if endpoint.startswith("series"):
        for value in QUOTED:
            status, _, body = http.get(f"/v1/campaigns/{name}/series?items={value}")
            assert status == 400 and json.loads(body)["error"] == "bad_parameter", (value, body)
    if endpoint.startswith("range"):
        status, _, body = http.get(f"/v1/campaigns/{name}/range?lo={QUOTED[1]}&hi=5")
        assert status == 400 and json.loads(body)["error"] == "bad_parameter", body
