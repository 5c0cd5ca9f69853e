"""Issue 36, fakes added by the shuffler (``fake_source``): a Sybil flood — one honest device and
batch_min − 1 single-device envelopes of one attacker — through the real collector over HTTP, the
SDK, the shuffler, the aggregator and Redis, and ≥ 200 simulated attacks in this process (the
shuffler's real fake drawing, the aggregator's real decoder): the victim keeps the certified
claim against adversarial devices with ``fake_source = "shuffler"``; with ``"devices"`` (the
fakes of before, and the negative control) it does not."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sealed_support import devices, publish_keys, sealed_config

from ldptel import key_signing, keys, sealing
from ldptel.aggregator.decoders.fakes import FakesAccumulator
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.campaign import parse_campaign
from ldptel.client.configs import fake_rate_problem
from ldptel.errors import ConfigError
from ldptel.mechanisms.rows import from_rows, row_bytes, to_rows
from ldptel.privacy.fake_sources import split
from ldptel.privacy.planner import adversarial_bound
from ldptel.privacy.release_claims import fake_split, window_claim
from ldptel.proto import SEALED_SCHEMA_VERSION, SealedBatch
from ldptel.shuffler.fakes import draw_indices
from ldptel.shuffler.worker import Shuffler

BASE = {"privacy_mode": "shuffled-fakes", "domain_size": 64, "central_epsilon": 1.0, "central_delta": 1e-6,
        "batch_min": 40, "min_reports": 1}
SHUFFLER = {**BASE, "name": "sybil-shuffler", "fake_source": "shuffler"}
DEVICES = {**BASE, "name": "sybil-devices", "fake_source": "devices"}
ATTACKER_VALUE, VICTIM_VALUE = 0, 37


def flood(stack: HttpStack, campaign: str, envelopes: int, value: int) -> None:
    """The attacker: ``envelopes`` single-device envelopes, each one message on ``value`` and no
    fake, sealed to the analyzer key of the campaign's public config (the ingest token and the
    public key are all it needs)."""
    status, _, body = stack.request("GET", "/v1/campaigns", None, {"Authorization": f"Bearer {INGEST_TOKEN}"})
    assert status == 200, body
    cfg = next(c for c in json.loads(body)["campaigns"] if c["name"] == campaign)
    key = cfg["analyzer_key"]
    public = sealing.load_public(base64.b64decode(key["public"]))
    window = keys.window_start(time.time(), int(cfg.get("window_seconds", 0)))
    info = sealing.info(campaign, int(cfg.get("version", 1)), window, int(key["id"]))
    row = np.array([value], dtype="<u4").tobytes()
    for _ in range(envelopes):
        env = SealedBatch(campaign=campaign, campaign_version=int(cfg.get("version", 1)),
                          schema_version=SEALED_SCHEMA_VERSION, batch_id=os.urandom(16), reports=1,
                          key_id=int(key["id"]), window=window, messages=sealing.seal([row], public, info))
        status, _, body = stack.request("POST", "/v1/reports", env.SerializeToString(), {
            "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
        assert status == 202, (status, body)


def test_sybil_flood_end_to_end(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    cfg = sealed_config(tmp_path, [SHUFFLER, DEVICES])
    publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        for name in (SHUFFLER["name"], DEVICES["name"]):
            assert devices(stack, tmp_path, f"victim-{name}", name, [VICTIM_VALUE], seed=1) == 1
        victim_env = [SealedBatch.FromString(f[keys.ENTRY_BATCH])
                      for _, f in redis_client.xrange(keys.ingress_key(SHUFFLER["name"], 0))]
        assert [len(e.messages) for e in victim_env] == [1]  # its value only: no device fake
        for name in (SHUFFLER["name"], DEVICES["name"]):
            flood(stack, name, BASE["batch_min"] - 1, ATTACKER_VALUE)
        Shuffler(cfg, redis_client, rng=np.random.default_rng(11)).run(once=True)
        Worker(cfg, redis_client, log=lambda _m: None).run(once=True)
        stds = {}
        for name in (SHUFFLER["name"], DEVICES["name"]):
            status, _, body = stack.get(f"/v1/campaigns/{name}/estimates?window=current")
            assert status == 200, body
            doc = json.loads(body)
            assert doc["n_reports"] == BASE["batch_min"] and doc["privacy"]["batches"] == [BASE["batch_min"]]
            est = np.array([row["estimate"] for row in doc["items"]])
            others = np.delete(est, ATTACKER_VALUE)  # every non-attacker bucket (the victim's among them)
            stds[name] = float(np.std(others, ddof=1))
            mode = cfg.campaign(name).mode
            mu = fake_split(mode).honest_mu(BASE["batch_min"], BASE["domain_size"])
            claims = {c["against"]: c for c in doc["privacy"]["claims"]}
            assert doc["privacy"]["fake_source"] == name.split("-")[1]
            if name == SHUFFLER["name"]:
                assert mode.fake_rate == 0 and mode.shuffler_fakes == pytest.approx(mu)
                assert stds[name] >= 0.5 * math.sqrt(mu), (stds, mu)
                assert claims["adversarial_devices"]["central_epsilon"] <= 1.0
                assert "the shuffler adds its Poisson fakes" in claims["adversarial_devices"]["assumes"][0]
            else:  # the negative control: device fakes only, the attacker's buckets carry none
                assert stds[name] < 0.5 * math.sqrt(mu), (stds, mu)
                assert claims["adversarial_devices"]["central_epsilon"] is None
            assert any("honest devices" in a for a in claims["honest_devices"]["assumes"])
        print(f"Sybil flood, std of the non-attacker buckets: {stds}")
    finally:
        stack.close()


def _attack_rate(mu: float, d: int, attackers: int, attacks: int, seed: int) -> float:
    """How often the attacker's best guess of the victim's value is right: the victim's value
    uniform over d, the attacker's ``attackers`` messages on value 0, the shuffler's Poisson(μ)
    fakes per bucket (``shuffler.fakes.draw_indices``), the release decoded by the aggregator's
    decoder; the guess is the MAP (argmax of the bucket's support less the attacker's messages,
    ties at random: the likelihood of value v is ∝ that residual)."""
    from ldptel.mechanisms.histogram import Histogram

    rng = np.random.default_rng(seed)
    mech = Histogram(d)
    right = 0
    for _ in range(attacks):
        victim = int(rng.integers(d))
        values = np.concatenate([[victim], np.zeros(attackers, dtype=np.int64), draw_indices(mu, d, rng)])
        cols, m = from_rows(mech, b"".join(row_bytes(to_rows(mech, {"values": values}, len(values)))))
        acc = FakesAccumulator(mech)
        acc.add_release(cols, m, attackers + 1)
        est = acc.estimate()
        support = est.counts + (m - attackers - 1) / d  # the published counts plus F/d (F = M − n)
        residual = support - attackers * (np.arange(d) == 0)
        best = np.flatnonzero(np.isclose(residual, residual.max()))
        right += int(rng.choice(best) == victim)
    return right / attacks


def test_simulated_attacks_stay_within_the_certified_claim() -> None:
    """P(right) ≤ e^ε/d + δ for any guess, the victim's value uniform over d: for each value v and
    any fixed v₀, P(g(M(v)) = v) ≤ e^ε·P(g(M(v₀)) = v) + δ, and Σ_v P(g(M(v₀)) = v) = 1."""
    camp = parse_campaign({**SHUFFLER, "domain_size": 16}, "campaigns[0]")
    d, mode = 16, camp.mode
    mu = fake_split(mode).adversarial_mu(d)
    claim = adversarial_bound(mu, d, mode.central_delta)
    assert claim.epsilon <= 1.0
    bound = math.exp(claim.epsilon) / d + mode.central_delta
    attacks = 1000
    rate = _attack_rate(mu, d, mode.batch_min - 1, attacks, seed=3)
    # at most the bound plus 3.3 binomial standard deviations (one-sided, p ≈ 5e-4)
    assert rate <= bound + 3.3 * math.sqrt(bound * (1 - bound) / attacks), (rate, bound)
    print(f"μ = {mu:.3g}, certified ε = {claim.epsilon:.4g}: the attacker's best guess right "
          f"{rate:.4f} of {attacks} (bound e^ε/d + δ = {bound:.4f}; a blind guess 1/d = {1 / d:.4f})")
    broken = _attack_rate(0.0, d, mode.batch_min - 1, 200, seed=4)  # a shuffler that adds no fake
    assert broken == 1.0 and broken > bound + 0.5


def test_fake_source_config() -> None:
    at = "campaigns[0]"
    by_source = {s: parse_campaign({**BASE, "name": "c", "fake_source": s}, at).mode
                 for s in ("devices", "shuffler", "both")}
    default = parse_campaign({**BASE, "name": "c"}, at).mode
    assert default.fake_source == "both" and default == by_source["both"]
    mu = by_source["devices"].plan.fakes_per_bucket
    for mode in by_source.values():  # the same μ in an honest batch of batch_min devices
        assert fake_split(mode).honest_mu(BASE["batch_min"], BASE["domain_size"]) == pytest.approx(mu)
        assert mode.plan.fakes_per_bucket == mu
    assert by_source["shuffler"].fake_rate == 0 and by_source["devices"].shuffler_fakes == 0
    assert by_source["both"].shuffler_fakes == pytest.approx(mu / 2)
    assert split(mu, "both", 64, 40).device_rate == pytest.approx(mu / 2 * 64 / 40)
    # the SDK's bounds take every source's config (λ = 0 with "shuffler")
    for source in ("devices", "shuffler", "both"):
        public = parse_campaign({**BASE, "name": "c", "fake_source": source}, at).public()
        claim = window_claim(parse_campaign({**BASE, "name": "c", "fake_source": source}, at), [40])
        public["privacy"] = {"fake_rate": claim["fake_rate"]}
        assert fake_rate_problem(public) is None
        assert public.get("fake_source", "devices") == source
    # refused, naming the key, for other modes and values
    local = {"name": "c", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "fake_source": "both"}
    for raw in ({**BASE, "name": "c", "fake_source": "nobody"}, local,
                {**BASE, "name": "c", "privacy_mode": "shuffled", "oracle": "grr", "fake_source": "both"}):
        with pytest.raises(ConfigError, match="fake_source"):
            parse_campaign(raw, at)
    # a plan pinned before the key existed (no fake_source) stays valid: "devices", as it was made
    made = parse_campaign({**BASE, "name": "c", "fake_source": "devices"}, at).mode.plan.to_json()
    old = {k: v for k, v in made.items() if k not in ("fake_source", "shuffler_fakes")}
    again = parse_campaign({**BASE, "name": "c"}, at, pinned=old)
    assert again.mode.fake_source == "devices" and again.mode.fake_rate == made["fake_rate"]
    assert again.mode.shuffler_fakes == 0
    with pytest.raises(ConfigError, match="plan"):
        parse_campaign({**BASE, "name": "c", "fake_source": "shuffler"}, at, pinned=old)


def test_shuffler_fakes_are_sealed_as_a_devices() -> None:
    """Same row format, length and HPKE ``info`` as a device's message (``client.sealed``), a fresh
    encapsulated key each, Poisson(μ) per bucket (mean and variance within 4 standard errors)."""
    from ldptel.mechanisms.histogram import Histogram
    from ldptel.shuffler.fakes import sealed_fakes

    d, mu = 64, 30.0
    mech = Histogram(d)
    private = sealing.new_private()
    info = sealing.info("c", 3, 86400, sealing.key_id(sealing.public_bytes(private.public_key())))
    fakes = sealed_fakes(mech, mu, private.public_key(), info, np.random.default_rng(5))
    device = sealing.seal(row_bytes(to_rows(mech, {"values": np.array([7])}, 1)), private.public_key(), info)
    assert {len(m) for m in fakes} == {len(device[0])} == {sealing.ciphertext_length(4)}
    assert len({sealing.enc_of(m) for m in fakes}) == len(fakes)
    plain, failed = sealing.open_all(fakes, private, info, 4)
    assert failed == 0
    cols, m = from_rows(mech, plain)
    counts = np.bincount(cols["values"], minlength=d)
    assert abs(counts.mean() - mu) <= 4 * math.sqrt(mu / d)
    assert abs(counts.var(ddof=1) / mu - 1) <= 4 * math.sqrt(2 / (d - 1))
    assert sealing.open_all(fakes[:3], private, sealing.info("c", 3, 0, 1), 4)[1] == 3  # bound to info


def test_a_release_waits_for_its_key(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    """No release without its fakes: while the release's analyzer key is not published the group
    stays in ingress; once it is, the release holds the devices' messages and the shuffler's fakes."""
    small = {**BASE, "name": "sybil-key", "fake_source": "shuffler", "domain_size": 8, "batch_min": 5,
             "window": "all"}
    cfg = sealed_config(tmp_path, [small])
    ring = publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        assert devices(stack, tmp_path, "k", "sybil-key", [1, 2, 3, 4, 5], seed=2) == 5
        published = redis_client.hgetall(keys.ANALYZER_KEYS_KEY)
        redis_client.delete(keys.ANALYZER_KEYS_KEY)
        waiting = redis_client.xlen(keys.ingress_key("sybil-key", 0))
        assert waiting >= 1
        warned: list[str] = []
        Shuffler(cfg, redis_client, log=warned.append, rng=np.random.default_rng(1)).run(once=True)
        assert redis_client.xlen(keys.ingress_key("sybil-key", 0)) == waiting
        assert redis_client.xlen(keys.stream_key("sybil-key", 0)) == 0
        assert any("is not published" in w for w in warned), warned
        redis_client.hset(keys.ANALYZER_KEYS_KEY, mapping=published)
        # [shuffler] analyzer_signing_key: a key signed by another signing key is not sealed to
        other = key_signing.public_text(Ed25519PrivateKey.generate().public_key())
        wrong = dataclasses.replace(cfg, shuffler=dataclasses.replace(cfg.shuffler,
                                                                      analyzer_signing_key=other))
        warned.clear()
        Shuffler(wrong, redis_client, log=warned.append, rng=np.random.default_rng(1)).run(once=True)
        assert redis_client.xlen(keys.ingress_key("sybil-key", 0)) == waiting
        assert any("analyzer_signing_key" in w for w in warned), warned
        pinned = dataclasses.replace(cfg, shuffler=dataclasses.replace(cfg.shuffler,
                                                                       analyzer_signing_key=ring.pinned))
        Shuffler(pinned, redis_client, rng=np.random.default_rng(1)).run(once=True)
        assert redis_client.xlen(keys.ingress_key("sybil-key", 0)) == 0
        parts = [SealedBatch.FromString(f[keys.ENTRY_BATCH])
                 for _, f in redis_client.xrange(keys.stream_key("sybil-key", 0))]
        messages = sum(len(p.messages) for p in parts)
        mu = cfg.campaign("sybil-key").mode.shuffler_fakes
        assert parts[0].release_reports == 5 and messages - 5 > 8 * mu - 6 * math.sqrt(8 * mu)
        assert len(ring.public) == 1
    finally:
        stack.close()
