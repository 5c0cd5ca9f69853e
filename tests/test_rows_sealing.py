"""The pieces of a sealed message: a mechanism's columns ↔ fixed-width rows (``mechanisms.rows``)
for every oracle, the HPKE sealing (``ldptel.sealing``: every row its own ciphertext of a fixed
length, bound to campaign, version, window and key id), the device's fakes (``mechanisms.fakes``:
Poisson counts by inversion, uniform indices) and the fake-message decoder's unbiasedness and std
error (``decoders.fakes``), with fixed seeds and tolerances from the variance formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldptel import sealing
from ldptel.aggregator.decoders.fakes import FakesAccumulator
from ldptel.mechanisms import create_mechanism
from ldptel.mechanisms.fakes import fake_indices, poisson_counts
from ldptel.mechanisms.histogram import Histogram
from ldptel.mechanisms.rows import from_rows, row_bytes, row_dtype, to_rows, valid_rows

MECHS = [create_mechanism("grr", epsilon=2.0, domain_size=10),
         create_mechanism("oue", epsilon=1.0, domain_size=13),
         create_mechanism("sue", epsilon=1.0, domain_size=9),
         create_mechanism("olh", epsilon=1.0, domain_size=100),
         create_mechanism("hadamard", epsilon=1.0, domain_size=20), Histogram(7)]


@pytest.mark.parametrize("mech", MECHS, ids=lambda m: m.name)
def test_rows_round_trip(mech) -> None:
    rng = np.random.default_rng(3)
    batch = mech.encode_batch(rng.integers(0, 7, 200), rng=rng)
    cols = mech.columns(batch)
    rows = to_rows(mech, cols, 200)
    assert rows.dtype == row_dtype(mech) and len({len(r) for r in row_bytes(rows)}) == 1
    back, n = from_rows(mech, b"".join(row_bytes(rows)))
    assert n == 200 and valid_rows(mech, back, n).all()
    for key, col in cols.items():
        assert np.array_equal(np.asarray(col), back[key]), key


def test_bad_rows_are_found() -> None:
    mech = Histogram(7)
    cols, n = from_rows(mech, np.array([1, 9, 3, 7], dtype="<u4").tobytes())
    assert valid_rows(mech, cols, n).tolist() == [True, False, True, False]
    with pytest.raises(ValueError):
        from_rows(mech, b"\x00" * 5)


def test_sealing_binds_campaign_version_window_and_key() -> None:
    key = sealing.new_private()
    raw = sealing.public_bytes(key.public_key())
    kid = sealing.key_id(raw)
    info = sealing.info("c", 2, 3600, kid)
    rows = [bytes([i]) * 4 for i in range(5)]
    sealed = sealing.seal(rows, sealing.load_public(raw), info)
    assert {len(m) for m in sealed} == {sealing.ciphertext_length(4)} and len(set(sealed)) == 5
    plain, bad = sealing.open_all(sealed, key, info, 4)
    assert (plain, bad) == (b"".join(rows), 0)
    for other in (sealing.info("d", 2, 3600, kid), sealing.info("c", 1, 3600, kid),
                  sealing.info("c", 2, 0, kid), sealing.info("c", 2, 3600, kid ^ 1)):
        assert sealing.open_all(sealed, key, other, 4) == (b"", 5)
    assert sealing.open_all(sealed, sealing.new_private(), info, 4) == (b"", 5)
    tampered = bytearray(sealed[0])
    tampered[-1] ^= 1
    assert sealing.open_all([bytes(tampered), sealed[1][:-1]], key, info, 4) == (b"", 2)


@pytest.mark.parametrize("lam", [0.2, 0.636, 3.0, 900.0])
def test_poisson_counts(lam: float) -> None:
    n = 200_000
    x = poisson_counts(np.random.default_rng(7), lam, n)
    se = math.sqrt(lam / n)
    assert abs(x.mean() - lam) < 5 * se and abs(x.var() / lam - 1) < 5 * math.sqrt(2 / n) + 0.01
    idx = fake_indices(np.random.default_rng(8), 64_000, 64)
    counts = np.bincount(idx, minlength=64)
    assert abs(counts - 1000).max() < 6 * math.sqrt(1000)


@pytest.mark.parametrize("mech", [Histogram(32), create_mechanism("grr", epsilon=3.0, domain_size=32)],
                         ids=lambda m: m.name)
def test_fakes_decoder_unbiased_with_its_std_error(mech) -> None:
    rng = np.random.default_rng(11)
    n, lam, runs = 3000, 2.0, 300
    truth = np.bincount(rng.integers(0, 8, n), minlength=32)
    values = np.repeat(np.arange(32), truth)
    errors, stated = [], []
    for _ in range(runs):
        real = np.asarray(mech.randomize(values, rng)["values"], dtype=np.int64)
        fakes = fake_indices(rng, int(poisson_counts(rng, lam, n).sum()), 32)
        acc = FakesAccumulator(mech)
        acc.add_release({"values": np.concatenate([real, fakes])}, real.size + fakes.size, n)
        est = acc.estimate()
        errors.append(est.counts - truth)
        stated.append(est.std_error)
    errors_a, stated_a = np.array(errors), np.array(stated)
    assert np.all(np.abs(errors_a.mean(axis=0)) < 5 * stated_a.mean(axis=0) / math.sqrt(runs))
    ratio = errors_a.std(axis=0) / stated_a.mean(axis=0)
    assert abs(ratio.mean() - 1) < 0.05


def test_keyring_files_and_rotation(tmp_path) -> None:
    import stat
    import time as _time

    from ldptel.aggregator.keyring import Keyring
    from ldptel.campaigns.config import AnalyzerConfig

    ring = Keyring(AnalyzerConfig(key_rotation="30d", key_overlap="7d", keys_dir=str(tmp_path / "k")))
    t0 = _time.time()
    ring.ensure(None, now=t0)
    (first,) = ring.public
    key_file = tmp_path / "k" / f"{first:08x}.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and len(key_file.read_bytes()) == 32
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o700
    ring.ensure(None, now=t0 + 29 * 86400)
    assert set(ring.public) == {first}  # still current
    ring.ensure(None, now=t0 + 31 * 86400)
    second = next(k for k in ring.public if k != first)  # rotated; the first still held
    assert ring.public[first].accepted_until == ring.public[first].current_until + 7 * 86400
    ring.ensure(None, now=t0 + 45 * 86400)  # past accepted_until + overlap: deleted
    assert set(ring.public) == {second} and not key_file.exists()
    assert ring.key(second) is not None and ring.key(first) is None


def test_batch_min_fits_in_ingress_and_filling_releases() -> None:
    from ldptel.campaigns.config import ConfigError, parse_config
    from ldptel.shuffler import sealed

    camp = {"name": "f", "privacy_mode": "shuffled-fakes", "domain_size": 16, "central_epsilon": 1.0,
            "central_delta": 1e-6, "batch_min": 600, "window": "1d"}
    with pytest.raises(ConfigError, match=r"campaigns\[f\]\.batch_min"):
        parse_config({"shuffler": {"max_ingress_batches": 1000}, "campaigns": [camp]})
    cfg = parse_config({"shuffler": {"max_ingress_batches": 1200}, "campaigns": [camp]})
    c = cfg.campaigns[0]
    now = 86400 * 100 + 10  # inside the window that starts at 86400·100
    assert sealed.due(c, 86400 * 100, 700, 10**6, False, now=now) is None  # open: waits
    assert sealed.due(c, 86400 * 100, 700, 10**6, False, now=now, filling=True) == "ingress_full"
    assert sealed.due(c, 86400 * 100, 500, 10**6, False, now=now, filling=True) is None  # never below
    assert sealed.due(c, 86400 * 100, 500, 10**6, False, now=now + 2 * 86400) == "discard"
