"""``ldptel demo``'s shuffled-fakes section: a campaign in ``privacy_mode = "shuffled-fakes"``
(docs/privacy.md) — every device seals its true item plus Poisson fakes to the analyzer, the
shuffler releases whole batches of at least ``batch_min`` devices with fakes of its own
(``fake_source = "both"``: half the planned fakes each), the aggregator decrypts and
subtracts the fakes — printed against the truth, with the claim "central ε between L and U" and
the local OUE error at ε = 1 on the same devices for comparison.

With an ``[issuer]`` (the demo's own config, ``examples/demo.toml``) the campaign takes a report
only with a Privacy Pass token (issue 37): the SDK fetches one per envelope from the issuer
(``attester = "address"``: every simulated device shares 127.0.0.1, so ``tokens_per_window`` is
set high), and ``token_flood`` then posts ``FLOOD`` real sealed envelopes the way a client without
tokens would (the public ingest token only): every one is refused, 401 ``token_required``."""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from typing import Any

import numpy as np

from ldptel.commands.demo_queries import export_get

FLOOD = 200  # token-less envelopes posted after the devices' reports
SEALED_TITLE = ("shuffled-fakes: the true item sealed to the analyzer plus Poisson fakes, released in "
                "whole shuffled batches (central ε = 1 planned)")
NAME, DOMAIN = "demo-sealed", 64
SEALED_CAMPAIGN = {"name": NAME, "kind": "frequency", "privacy_mode": "shuffled-fakes",
                   "domain_size": DOMAIN, "central_epsilon": 1.0, "central_delta": 1e-6, "batch_min": 1000,
                   "window": "all", "fake_source": "both",
                   "description": "true item + Poisson fakes, HPKE-sealed, shuffled in batches of ≥ 1,000"}


def sealed_campaigns() -> list[dict[str, Any]]:
    return [dict(SEALED_CAMPAIGN)]


def sealed_simulate(stack: Any, client: Any, truth: dict[str, Any], rng: np.random.Generator,
                    users: int) -> dict[str, int]:
    """``users`` devices (Zipf(1.1) values, as the frequency section's) report through the SDK;
    it seals at flush time."""
    w = 1.0 / np.arange(1, DOMAIN + 1) ** 1.1
    values = rng.choice(DOMAIN, size=users, p=w / w.sum())
    truth["counts"] = np.bincount(values, minlength=DOMAIN)
    return {NAME: client.report_many(NAME, values)}


def sealed_report(stack: Any, http: Any, truth: dict[str, Any]) -> None:
    doc = export_get(stack, http, f"/v1/campaigns/{NAME}/estimates?format=json&window=0")
    if doc is None:
        return
    p, t = doc["privacy"], truth["counts"]
    est = np.array([it["estimate"] for it in doc["items"]])
    se = np.array([it["std_error"] for it in doc["items"]])
    for v in np.argsort(-t, kind="stable")[:5]:
        print(f"{v:>6} true {t[v]:>7}  estimate {est[v]:>9.1f} ± {se[v]:.1f}")
    n = doc["n_reports"]
    d = t.size
    oue = math.sqrt(n * 4 * math.e / (math.e - 1) ** 2)  # local OUE at ε = 1: √(n·4e^ε/(e^ε − 1)²)
    print(f"devices {n:,} in batches {p['batches']}, {p['fake_rate']:.2f} fakes per device; central ε "
          f"between {p['central_epsilon_lower']:.3f} and {p['central_epsilon']:.3f} "
          f"(δ = {p['central_delta']:g}); "
          f"std error per count {np.mean(se):.1f} (measured rms {np.sqrt(np.mean((est - t) ** 2)):.1f} over "
          f"{d} items) against {oue:.1f} for local OUE at ε = 1 on the same devices")
    adversarial = next((c for c in p.get("claims", []) if c["against"] == "adversarial_devices"), None)
    if adversarial is not None:
        eps = adversarial["central_epsilon"]
        print(f"fake_source = {p.get('fake_source')}: the shuffler adds "
              f"{p.get('shuffler_fakes_per_bucket', 0):.1f} fakes per bucket to every batch; if every other "
              "device of a batch were one attacker's, central ε "
              + ("is not certified" if eps is None else f"≤ {eps:.3f}") + " still holds")


def token_flood(stack: Any, http: Any, devices: int, n: int = FLOOD) -> str | None:
    """Post ``n`` real sealed envelopes of the campaign (the SDK's sealing, one report each) with
    the ingest token and no Privacy Pass token; the line saying how they were answered (None when
    the campaign takes no tokens)."""
    from ldptel import key_signing
    from ldptel.aggregator.keyring import signing_public_text
    from ldptel.client.sealed import seal_rows, unsealed
    from ldptel.mechanisms.builder import build_mechanism

    ingest = stack.config.server.ingest_tokens[0]
    status, body = http.request("GET", "/v1/campaigns", None, {"Authorization": f"Bearer {ingest}"})
    listed = json.loads(body)["campaigns"] if status == 200 else []
    cfg = next((c for c in listed if c["name"] == NAME), None)
    if cfg is None or not cfg.get("require_tokens"):
        return None
    mech = build_mechanism(cfg)
    now = time.time()
    row = unsealed(cfg, mech, mech.encode_batch([i % DOMAIN for i in range(n)], campaign=NAME), now)
    sealed, _ = seal_rows(cfg, mech, NAME, int(cfg.get("version", 1)), os.urandom(16), [row], now,
                          signing_key=key_signing.signing_public(signing_public_text(stack.config.analyzer)))
    answers: Counter[str] = Counter()
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {ingest}"}
    for env in sealed:
        status, body = http.request("POST", "/v1/reports", env.body, headers)
        answers["stored" if status == 202 else f"{status} {json.loads(body).get('error')}"] += 1
    refused = answers.pop("401 token_required", 0)
    others = ", ".join(f"{v} {k}" for k, v in sorted(answers.items())) or "none stored"
    return (f"token-less flood: {len(sealed)} sealed envelopes of {NAME} posted with the public ingest "
            f"token and no Privacy Pass token: {refused} refused (401 token_required); {others}. "
            f"The SDK delivered its {devices:,} devices' envelopes, each with a token of its own from "
            f"the issuer (attester "
            f"{stack.config.issuer.attester}, {stack.config.issuer.tokens_per_window:,} tokens per subject "
            f"per {stack.config.issuer.window})")


__all__ = ["FLOOD", "SEALED_TITLE", "sealed_campaigns", "sealed_report", "sealed_simulate", "token_flood"]
