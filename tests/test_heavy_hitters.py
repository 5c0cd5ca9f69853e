"""Heavy hitters through the prefix tree (docs/architecture.md, issue 5)."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash

from ldptel.aggregator.decoders import accumulator_for
from ldptel.aggregator.decoders.heavy_hitters import HeavyHitterAccumulator
from ldptel.campaigns.config import ConfigError, parse_config
from ldptel.mechanisms import hashing
from ldptel.mechanisms.errors import InvalidReport
from ldptel.mechanisms.hashing import xxh32_rows
from ldptel.mechanisms.heavy_hitters import HeavyHitters, level_bits, prefix_rows
from ldptel.proto import HeavyHitterPayload, ReportBatch

ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)


def vocabulary(rng: np.random.Generator, size: int, max_len: int) -> np.ndarray:
    """``size`` distinct random strings over [a-z0-9], lengths uniform in 1..max_len."""
    out: set[str] = set()
    while len(out) < size:
        n = int(rng.integers(1, max_len + 1))
        out.add(bytes(ALPHABET[rng.integers(0, ALPHABET.size, n)]).decode())
    words = np.array(sorted(out), dtype=object)
    rng.shuffle(words)
    return words


def test_xxh32_rows_matches_xxhash() -> None:
    rng = np.random.default_rng(0)
    for k in (1, 3, 4, 7, 15, 16, 17, 31, 32, 33, 64):
        rows = rng.integers(0, 256, (20, k)).astype(np.uint8)
        for seed in (0, 8, 2**32 - 1):
            ref = [xxhash.xxh32_intdigest(r.tobytes(), seed=seed) for r in rows]
            assert xxh32_rows(rows, seed).tolist() == ref


def test_levels_split_the_bits() -> None:
    assert level_bits(128, 16).tolist() == list(range(8, 129, 8))
    assert level_bits(128, 12).tolist() == [11, 22, 32, 43, 54, 64, 75, 86, 96, 107, 118, 128]
    row = np.frombuffer(b"\xff\xff\xff", dtype=np.uint8)[None, :]
    assert prefix_rows(row, 11).tolist() == [[0xFF, 0xE0]]


def test_sdk_rejects_bad_strings() -> None:
    mech = HeavyHitters(2.0, max_length=4)
    with pytest.raises(ValueError, match="longer than max_length = 4"):
        mech.encode("abcde")
    with pytest.raises(ValueError, match="longer than max_length"):
        mech.encode("ééé")  # 6 bytes in UTF-8
    with pytest.raises(ValueError, match="NUL"):
        mech.encode("a\0")
    with pytest.raises(ValueError, match="must be a string"):
        mech.encode(5)
    with pytest.raises(ValueError, match="longer than max_length"):
        mech.encode_batch(["ok", "toolong"])
    with pytest.raises(ValueError, match="levels"):
        HeavyHitters(2.0, max_length=16, levels=7)  # 19 bits per level > 16
    for ok in ("ab", "", "éé"):
        assert mech.encode(ok).count == 1


def test_device_level_fixed_and_scalar_path_matches_batch() -> None:
    """One device always reports at the level and seed index its secret fixes (for life: a new
    instance with the same secret too), and its scalar xxhash key equals the vectorized key the
    decoder computes for the same prefix."""
    secret = bytes(range(32))
    mech = HeavyHitters(3.0, max_length=8, levels=5, secret=secret)
    reports = [mech.encode(v).heavy_hitters for v in ("hello", "other", "hello") * 7]
    slots = {(r.levels[0], r.seed_indices[0]) for r in reports}
    assert slots == {mech.device_slot()} == {HeavyHitters(3.0, 8, levels=5, secret=secret).device_slot()}
    assert mech.device_level() == mech.device_slot()[0]
    others = {HeavyHitters(3.0, 8, levels=5, secret=bytes([i]) * 32).device_slot() for i in range(40)}
    assert len(others) > 30  # the slot depends on the secret
    rows, _ = mech.string_rows(["hello"])
    for lev in range(mech.levels):
        b = int(mech.bits[lev])
        pref = bytearray(b"hello\0\0\0"[: (b + 7) // 8])
        if b % 8:
            pref[-1] &= (0xFF << (8 - b % 8)) & 0xFF
        assert mech.keys(rows, lev)[0] == hashing.xxh32_bytes(bytes(pref), seed=b)


def test_validate_columns() -> None:
    mech = HeavyHitters(4.0, max_length=8)
    batch = mech.encode_batch(["a", "bb", "ccc"] * 10, rng=np.random.default_rng(1))
    cols = mech.columns(ReportBatch.FromString(batch.SerializeToString()))
    mech.validate_columns(cols, 30)
    bad = {k: v.copy() for k, v in cols.items()}
    bad["levels"][4] = mech.levels
    with pytest.raises(InvalidReport) as exc:
        mech.validate_columns(bad, 30)
    assert exc.value.index == 4 and "level" in exc.value.reason
    bad = {k: v.copy() for k, v in cols.items()}
    bad["values"][9] = mech.g
    with pytest.raises(InvalidReport) as exc:
        mech.validate_columns(bad, 30)
    assert exc.value.index == 9
    bad = {k: v.copy() for k, v in cols.items()}
    bad["seed_indices"][7] = mech.pool_size
    bad["values"][8] = mech.g
    with pytest.raises(InvalidReport) as exc:
        mech.validate_columns(bad, 30)
    assert exc.value.index == 7 and "seed index" in exc.value.reason  # the lowest bad index
    with pytest.raises(InvalidReport) as exc:
        mech.validate_columns({**cols, "seed_indices": cols["seed_indices"][:29]}, 30)
    assert exc.value.index == 29
    with pytest.raises(InvalidReport, match="seed_indices is missing") as exc:
        mech.validate_columns({**cols, "seed_indices": cols["seed_indices"][:0]}, 30)
    assert exc.value.index == 0


def test_batch_of_an_sdk_before_the_seed_pool_is_refused() -> None:
    """Such an SDK sends a 32-bit seed per report in field 2 (now reserved): the batch parses
    with no seed_indices and is refused naming report 0, not read as pool indices."""
    mech = HeavyHitters(4.0, max_length=8)
    batch = mech.encode_batch(["a", "bb", "ccc"], rng=np.random.default_rng(3))
    old = HeavyHitterPayload(levels=batch.heavy_hitters.levels, values=batch.heavy_hitters.values)
    seeds = b"".join(bytes([s]) for s in (5, 7, 9))  # packed varints of three small seeds
    batch.heavy_hitters.ParseFromString(old.SerializeToString() + b"\x12\x03" + seeds)
    parsed = ReportBatch.FromString(batch.SerializeToString())
    with pytest.raises(InvalidReport, match="seed_indices is missing") as exc:
        mech.checked_columns(parsed)
    assert exc.value.index == 0


def test_state_is_a_fixed_table_that_merges_and_round_trips() -> None:
    """The state is J·K·g counts whatever the number of reports; partial states add up to the
    whole; ``to_bytes`` is sparse while few cells are set and dense after, both round trip."""
    mech = HeavyHitters(4.0, max_length=4, levels=4, width=16, pool_size=64)
    rng = np.random.default_rng(2)
    values = np.array(["ab", "abc", "zz", "q"], dtype=object)[rng.choice(4, 6000, p=[.4, .3, .2, .1])]
    whole, parts = HeavyHitterAccumulator(mech), [HeavyHitterAccumulator(mech) for _ in range(3)]
    for i, chunk in enumerate(np.array_split(values, 3)):
        b = mech.encode_batch(chunk, rng=np.random.default_rng(10 + i))
        parts[i].add(b)
        whole.add(b)
    merged = HeavyHitterAccumulator.from_bytes(mech, parts[0].to_bytes())
    merged.merge(parts[1]).merge(HeavyHitterAccumulator.from_bytes(mech, parts[2].to_bytes()))
    assert merged.n == whole.n == 6000
    assert whole.state["counts"].shape == (4, 64, mech.g) and whole.state["counts"].sum() == 6000
    for key in whole.state:
        assert np.array_equal(merged.state[key], whole.state[key])
    small, dense = HeavyHitterAccumulator(mech), HeavyHitterAccumulator(mech)
    small.add(mech.encode_batch(["ab"] * 10, rng=rng))
    dense.add(mech.encode_batch(values[rng.integers(0, values.size, 60_000)], rng=rng))
    assert len(small.to_bytes()) < 2000 and small.stored_nbytes() < 200
    assert len(dense.to_bytes()) > dense.state["counts"].nbytes == dense.stored_nbytes() - 8
    for acc in (small, whole, dense):
        back = HeavyHitterAccumulator.from_bytes(mech, acc.to_bytes())
        assert back.n == acc.n and np.array_equal(back.state["counts"], acc.state["counts"])
    a, b = merged.estimate(), whole.estimate()
    assert a.labels == b.labels and np.allclose(a.counts, b.counts)
    assert set(a.labels) == {"ab", "abc", "zz", "q"}
    with pytest.raises(ValueError, match="new name"):
        merged.merge(HeavyHitterAccumulator(HeavyHitters(4.0, max_length=5)))
    with pytest.raises(ValueError):
        HeavyHitterAccumulator.from_bytes(HeavyHitters(4.0, max_length=4, levels=2), whole.to_bytes())


def test_terminator_distinguishes_prefix_strings() -> None:
    """"ab" and "abc" share a prefix; the terminator keeps them apart, and "ab" (terminated at
    level 3) is estimated from the pooled deeper levels."""
    mech = HeavyHitters(4.0, max_length=6, levels=6, width=8)
    values = np.array(["ab"] * 3000 + ["abc"] * 2000 + ["abcdef"] * 1500 + ["x"] * 3500, dtype=object)
    acc = accumulator_for(mech)
    acc.add(mech.encode_batch(values, rng=np.random.default_rng(4)))
    est = acc.estimate()
    truth = {"ab": 3000, "abc": 2000, "abcdef": 1500, "x": 3500}
    assert set(est.labels) == set(truth)
    for label, count, se, used in zip(est.labels, est.counts, est.std_error, est.levels_used,
                                      strict=True):
        assert abs(count - truth[label]) <= 4 * se
        assert used == 6 - 1 - len(label) if len(label) < 5 else used == 1


@pytest.fixture(scope="module")
def zipf_result() -> dict:
    """The issue's population: Zipf(1.1) over 10 000 random strings of up to 16 bytes, 200 000
    devices, ε = 4, the default layout (levels = max_length = 16, one byte per level; width 64).

    Power analysis (Var* = 4e^ε/(e^ε−1)² = 0.0760, 12 500 devices per level): the 10th string
    (c ≈ N/(10^1.1·H_{10⁴,1.1}) ≈ 2 400) has c/16 ≈ 150 per level against a null σ = √(12 500·
    Var*) ≈ 30.8: z ≈ 4.9 at every level, the 9th z ≈ 5.5, the 8th z ≈ 6.2. A level's survival
    threshold is z ≈ Φ̄⁻¹(1/512) ≈ 2.9 and the last level's Bonferroni threshold (α = 0.05 over
    a few thousand candidates) z ≈ 4.3, so the 10th string is missed w.p. ≈ 0.3, the 9th ≈ 0.1,
    the others rarely: recall ≈ 0.95 expected, and ≥ 0.9 unless two of the ten are missed.
    Measured by ``bench/heavy_hitters.py`` over 12 other seeds: mean 0.933, minimum 0.9 (12 of 12
    at ≥ 0.9), no false positive. The seed pool (K = 2048) adds its collision term, ≈ 4% of the
    null variance here (``ldptel.mechanisms.heavy_hitters``); the bench's five seeds give
    the same mean recall 0.96 as before the pool (``tests/test_heavy_hitters_stats.py``)."""
    rng = np.random.default_rng(20261121)
    words = vocabulary(rng, 10_000, 16)
    w = 1.0 / np.arange(1, words.size + 1) ** 1.1
    idx = rng.choice(words.size, size=200_000, p=w / w.sum())
    truth = dict(zip(words, np.bincount(idx, minlength=words.size).tolist(), strict=True))
    mech = HeavyHitters(4.0, max_length=16)
    acc = accumulator_for(mech)
    acc.add(mech.encode_batch(words[idx], rng=rng))
    return {"est": acc.estimate(), "truth": truth,
            "top": [s for s, _ in sorted(truth.items(), key=lambda kv: -kv[1])[:10]]}


def test_zipf_top10_recall(zipf_result: dict) -> None:
    est, top = zipf_result["est"], zipf_result["top"]
    recall = len(set(top) & set(est.labels)) / 10
    assert recall >= 0.9, (recall, est.labels)


def test_zipf_estimates_within_4_std_errors(zipf_result: dict) -> None:
    est, truth = zipf_result["est"], zipf_result["truth"]
    for label, count, se in zip(est.labels, est.counts, est.std_error, strict=True):
        if truth.get(label, 0) > 0:
            assert abs(count - truth[label]) <= 4 * se, (label, count, truth[label], se)


def test_zipf_false_positives_rare(zipf_result: dict) -> None:
    """A reported string nobody holds passes a Bonferroni test at level α = 0.05 over all final
    candidates: E[#false positives] ≤ 0.05 per decode, so P(≥ 2) ≤ 0.0013."""
    est, truth = zipf_result["est"], zipf_result["truth"]
    false = [s for s in est.labels if truth.get(s, 0) == 0]
    assert len(false) <= 1, false
    assert est.labels and len(est.labels) <= 64 * 16


def test_campaign_builds_heavy_hitters() -> None:
    cfg = parse_config({"campaigns": [{"name": "search", "kind": "heavy_hitters", "epsilon": 4.0,
                                       "max_length": 16, "levels": 12, "width": 32}]})
    mech = cfg.campaigns[0].mechanism()
    assert isinstance(mech, HeavyHitters) and (mech.levels, mech.width) == (12, 32)
    assert isinstance(accumulator_for(mech), HeavyHitterAccumulator)
    with pytest.raises(ConfigError, match="levels"):
        parse_config({"campaigns": [{"name": "s", "kind": "heavy_hitters", "epsilon": 4.0,
                                     "max_length": 16, "levels": 4}]})


def test_scalar_encode_keeps_the_hash_with_probability_p() -> None:
    mech = HeavyHitters(2.0, max_length=8, levels=4)
    n = 5000
    reports = [mech.encode("hello").heavy_hitters for _ in range(n)]
    level = reports[0].levels[0]
    rows, _ = mech.string_rows(["hello"])
    key = int(mech.keys(rows, level)[0])
    seed = int(mech.pool[level, reports[0].seed_indices[0]])
    hits = np.mean([hashing.olh_hash(seed, key, mech.g) == r.values[0] for r in reports])
    assert all((r.levels[0], r.seed_indices[0]) == mech.device_slot() for r in reports)
    assert abs(hits - mech.p) <= 4 * np.sqrt(mech.p * (1 - mech.p) / n)
