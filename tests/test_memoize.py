"""Memoized (longitudinal) mechanisms: the API and its errors, the chain's math, determinism of
the permanent response, campaign config keys, the builder, and the collector accepting memoized
reports over HTTP (the statistical and privacy checks are in test_memoize_stats.py)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from http_support import Poster, request
from ingest_support import INGEST_TOKEN, config_text, stored_reports

from ldptel.aggregator import accumulator_for
from ldptel.campaigns.config import ConfigError, parse_config
from ldptel.client import create_mechanism
from ldptel.mechanisms.builder import build_mechanism, privacy_loss, uses_device_secret
from ldptel.mechanisms.longitudinal import LGRR, LOLOHA, LOSUE, LHadamard, LOSUEFromSue
from ldptel.mechanisms.longitudinal_kinds import (
    LHeavyHitters,
    LRangeHaar,
    LRangeHierarchical,
)
from ldptel.mechanisms.memoize import Chain, unary_instant_keep

ORACLES = ["grr", "sue", "oue", "olh", "hadamard"]
SECRET = bytes(range(32))

MEMO_CAMPAIGNS = """
[[campaigns]]
name = "m-grr"
reports_per_window = 100  # the SDK test below sends 5 reports per client in one window
oracle = "grr"
epsilon = 1.0
epsilon_inf = 2.0
memoize = true
domain_size = 8

[[campaigns]]
name = "m-oue"
oracle = "oue"
epsilon = 1.0
epsilon_inf = 3.0
memoize = true
domain_size = 100

[[campaigns]]
name = "m-olh"
oracle = "olh"
epsilon = 1.0
epsilon_inf = 2.0
memoize = true
domain_size = 1024

[[campaigns]]
name = "m-hadamard"
oracle = "hadamard"
epsilon = 1.0
epsilon_inf = 2.0
memoize = true
domain_size = 100

[[campaigns]]
name = "m-hh"
kind = "heavy_hitters"
epsilon = 2.0
epsilon_inf = 4.0
memoize = true
max_length = 4

[[campaigns]]
name = "m-haar"
kind = "range"
epsilon = 1.0
epsilon_inf = 2.0
memoize = true
domain_size = 256

