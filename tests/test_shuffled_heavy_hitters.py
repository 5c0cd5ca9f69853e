"""Heavy hitters in ``privacy_mode = "shuffled"`` (issue 39), end to end on a real Redis: 10⁵
simulated devices (``report_many``: each its own level and pool index) through the SDK's sealing,
the real collector over HTTP, the shuffler and the aggregator (HPKE open, the heavy-hitter
decoder), read back from the export API; beside it the same values through the local mechanism at
ε = 1 (the central target), which the same bars refuse, so the test can fail. Also the config
(``shuffled-fakes`` refused with its cost), the plan command, the pool-OLH's bound and attack, and
the SDK's rules for bad strings in the shuffled mode; the lower bound's rates against real reports,
with a mechanism randomizing above its claimed ε₀ as the negative control."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack
from sealed_support import devices, pinned, publish_keys, sealed_config, shuffle_and_aggregate

from ldptel.aggregator.decoders.heavy_hitters import HeavyHitterAccumulator
from ldptel.campaigns.config import ConfigError, parse_campaign
from ldptel.client import TelemetryClient
from ldptel.commands.cli import main
from ldptel.mechanisms import hashing
from ldptel.mechanisms.heavy_hitters import HeavyHitters
from ldptel.mechanisms.rows import from_rows, to_rows
from ldptel.privacy.amplification import attack_pairs
from ldptel.privacy.planner import compute_plan, shuffled_bound
from ldptel.privacy.release_claims import planned_claim

N, STRINGS, BATCH_MIN, TARGET, DELTA = 100_000, 2_000, 10_000, 1.0, 1e-6
HH = {"name": "hh-sh", "kind": "heavy_hitters", "max_length": 8, "privacy_mode": "shuffled",
      "central_epsilon": TARGET, "central_delta": DELTA, "batch_min": BATCH_MIN, "min_reports": 1}
ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)


def population(seed: int = 39) -> tuple[np.ndarray, dict[str, int]]:
    """N values, Zipf(1.2) over ``STRINGS`` random strings of 1..8 bytes, and the true counts."""
    rng = np.random.default_rng(seed)
    words: set[str] = set()
    while len(words) < STRINGS:
        words.add(bytes(ALPHABET[rng.integers(0, ALPHABET.size, int(rng.integers(1, 9)))]).decode())
    vocab = np.array(sorted(words), dtype=object)
    w = 1.0 / np.arange(1, STRINGS + 1) ** 1.2
    values = vocab[rng.choice(STRINGS, size=N, p=w / w.sum())]
    uniq, counts = np.unique(values, return_counts=True)
    return values, dict(zip(uniq.tolist(), counts.tolist(), strict=True))


def top10(truth: dict[str, int]) -> set[str]:
    return {s for s, _ in sorted(truth.items(), key=lambda kv: -kv[1])[:10]}


@pytest.fixture
def stack(redis_client: redis.Redis, redis_url: str, tmp_path: Path):
    cfg = sealed_config(tmp_path, [HH], max_held_reports=4 * N, max_ingress_batches=4 * N)
    publish_keys(cfg, redis_client)
    s = HttpStack(cfg, redis_url)
    yield cfg, s
    s.close()


@pytest.mark.slow  # 10⁵ sealed devices: ~35 s of CPU (80 s wall on the shared 2-core machine)
def test_shuffled_heavy_hitters_end_to_end(stack, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, s = stack
    values, truth = population()
    t0 = time.perf_counter()
    assert devices(s, tmp_path, "hh", "hh-sh", values, seed=7, batch_size=5_000) == N
    t1 = time.perf_counter()
    shuffle_and_aggregate(cfg, redis_client)
    print(f"devices {t1 - t0:.1f} s, shuffle and aggregate {time.perf_counter() - t1:.1f} s")
    status, _, body = s.get("/v1/campaigns/hh-sh/heavy-hitters")
    assert status == 200, body
    doc = json.loads(body)
    camp = cfg.campaigns[0]
    eps0 = compute_plan("shuffled", "heavy_hitters", 8, TARGET, DELTA, BATCH_MIN).local_epsilon
    assert doc["kind"] == "heavy_hitters" and doc["epsilon"] == camp.epsilon == eps0
    assert doc["n_reports"] == N
    claim = doc["privacy"]
    assert claim["privacy_mode"] == "shuffled" and sum(claim["batches"]) == N
    assert min(claim["batches"]) >= BATCH_MIN
    # the window's claim: the worst release's U (certified, ≤ the target) with L beside it, from
    # the pool-OLH's own attack (not OLH's: its hash range differs)
    worst = shuffled_bound("heavy_hitters", eps0, 8, min(claim["batches"]), DELTA)
    assert claim["central_epsilon"] == pytest.approx(worst.epsilon) and claim["central_epsilon"] <= TARGET
    assert claim["central_epsilon_lower"] == pytest.approx(worst.epsilon_lower)
    assert 0 < claim["central_epsilon_lower"] < claim["central_epsilon"]
    items = doc["items"]
    found = {it["value"] for it in items}
    assert len(found & top10(truth)) >= 9, sorted(found)
    z = [abs(it["estimate"] - truth.get(it["value"], 0)) / it["std_error"] for it in items]
    assert max(z) <= 4.5, max(z)
    # the same values through the local mechanism at ε = 1 (the central target as a local ε): the
    # recall bar fails there, so the shuffled mode is what passes it
    local = HeavyHitters(TARGET, max_length=8)
    acc = HeavyHitterAccumulator(local)
    acc.add(local.encode_batch(values, rng=np.random.default_rng(8)))
    local_found = set(acc.estimate().labels)
    assert len(local_found & top10(truth)) < 9, sorted(local_found)


def test_bad_strings_refused_in_the_shuffled_mode(stack, tmp_path: Path) -> None:
    """Over max_length, not UTF-8 (a lone surrogate, or bytes), a NUL: ValueError naming the value,
    nothing queued; the empty string is a value as in the local mode (the root of the tree)."""
    _, s = stack
    with TelemetryClient(s.url, INGEST_TOKEN, queue_path=tmp_path / "bad.sqlite",
                         analyzer_signing_key=pinned(tmp_path)) as client:
        for bad in ("x" * 9, "caf\udce9", b"caf\xe9", "a\0b"):
            with pytest.raises(ValueError):
                client.report("hh-sh", bad)
            with pytest.raises(ValueError):
                client.report_many("hh-sh", ["ok", bad])
        assert client.pending() == 0
        client.report("hh-sh", "")
        assert client.pending() == 1


def test_config_and_plan_command(capsys: pytest.CaptureFixture[str]) -> None:
    camp = parse_campaign(dict(HH), "campaigns[0]")
    plan = compute_plan("shuffled", "heavy_hitters", 8, TARGET, DELTA, BATCH_MIN)
    assert camp.epsilon == plan.local_epsilon and camp.public()["oracle"] == "olh"
    assert camp.mode.plan.inputs.oracle == "heavy_hitters" and camp.mode.plan.inputs.domain_size == 8
    # the claim a page or document states: U with the pool-OLH's own L (OLH's attack, whose hash
    # range is round(e^ε₀) + 1 = 238, not 256, would state 0.456 here)
    claim = planned_claim(camp)
    pool = shuffled_bound("heavy_hitters", plan.local_epsilon, 8, BATCH_MIN, DELTA)
    assert claim["central_epsilon"] == pool.epsilon <= TARGET
    assert claim["central_epsilon_lower"] == pool.epsilon_lower == plan.central_epsilon_lower
    assert pool.epsilon_lower != shuffled_bound("olh", plan.local_epsilon, 8, BATCH_MIN, DELTA).epsilon_lower
    with pytest.raises(ConfigError, match=r"privacy_mode.*shuffled-fakes is not offered.*fakes per release"):
        parse_campaign({**HH, "privacy_mode": "shuffled-fakes"}, "campaigns[0]")
    with pytest.raises(ConfigError, match=r"oracle"):
        parse_campaign({**HH, "oracle": "grr"}, "campaigns[0]")
    base = ["privacy", "plan", "--kind", "heavy_hitters", "--mode", "shuffled", "--max-length", "8",
            "--central-epsilon", "1", "--central-delta", "1e-6", "--batch-min", "10000"]
    rc = main([*base, "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["kind"] == "heavy_hitters" and out["levels"] == 8
    assert out["local_epsilon"] == plan.local_epsilon and out["devices_per_level"] == 1250
    g = out["g"]
    p, q = math.exp(plan.local_epsilon) / (math.exp(plan.local_epsilon) + g - 1), 1 / g
    assert out["std_error"] == pytest.approx(math.sqrt(1250 * q * (1 - q)) / (p - q))
    assert 0 < out["central_epsilon_lower"] < out["central_epsilon"] <= 1.0
    rc = main([*base, "--oracle", "grr"])
    assert rc == 2 and "--oracle" in capsys.readouterr().err


def test_pool_olh_attack_is_its_own() -> None:
    """The attack's rates are the pool-OLH's (g = pool_hash_range(ε₀), a power of two), checked
    against the mechanism's own p and q: device 1's report supports a w.p. (1 − 1/g)·p."""
    mech = HeavyHitters(5.0, max_length=8)
    pairs = attack_pairs("heavy_hitters", 5.0, 8, 1000)
    assert len(pairs) == 3  # a third value always exists for strings
    assert pairs[0].u0 == pytest.approx((1 - 1 / mech.g) * mech.p)
    assert pairs[0].r0 == pytest.approx((1 - 1 / mech.g) / mech.g)


def support_rates(mech: HeavyHitters, value: str, a: str, b: str, n: int, seed: int) -> tuple[float, float]:
    """The share of n real reports of ``value`` (``encode_batch``: real pool seeds, real hashes)
    that support a only (y = H(a) ≠ H(b) at the report's level and seed) and b only."""
    cols = mech.columns(mech.encode_batch([value] * n, rng=np.random.default_rng(seed)))
    rows, _ = mech.string_rows([a, b])
    levels, index, y = cols["levels"], cols["seed_indices"], cols["values"]
    ka, kb = np.empty(n, np.uint32), np.empty(n, np.uint32)
    for j in range(mech.levels):
        sel = levels == j
        ka[sel], kb[sel] = mech.keys(rows, j)
    seeds = mech.pool[levels, index]
    ha = hashing.olh_hash_batch(seeds, ka, mech.g).astype(np.int64)
    hb = hashing.olh_hash_batch(seeds, kb, mech.g).astype(np.int64)
    return float(np.mean((y == ha) & (ha != hb))), float(np.mean((y == hb) & (ha != hb)))


@pytest.mark.parametrize("broken", [False, True])
def test_attack_rates_match_the_real_mechanism(broken: bool) -> None:
    """Independent check of the lower bound's pair: the rates at which real reports (the real
    pool, not an ideal hash) support a or b match ``attack_pairs("heavy_hitters")`` within 4.5
    binomial std errors. Negative control: a mechanism that randomizes at ε₀ + 1 while claiming ε₀
    is caught (its rates leave the pair's)."""
    eps0, n = 5.47, 200_000
    mech = HeavyHitters(eps0 + (1.0 if broken else 0.0), max_length=8)
    assert mech.g == 256  # the claimed ε₀'s hash range too: only the keep probability differs
    third, user, _ = attack_pairs("heavy_hitters", eps0, 8, n)  # others on c; on a (= device 1's rates)
    own = support_rates(mech, "alpha", "alpha", "bravo", n, seed=11)
    other = support_rates(mech, "zulu", "alpha", "bravo", n, seed=12)
    expected = [(own[0], user.u0), (own[1], user.u1), (other[0], third.r0), (other[1], third.r1)]
    z = [abs(got - want) / math.sqrt(want * (1 - want) / n) for got, want in expected]
    assert (max(z) > 4.5) == broken, z


def test_row_is_the_local_report() -> None:
    """A sealed message's plaintext is the local report (levels, seed_indices, values), 12 bytes
    little-endian u32 each, read back as the decoder's columns (the fast tier's guard of the layout
    the JS SDK's vectors share)."""
    mech = HeavyHitters(5.47, max_length=8)
    cols = mech.columns(mech.encode_batch(["alpha", "", "zz"], rng=np.random.default_rng(3)))
    rows = to_rows(mech, cols, 3)
    assert rows.dtype.itemsize == 12
    assert rows.tobytes()[:12] == np.array([cols["levels"][0], cols["seed_indices"][0], cols["values"][0]],
                                           dtype="<u4").tobytes()
    back, n = from_rows(mech, rows.tobytes())
    assert n == 3 and all(np.array_equal(back[k], cols[k]) for k in cols)
