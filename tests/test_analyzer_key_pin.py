"""Issue 36, reproduction 3: the analyzer key came from the collector, unauthenticated (both SDKs
checked only that ``id`` = SHA-256(public key)[:4]), so a collector serving its own key opened the
devices' messages. Now the aggregator signs every published key with its Ed25519 signing key
(``ldptel.key_signing``, ``aggregator.keyring``), the app pins the public half
(``analyzer_signing_key`` / ``analyzerSigningKey``, printed by ``ldptel analyzer-key show``), and
both SDKs seal only to a key whose signature verifies.

One stack (real Flask collector over HTTP, real Redis, the real keyring): the key the collector
serves verifies under the value ``ldptel analyzer-key show`` prints (the file beside the HPKE
keys, mode 0600); then the collector serves its own HPKE key with a correct id (unsigned, or
signed by another key): the Python SDK and the JS SDK (Node, the built bundle) seal nothing to it,
the reports wait in the queue, ``health`` says why; a device without the option refuses the
shuffled campaign naming it; the aggregator's key back, the waiting reports are delivered."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sealed_support import FAKES, publish_keys, sealed_config
from test_sdk_js import JS, bundle  # noqa: F401 (bundle: a fixture)

from ldptel import key_signing, sealing
from ldptel.aggregator.keyring import SIGNING_FILE, Keyring
from ldptel.client import TelemetryClient
from ldptel.client.errors import KeyNotTrusted
from ldptel.client.sealed import pinned_key
from ldptel.commands.cli import main as cli_main
from ldptel.server.sealed_ingest import KEY_CACHE_SECONDS
from ldptel.store import analyzer_keys
from ldptel.store.analyzer_keys import PublicKey

NODE_SEALED = JS / "test" / "e2e" / "node-sealed.mjs"


def node_device(url: str, signing_key: str | None, flush_ms: int = 3000) -> dict:
    """A JS device (Node, the built bundle) reporting once to the shuffled campaign."""
    args = ["node", str(NODE_SEALED), url, INGEST_TOKEN, FAKES["name"], "1", str(flush_ms)]
    run = subprocess.run(args + ([signing_key] if signing_key else []), capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def serve_own_key(r: redis.Redis, honest: dict[int, PublicKey], attacker: PublicKey) -> None:
    """What a compromised collector host does: its own key is the one devices get."""
    analyzer_keys.publish(r, [attacker], list(honest))
    time.sleep(KEY_CACHE_SECONDS + 0.1)  # the collector's key cache sees it


@pytest.mark.integration
def test_a_collector_cannot_substitute_the_analyzer_key(redis_client: redis.Redis, redis_url: str,
                                                        tmp_path: Path, bundle, capsys) -> None:  # noqa: F811
    cfg = sealed_config(tmp_path, [FAKES])
    ring = publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        # the value to embed, and the file that holds the private half (0600, beside the HPKE keys)
        (tmp_path / "c.toml").write_text((tmp_path / "c.toml").read_text() +
                                         f'\n[analyzer]\nkeys_dir = "{tmp_path / "keys"}"\n')
        assert cli_main(["analyzer-key", "show", "--config", str(tmp_path / "c.toml")]) == 0
        shown = capsys.readouterr().out
        path = tmp_path / "keys" / SIGNING_FILE
        assert ring.pinned in shown and str(path) in shown, shown
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        pinned = key_signing.signing_public(ring.pinned)
        status, _, body = stack.get("/v1/campaigns", INGEST_TOKEN)
        assert status == 200
        served = json.loads(body)
        served_key = {c["name"]: c for c in served["campaigns"]}[FAKES["name"]]["analyzer_key"]
        honest = analyzer_keys.read(redis_client)
        assert served_key["id"] in honest and honest[served_key["id"]].verifies(pinned)
        k = served_key
        assert key_signing.verify_key(k["suite"], base64.b64decode(k["public"]), k["id"], k["current_until"],
                                      k["accepted_until"], base64.b64decode(k["signature"]), pinned)

        # the attacker's key: a correct id, valid times; unsigned, then signed by another key
        own = sealing.new_private()
        raw = sealing.public_bytes(own.public_key())
        now = time.time()
        bare = PublicKey(sealing.key_id(raw), raw, now, now + 86400, now + 2 * 86400)
        other = key_signing.sign(Ed25519PrivateKey.generate(), sealing.SUITE_ID, raw, bare.key_id,
                                 bare.current_until, bare.accepted_until)
        with TelemetryClient(stack.url, INGEST_TOKEN, queue_path=tmp_path / "pinned.sqlite",
                             accept_unrandomized=True, analyzer_signing_key=ring.pinned) as device, \
                TelemetryClient(stack.url, INGEST_TOKEN, queue_path=tmp_path / "unpinned.sqlite",
                                accept_unrandomized=True) as unpinned:
            assert device.report_many(FAKES["name"], list(range(8))) == 8
            for attacker, why in ((bare, "not signed"),
                                  (dataclasses.replace(bare, signature=other), "not signed by the pinned")):
                serve_own_key(redis_client, honest, attacker)
                assert device.campaigns(refresh=True)[FAKES["name"]]["analyzer_key"]["id"] == attacker.key_id
                result = device.flush(timeout=5)
                assert result.accepted == 0 and result.pending == 8, result  # nothing sealed to it
                health = device.health()
                assert not health.ok and why in (health.sealing_error or ""), health
                js = node_device(stack.url, ring.pinned)  # one report: a device's one for the window
                assert js["queued"] == 1 and (js["result"]["accepted"], js["result"]["pending"]) == (0, 1), js
                assert "not signed" in (js["health"]["sealingError"] or ""), js
            # a device whose app passed no signing key refuses shuffled campaigns, naming the option
            assert unpinned.report_many(FAKES["name"], [1, 2]) == 2
            assert unpinned.flush(timeout=5).pending == 2
            assert "analyzer_signing_key" in (unpinned.health().sealing_error or "")
            js = node_device(stack.url, None)
            assert js["result"]["pending"] == 1 and "analyzerSigningKey" in js["health"]["sealingError"], js

            # the aggregator's signed key back: the waiting reports are sealed to it and delivered
            ring.publish(redis_client)
            analyzer_keys.publish(redis_client, [], [bare.key_id])
            time.sleep(KEY_CACHE_SECONDS + 0.1)
            device.campaigns(refresh=True)
            result = device.flush(timeout=30)
            assert result.accepted == 8 and result.pending == 0, result
            assert device.health().sealing_error is None
            js = node_device(stack.url, ring.pinned, flush_ms=30_000)
            assert js["result"]["accepted"] == 1 and js["health"]["sealingError"] is None, js
    finally:
        stack.close()


def test_pinned_key_checks_signature_times_and_expiry() -> None:
    """``client.sealed.pinned_key`` on the vectors' signed analyzer key: trusted under the vectors'
    signing key; refused (``KeyNotTrusted`` saying why) without a pinned key (naming the option),
    under another key, with a changed time or id, or once ``accepted_until`` has passed on the
    device's clock. A malformed ``analyzer_signing_key`` is the app's mistake (``ValueError``)."""
    doc = json.loads((Path(__file__).resolve().parents[1] / "testvectors" / "sealed.json").read_text())
    a = doc["analyzer"]
    cfg = {"analyzer_key": a["config"]}
    pinned = key_signing.signing_public(a["signing"]["public"])
    assert pinned_key(cfg, "c", pinned, now=1_900_000_000.0)[1] == a["key_id"]
    cases = [(None, cfg, 0.0, "analyzer_signing_key="),
             (Ed25519PrivateKey.generate().public_key(), cfg, 0.0, "not signed by the pinned"),
             (pinned, {"analyzer_key": {**a["config"], "accepted_until": 2_100_000_000}}, 0.0, "not signed"),
             (pinned, {"analyzer_key": {**a["config"], "signature": None}}, 0.0, "not signed (no signature)"),
             (pinned, cfg, 2_000_000_000.0, "expired")]
    for key, config, now, why in cases:
        with pytest.raises(KeyNotTrusted, match=re.escape(why)):
            pinned_key(config, "c", key, now=now)
    with pytest.raises(ValueError, match="analyzer_signing_key"):
        TelemetryClient("http://127.0.0.1:9", INGEST_TOKEN, analyzer_signing_key="AAAA")


def test_signing_key_made_once_and_kept_across_rotations(tmp_path: Path, redis_client: redis.Redis,
                                                          caplog) -> None:
    """The keys directory's Ed25519 key: made with the first key (0600), the same after an HPKE
    rotation, and every key the keyring holds (old and new) is signed by it. A host whose copy of
    the directory has another signing key says so in its log when it publishes."""
    cfg = sealed_config(tmp_path, [FAKES])
    ring = Keyring(cfg.analyzer)
    ring.ensure(None, now=1_800_000_000.0)
    first, path = ring.pinned, tmp_path / "keys" / SIGNING_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    ring.ensure(None, now=1_800_000_000.0 + 38 * 86400)  # past key_rotation: a new HPKE key
    assert len(ring.public) == 2 and ring.pinned == first
    again = Keyring(cfg.analyzer)
    again.load()
    assert again.pinned == first and set(again.public) == set(ring.public)
    assert all(k.verifies(key_signing.signing_public(first)) for k in again.public.values())
    again.publish(redis_client, now=1_800_000_000.0 + 38 * 86400)
    (tmp_path / "keys" / SIGNING_FILE).unlink()  # a host that made its own signing key
    stray = Keyring(cfg.analyzer)
    stray.ensure(redis_client, now=1_800_000_000.0 + 38 * 86400)
    assert stray.pinned != first and "signed by another signing key" in caplog.text