[[campaigns]]
name = "m-tree"
kind = "range"
method = "hierarchical"
epsilon = 1.0
epsilon_inf = 2.0
memoize = true
domain_size = 1024
"""

pytestmark = pytest.mark.collector(config_text(extra=MEMO_CAMPAIGNS))


def memo(oracle: str, d: int = 8, eps: float = 1.0, eps_inf: float = 2.0, **kw):
    return create_mechanism(oracle, epsilon=eps, epsilon_inf=eps_inf, domain_size=d, memoize=True,
                            **kw)


# --- API -------------------------------------------------------------------------------------

@pytest.mark.parametrize("oracle", ORACLES)
def test_api_attributes(oracle: str) -> None:
    mech = memo(oracle, d=8)
    assert mech.memoize is True
    assert (mech.epsilon, mech.epsilon_inf) == (1.0, 2.0)
    # min(d, k)·ε∞: k = d for GRR and unary, g = 4 at ε₁ = 1 for LOLOHA, 2 for the sign
    k = {"grr": 8, "sue": 8, "oue": 8, "olh": 4, "hadamard": 2}[oracle]
    assert mech.epsilon_lifetime == k * 2.0
    assert mech.public_params()["memoize"] is True
    assert mech.public_params()["epsilon_inf"] == 2.0
    assert privacy_loss(mech) == ("lifetime ε∞", 2.0)
    batch = mech.device(SECRET).encode(3, campaign="c")
    assert (batch.campaign, batch.count) == ("c", 1)
    mech.checked_columns(batch)


def test_kinds_attributes() -> None:
    hh = LHeavyHitters(2.0, 4, epsilon_inf=4.0)
    assert hh.epsilon_lifetime == hh.g * 4.0
    assert LRangeHaar(1.0, 256, epsilon_inf=2.0).epsilon_lifetime == 4.0
    tree = LRangeHierarchical(1.0, 1024, epsilon_inf=2.0)  # GRR over 4 nodes, then OLH with g = 4
    assert [c.k for c in tree.chains] == [4, 4, 4, 4, 4]
    assert tree.epsilon_lifetime == 4 * 2.0


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(epsilon=1.0, domain_size=8, memoize=True), "epsilon_inf is required"),
    (dict(epsilon=2.0, epsilon_inf=2.0, domain_size=8, memoize=True), "epsilon_inf must be greater"),
    (dict(epsilon=2.0, epsilon_inf=1.0, domain_size=8, memoize=True), "epsilon_inf must be greater"),
    (dict(epsilon=1.0, epsilon_inf=11.0, domain_size=8, memoize=True), "epsilon_inf must satisfy"),
    (dict(epsilon=1.0, epsilon_inf=2.0, domain_size=8), "epsilon_inf applies only with memoize"),
    (dict(epsilon=1.0, epsilon_inf=2.0, domain_size=8, memoize=False), "epsilon_inf applies only"),
    (dict(epsilon=1.0, epsilon_inf=2.0, domain_size=8, memoize="yes"), "memoize must be true"),
    (dict(epsilon=1.0, epsilon_inf=2.0, domain_size=8, memoize=True, secret=b"short"), "secret"),
    (dict(epsilon=1.0, epsilon_inf=2.0, domain_size=8, memoize=True, seed=1), "unknown argument 'seed'"),
    (dict(epsilon_inf=2.0, domain_size=8, memoize=True), "missing argument 'epsilon'"),
])
def test_bad_combinations_name_the_argument(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_mechanism("grr", **kwargs)


def test_memoize_false_is_the_plain_oracle() -> None:
    plain = create_mechanism("grr", epsilon=1.0, domain_size=8, memoize=False)
    assert type(plain).__name__ == "GRR"
    assert "memoize" not in plain.public_params()


def test_bad_values_and_secrets_are_refused() -> None:
    mech = memo("grr")
    dev = mech.device(SECRET)
    for bad in (8, -1, True, 1.0, "3"):
        with pytest.raises(ValueError, match="value"):
            dev.encode(bad)
    with pytest.raises(ValueError, match="secret"):
        mech.device(b"x" * 15)
    with pytest.raises(ValueError, match="one secret per value"):
        mech.encode_batch([1, 2], secrets=[SECRET])
    with pytest.raises(ValueError, match="value"):
        mech.encode_batch([1, 9], secrets=SECRET)


# --- the chain --------------------------------------------------------------------------------

@pytest.mark.parametrize(("k", "eps", "eps_inf"), [(2, 0.5, 1.0), (8, 1.0, 2.0), (1024, 1.0, 8.0),
                                                   (4, 2.0, 2.1)])
def test_chain_is_grr_at_epsilon_one(k: int, eps: float, eps_inf: float) -> None:
    c = Chain(eps, eps_inf, k, b"t")
    assert c.p_star / c.q_star == pytest.approx(math.exp(eps), rel=1e-12)
    assert c.p_star + (k - 1) * c.q_star == pytest.approx(1.0, rel=1e-12)
    assert c.p_star == pytest.approx(math.exp(eps) / (math.exp(eps) + k - 1), rel=1e-12)
    assert 1 / k <= c.p2 < 1 and c.p1 / c.q1 == pytest.approx(math.exp(eps_inf), rel=1e-12)


def test_unary_chain_is_oue_at_epsilon_one() -> None:
    mech = memo("oue", d=16, eps=1.0, eps_inf=3.0)
    assert mech.p == pytest.approx(0.5)
    assert mech.q == pytest.approx(1 / (math.e + 1), rel=1e-12)
    p2 = unary_instant_keep(1.0, 3.0)
    q1 = 1 / (math.exp(3.0) + 1)
    assert q1 * p2 + (1 - q1) * (1 - p2) == pytest.approx(1 / (math.e + 1), rel=1e-12)
    assert isinstance(memo("sue"), LOSUEFromSue) and memo("sue").name == "sue"


# --- memoization ----------------------------------------------------------------------------

@pytest.mark.parametrize("oracle", ORACLES)
def test_permanent_response_is_a_function_of_secret_and_value(oracle: str) -> None:
    """Two devices with one secret share every PRR (no stored table needed); the batch path with
    ``secrets`` derives the same PRR as the device; another secret gives other PRRs."""
    mech = memo(oracle, d=64)
    a, b = mech.device(SECRET), mech.device(SECRET)
    keys = [a.mech.key_one(v, a.parts) for v in range(64)]
    prr = [a.mech.permanent(SECRET, k) for k in keys]
    again = [b.mech.permanent(SECRET, b.mech.key_one(v, b.parts)) for v in range(64)]
    assert all(np.array_equal(x, y) for x, y in zip(prr, again, strict=True))
    other = mech.device(bytes(32))
    other_prr = [mech.permanent(bytes(32), mech.key_one(v, other.parts)) for v in range(64)]
    assert not all(np.array_equal(x, y) for x, y in zip(prr, other_prr, strict=True))


def test_grr_reports_concentrate_on_the_memoized_value() -> None:
    """L-GRR: a device's reports of one value are its PRR w.p. p₂ each, so 400 reports have the
    PRR as their mode (p₂ = 0.80 at ε₁ = 1, ε∞ = 2, d = 8, vs (1 − p₂)/7 ≈ 0.03 for the others);
    the batch path with one secret gives the same mode."""
    mech = memo("grr")
    for v in range(8):
        prr = mech.permanent(SECRET, v)
        dev = mech.device(SECRET)
        one = [int(mech.columns(dev.encode(v))["values"][0]) for _ in range(400)]
        batch = mech.columns(mech.encode_batch([v] * 400, rng=np.random.default_rng(v), secrets=SECRET))
        assert np.bincount(one, minlength=8).argmax() == prr
        assert np.bincount(batch["values"], minlength=8).argmax() == prr


def test_device_parts_are_fixed_per_secret() -> None:
    olh, had = memo("olh", d=64), memo("hadamard", d=64)
    for mech, col in ((olh, "seeds"), (had, "indices")):
        cols = mech.columns(mech.encode_batch(np.arange(64), rng=np.random.default_rng(1),
                                              secrets=SECRET))
        assert np.unique(cols[col]).size == 1
        assert int(cols[col][0]) == mech.device(SECRET).parts[col]
    hh = LHeavyHitters(2.0, 4, epsilon_inf=4.0)
    cols = hh.columns(hh.encode_batch(["a", "bb", "ccc"], secrets=SECRET))
    assert (cols["levels"][0], cols["seed_indices"][0]) == HH_slot(SECRET, hh)
    assert np.unique(cols["levels"]).size == 1


def HH_slot(secret: bytes, hh: LHeavyHitters) -> tuple[int, int]:
    """The plain HeavyHitters' slot of the secret (the memoized one uses the same labels)."""
    from ldptel.mechanisms.heavy_hitters import HeavyHitters

    return HeavyHitters(hh.epsilon, hh.max_length, secret=secret).device_slot()


