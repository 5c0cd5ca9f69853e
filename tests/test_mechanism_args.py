"""Bad arguments raise ``ValueError`` whose message names the argument (the Python API's contract,
issue 2), and the randomness contract: the OS by default, a seeded generator reproducibly."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ldptel.client import MECHANISMS, create_mechanism

ORACLES = ["grr", "sue", "oue", "olh", "hadamard"]
RAPPOR_OK = dict(bloom_bits=16, hashes=2, cohorts=4, f=0.5, p=0.5, q=0.75, candidates=["a", "b", "c"])


def raises_naming(name: str):
    """``pytest.raises(ValueError)`` whose message contains ``name`` as a word."""
    return pytest.raises(ValueError, match=rf"(?<![\w]){re.escape(name)}(?![\w])")


# --- ε and d --------------------------------------------------------------------------------

@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("epsilon", [0, 0.0, -1.0, -1e-300, 1e-17, 1e-6, 0.0099, 10.000001, 11, 1e9, math.inf,
                                     -math.inf, math.nan, "1.0", None, True, False, [1.0], 1 + 0j])
def test_bad_epsilon(oracle: str, epsilon) -> None:
    with raises_naming("epsilon"):
        create_mechanism(oracle, epsilon=epsilon, domain_size=8)
    with raises_naming("epsilon"):  # the classes check too, not only the factory
        MECHANISMS[oracle](epsilon, 8)


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("epsilon", [0.01, 0.5, 1, 10, 10.0, np.float32(2.0), np.int64(3)])
def test_good_epsilon_accepted(oracle: str, epsilon) -> None:
    mech = create_mechanism(oracle, epsilon=epsilon, domain_size=8)
    assert mech.epsilon == float(epsilon) and isinstance(mech.epsilon, float)


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("domain_size", [1, 0, -5, 2.0, 8.5, "8", None, True, np.float64(8), (1 << 31) + 1])
def test_bad_domain_size(oracle: str, domain_size) -> None:
    with raises_naming("domain_size"):
        create_mechanism(oracle, epsilon=1.0, domain_size=domain_size)


@pytest.mark.parametrize("oracle", ORACLES)
def test_smallest_domain_accepted(oracle: str) -> None:
    mech = create_mechanism(oracle, epsilon=1.0, domain_size=np.int32(2))
    assert mech.domain_size == 2
    mech.encode(1)
    mech.encode_batch([0, 1, 1], rng=np.random.default_rng(0))


# --- values -----------------------------------------------------------------------------------

@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("value", [-1, 10, 11, 1 << 40, 2.0, 3.5, "3", b"3", None, True, False,
                                   [3], np.array([3]), np.float64(3.0), math.nan])
def test_bad_value_for_encode(oracle: str, value) -> None:
    mech = create_mechanism(oracle, epsilon=1.0, domain_size=10)
    with raises_naming("value"):
        mech.encode(value)


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("values", [
    [0, 1, -1], [0, 10], [3, 1 << 40], [1 << 70], np.array([0, 10], dtype=np.uint8),
    np.array([5, 2**63], dtype=np.uint64),  # would wrap to a negative int64
    [0.0, 1.0], np.array([1.5]), ["1", "2"], "12", [True, False], np.array([True]), [None], [1, None],
    [[1, 2], [3, "x"]],
])
def test_bad_values_for_encode_batch(oracle: str, values) -> None:
    mech = create_mechanism(oracle, epsilon=1.0, domain_size=10)
    with raises_naming("value"):
        mech.encode_batch(values, rng=np.random.default_rng(0))


@pytest.mark.parametrize("oracle", ORACLES)
def test_good_values_accepted(oracle: str) -> None:
    mech = create_mechanism(oracle, epsilon=1.0, domain_size=10)
    for values in ([0, 9], np.array([9, 0], dtype=np.uint8), np.arange(10, dtype=np.int16), range(10), []):
        batch = mech.encode_batch(values, rng=np.random.default_rng(0))
        assert batch.count == len(values)
    for value in (0, 9, np.int64(9), np.uint8(4)):
        assert mech.encode(value).count == 1


# --- create_mechanism -------------------------------------------------------------------------

@pytest.mark.parametrize("oracle", ["GRR", "rr", "", "olh ", None, 3, ["grr"]])
def test_unknown_oracle(oracle) -> None:
    with raises_naming("oracle"):
        create_mechanism(oracle, epsilon=1.0, domain_size=8)


@pytest.mark.parametrize("oracle", ORACLES)
def test_unknown_and_missing_kwargs(oracle: str) -> None:
    with raises_naming("eps"):
        create_mechanism(oracle, eps=1.0, domain_size=8)
    with raises_naming("bloom_bits"):
        create_mechanism(oracle, epsilon=1.0, domain_size=8, bloom_bits=8)
    with raises_naming("domain_size"):
        create_mechanism(oracle, epsilon=1.0)
    with raises_naming("epsilon"):
        create_mechanism(oracle, domain_size=8)


def test_rappor_unknown_and_missing_kwargs() -> None:
    with raises_naming("epsilon"):
        create_mechanism("rappor", epsilon=1.0, **RAPPOR_OK)
    with raises_naming("domain_size"):
        create_mechanism("rappor", domain_size=3, **RAPPOR_OK)
    for key in ("bloom_bits", "hashes", "cohorts", "f", "p", "q"):
        params = {k: v for k, v in RAPPOR_OK.items() if k != key}
        with raises_naming(key):
            create_mechanism("rappor", **params)


# --- RAPPOR parameters ------------------------------------------------------------------------

@pytest.mark.parametrize(("changes", "name"), [
    ({"q": 0.5}, "q"),                      # q = p: the instantaneous RR carries no signal
    ({"q": 0.25}, "q"),                     # q < p
    ({"p": 0.8, "q": 0.75}, "p"),
    ({"f": 0.0}, "f"),                      # no permanent RR: no longitudinal privacy
    ({"f": 1.0}, "f"),                      # all noise
    ({"f": -0.1}, "f"),
    ({"f": 1.5}, "f"),
    ({"f": "0.5"}, "f"),
    ({"f": None}, "f"),
    ({"f": math.nan}, "f"),
    ({"p": -0.1}, "p"),
    ({"q": 1.01}, "q"),
    ({"p": True}, "p"),
    ({"q": math.nan}, "q"),
    ({"hashes": 17}, "hashes"),             # more hashes than Bloom bits
    ({"hashes": 0}, "hashes"),
    ({"hashes": 2.0}, "hashes"),
    ({"bloom_bits": 0}, "bloom_bits"),
    ({"bloom_bits": 1, "hashes": 2}, "hashes"),
    ({"bloom_bits": "16"}, "bloom_bits"),
    ({"bloom_bits": 1 << 20}, "bloom_bits"),
    ({"cohorts": 0}, "cohorts"),
    ({"cohorts": 1.5}, "cohorts"),
    ({"candidates": ["a", "b", "a"]}, "candidates"),
    ({"candidates": "abc"}, "candidates"),
    ({"candidates": ["a", 2]}, "candidates"),
    ({"candidates": [b"a"]}, "candidates"),
    ({"secret": b"short"}, "secret"),
    ({"secret": "a string, not bytes"}, "secret"),
    ({"f": 0.01, "p": 0.001, "q": 0.999, "hashes": 8}, "hashes"),  # ε₁ > 10
])
def test_inconsistent_rappor_parameters(changes: dict, name: str) -> None:
    with raises_naming(name):
        create_mechanism("rappor", **{**RAPPOR_OK, **changes})


def test_rappor_epsilons_exposed() -> None:
    """RAPPOR's textbook example (Erlingsson et al. 2014): h = 2, f = 0.5, p = 0.5,
    q = 0.75 gives ε∞ = 4 ln 3, ε₁ ≈ 1.07."""
    mech = create_mechanism("rappor", **RAPPOR_OK)
    assert mech.epsilon_inf == pytest.approx(4 * math.log(3), rel=1e-12)
    q_star, p_star = 0.25 * 1.25 + 0.5 * 0.75, 0.25 * 1.25 + 0.5 * 0.5  # ½f(p+q) + (1−f)·q or p
    assert (q_star, p_star) == (0.6875, 0.5625)
    expected = 2 * math.log(q_star * (1 - p_star) / (p_star * (1 - q_star)))
    assert mech.epsilon == mech.epsilon_one == pytest.approx(expected, rel=1e-12)
    assert round(mech.epsilon, 2) == 1.07


@pytest.mark.parametrize("values", [["a", 1], [None], [b"a"], "abc", [["a"]], np.array([1, 2])])
def test_rappor_bad_values(values) -> None:
    mech = create_mechanism("rappor", **RAPPOR_OK)
    with raises_naming("value" if not isinstance(values, str) else "values"):
        mech.encode_batch(values, rng=np.random.default_rng(0))


@pytest.mark.parametrize("value", [1, None, b"a", ["a"], True])
def test_rappor_bad_value_for_encode(value) -> None:
    mech = create_mechanism("rappor", **RAPPOR_OK)
    with raises_naming("value"):
        mech.encode(value)


# --- randomness -------------------------------------------------------------------------------

def payload_bytes(mech, batch) -> bytes:
    return getattr(batch, mech.payload).SerializeToString()


@pytest.mark.parametrize("oracle", ORACLES)
def test_encode_without_rng_uses_os_randomness(oracle: str) -> None:
    """Two calls without ``rng`` differ even with numpy's global state reset before each (the
    randomness is not numpy's global PRNG). Two independent reports of value 0 in d = 64 at ε = 1
    coincide w.p. ≤ 0.61 (OUE: per bit q² + (1 − q)² ≤ 0.61, and 64 bits; GRR: p² + 63q² = 0.016;
    Hadamard: (p² + (1 − p)²)/64; OLH: ≤ 2^-32 for the seed), so two honest 256-report batches
    are equal w.p. < 0.61^256 < 1e-54. The single-report check uses the oracles whose one report
    has ≥ 32 random bits (OLH's seed; SUE/OUE's 64 bits): equal w.p. < 0.61^63 < 1e-13."""
    mech = create_mechanism(oracle, epsilon=1.0, domain_size=64)
    outs = []
    for _ in range(2):
        np.random.seed(0)
        outs.append(payload_bytes(mech, mech.encode_batch(np.zeros(256, dtype=np.int64))))
    assert outs[0] != outs[1]
    if oracle in ("olh", "sue", "oue"):  # a 32-bit seed / 64 random bits in one report
        np.random.seed(0)
        one = payload_bytes(mech, mech.encode(5))
        np.random.seed(0)
        assert payload_bytes(mech, mech.encode(5)) != one


@pytest.mark.parametrize("oracle", ORACLES)
def test_seeded_rng_is_reproducible(oracle: str) -> None:
    mech = create_mechanism(oracle, epsilon=1.0, domain_size=64)
    values = np.arange(1000) % 64
    a = mech.encode_batch(values, rng=np.random.default_rng(42))
    b = mech.encode_batch(values, rng=np.random.default_rng(42))
    c = mech.encode_batch(values, rng=np.random.default_rng(43))
    assert payload_bytes(mech, a) == payload_bytes(mech, b) != payload_bytes(mech, c)
    assert a.batch_id != b.batch_id  # a retry id is random even in a simulation


def test_rappor_randomness() -> None:
    mech = create_mechanism("rappor", **{**RAPPOR_OK, "bloom_bits": 64})
    values = ["a", "b", "c"] * 100
    a = mech.encode_batch(values, rng=np.random.default_rng(42))
    b = mech.encode_batch(values, rng=np.random.default_rng(42))
    assert payload_bytes(mech, a) == payload_bytes(mech, b)
    np.random.seed(0)
    c = mech.encode_batch(values)
    np.random.seed(0)
    assert payload_bytes(mech, mech.encode_batch(values)) != payload_bytes(mech, c)
    # one device: 64 instantaneous-RR bits per report are fresh each time
    assert payload_bytes(mech, mech.encode("a")) != payload_bytes(mech, mech.encode("a"))


@pytest.mark.parametrize("rng", [42, "seed", np.random.RandomState(1)])
def test_bad_rng_is_named(rng) -> None:
    mech = create_mechanism("grr", epsilon=1.0, domain_size=4)
    with pytest.raises(ValueError, match="rng"):
        mech.encode_batch([0, 1], rng=rng)