def test_fingerprints_keep_plain_and_memoized_states_apart() -> None:
    plain = create_mechanism("grr", epsilon=1.0, domain_size=8)
    acc_m = accumulator_for(memo("grr"))
    with pytest.raises(ValueError, match="state was made with"):
        accumulator_for(plain).merge(acc_m)


# --- config and builder ---------------------------------------------------------------------

def campaign(extra: str) -> str:
    return f'[[campaigns]]\nname = "c"\n{extra}\n'


@pytest.mark.parametrize(("body", "key", "message"), [
    ('oracle = "grr"\nepsilon = 1.0\ndomain_size = 8\nmemoize = true', "epsilon_inf", "is required"),
    ('oracle = "grr"\nepsilon = 1.0\ndomain_size = 8\nmemoize = true\nepsilon_inf = 1.0',
     "epsilon_inf", "greater than epsilon"),
    ('oracle = "grr"\nepsilon = 1.0\ndomain_size = 8\nepsilon_inf = 2.0', "epsilon_inf",
     "only with memoize"),
    ('oracle = "grr"\nepsilon = 1.0\ndomain_size = 8\nmemoize = 1\nepsilon_inf = 2.0', "memoize",
     "true or false"),
    ('oracle = "grr"\nepsilon = 1.0\ndomain_size = 8\nmemoize = true\nepsilon_inf = "2"',
     "epsilon_inf", "must be a number"),
    ('oracle = "rappor"\nbloom_bits = 8\nhashes = 1\ncohorts = 1\nf = 0.5\np = 0.5\nq = 0.75\n'
     'candidates = ["a"]\nmemoize = true', "memoize", "does not apply to rappor"),
])
def test_config_errors_name_the_key(body: str, key: str, message: str) -> None:
    import tomllib

    with pytest.raises(ConfigError, match=rf"campaigns\[c\]\.{key}: .*{message}"):
        parse_config(tomllib.loads(campaign(body)))


def test_config_builds_every_memoized_kind() -> None:
    import tomllib

    cfg = parse_config(tomllib.loads(MEMO_CAMPAIGNS))
    kinds = {c.name: type(c.mechanism()) for c in cfg.campaigns}
    assert kinds == {"m-grr": LGRR, "m-oue": LOSUE, "m-olh": LOLOHA, "m-hadamard": LHadamard,
                     "m-hh": LHeavyHitters, "m-haar": LRangeHaar, "m-tree": LRangeHierarchical}
    for c in cfg.campaigns:
        public = c.public()
        assert public["memoize"] is True and public["epsilon_inf"] > public["epsilon"]
        assert uses_device_secret(public)
        sdk = build_mechanism(public, SECRET)
        assert sdk.public_params() == c.mechanism().public_params()
        assert sdk.secret == SECRET  # type: ignore[attr-defined]
        assert json.loads(json.dumps(public)) == public


# --- the collector --------------------------------------------------------------------------

VALUES = {"m-grr": 3, "m-oue": 42, "m-olh": 1000, "m-hadamard": 7, "m-hh": "abc", "m-haar": 200,
          "m-tree": 900}


def test_collector_accepts_memoized_reports_and_rejects_bad_ones(collector, redis_client) -> None:
    status, body = request(collector.url, "GET", "/v1/campaigns",
                           headers={"Authorization": f"Bearer {INGEST_TOKEN}"})
    assert status == 200
    public = {c["name"]: c for c in body["campaigns"]}  # type: ignore[index]
    poster = Poster(collector.url)
    try:
        for name, value in VALUES.items():
            assert public[name]["memoize"] is True
            mech = build_mechanism(public[name], os.urandom(32))
            batch = mech.encode(value, campaign=name)
            assert poster.post(batch.SerializeToString())[0] == 202, name
            many = mech.encode_batch([value] * 50, rng=np.random.default_rng(0), campaign=name,
                                     secrets=[os.urandom(16) for _ in range(50)])
            assert poster.post(many.SerializeToString())[0] == 202, name
            assert stored_reports(redis_client, name) == 51
        bad = memo("grr").pack({"values": [3, 8]}, 2, "m-grr")  # reported value 8 of a d = 8 campaign
        status, data = poster.post(bad.SerializeToString())
        assert status == 400 and "value 8" in json.dumps(data) and '"index": 1' in json.dumps(data)
        assert stored_reports(redis_client, "m-grr") == 51
    finally:
        poster.close()


def test_sdk_reports_a_memoized_campaign_from_one_device_secret(collector, redis_client,
                                                                tmp_path) -> None:
    """``TelemetryClient.report`` on a memoized campaign: the mechanism carries the device's
    campaign secret (kept in the queue file), so a restarted client reports from the same PRR."""
    from ldptel.client import TelemetryClient

    before = stored_reports(redis_client, "m-grr")
    secrets = []
    for _ in range(2):  # the same queue file: the same device
        client = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite")
        try:
            for _ in range(5):
                client.report("m-grr", 3)
            assert client.flush().accepted == 5
            mech = client.mechanism("m-grr")
            assert isinstance(mech, LGRR)
            secrets.append(mech.secret)
        finally:
            client.close()
    assert secrets[0] == secrets[1]
    assert stored_reports(redis_client, "m-grr") == before + 10


def test_averaging_attack_contract() -> None:
    """The attack's figures (the statistical must-be-true runs in test_memoize_stats.py)."""
    from ldptel.aggregator.attack import attack_bound, averaging_attack

    result = averaging_attack(memo("grr"), devices=200, reports=20, domain=8, seed=1)
    assert (result.devices, result.reports, result.domain, result.claimed_epsilon) == (200, 20, 8, 2.0)
    assert result.bound == attack_bound(2.0, 8) == pytest.approx(math.exp(2) / (math.exp(2) + 7))
    assert result.margin == pytest.approx(4 * math.sqrt(result.bound * (1 - result.bound) / 200))
    plain = averaging_attack(create_mechanism("grr", epsilon=1.0, domain_size=8), devices=200,
                             reports=20, seed=1)
    assert plain.claimed_epsilon == 20.0 and "ok" in str(plain)
    rappor = create_mechanism("rappor", bloom_bits=8, hashes=1, cohorts=1, f=0.5, p=0.5, q=0.75,
                              candidates=["a", "b"])
    with pytest.raises(ValueError, match="rappor"):
        averaging_attack(rappor)
