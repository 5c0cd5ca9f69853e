"""The cross-language test vectors (``testvectors/``): fresh from the Python code (a stale file
fails), and the Python SDK's encode reproduces every recorded report from its recorded draws.
The JavaScript SDK's tests read the same files (``client-js/test/vectors.test.ts``)."""

from __future__ import annotations

import inspect
import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from ldptel.mechanisms import draws as draws_module
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.builder import build_mechanism, uses_device_secret, value_index
from ldptel.mechanisms.draws import SYSTEM_DRAWS, Recorder, Replay, SystemDraws, TapeError
from ldptel.mechanisms.randomness import SYSTEM_RANDOM

VECTORS = Path(__file__).resolve().parent.parent / "testvectors"
sys.path.insert(0, str(VECTORS))
import generate  # noqa: E402


def load(name: str) -> dict:
    return json.loads((VECTORS / name).read_text())


def test_vectors_are_fresh(tmp_path: Path) -> None:
    """Regenerated from the Python code, every file equals the committed one."""
    assert generate.main(["--out", str(tmp_path)]) == 0
    for name in generate.FILES:
        assert (tmp_path / name).read_text() == (VECTORS / name).read_text(), \
            f"testvectors/{name} is stale: run .venv/bin/python testvectors/generate.py"
    assert generate.main(["--check"]) == 0


def test_check_fails_on_a_changed_vector(tmp_path: Path) -> None:
    generate.main(["--out", str(tmp_path)])
    doc = json.loads((tmp_path / "hashing.json").read_text())
    doc["xxh32_int"][0]["hash"] ^= 1
    (tmp_path / "hashing.json").write_text(json.dumps(doc))
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1


def test_every_report_replays_from_its_draws() -> None:
    cases = load("encode.json")["cases"]
    assert len(cases) >= 50
    for case in cases:
        cfg = case["config"]
        secret = bytes.fromhex(case["secret"]) if case["secret"] else None
        mech = build_mechanism(cfg, secret if uses_device_secret(cfg) else None)
        for rep in case["reports"]:
            replay = Replay(rep["draws"])
            batch = mech.encode(value_index(cfg, rep["value"]), campaign=cfg["name"], draws=replay)
            batch.batch_id = b""
            assert batch.SerializeToString().hex() == rep["row"], (case["name"], rep["value"])
            assert replay.done, f"{case['name']}: draws left over"


def test_replay_refuses_a_draw_of_another_kind() -> None:
    replay = Replay([["uniform", 0.5], ["below", 3, 7]])
    with pytest.raises(TapeError):
        replay.u32()
    assert replay.uniform() == 0.5
    with pytest.raises(TapeError):
        replay.below(8)


@pytest.mark.parametrize("index", range(0, 52, 3))
def test_system_draws_equal_the_recorded_path(index: int) -> None:
    """The SDK's encode on OS-style sources (``SystemDraws`` over a seeded ``random.Random`` and a
    seeded byte source) gives, draw for draw, the report its recorded tape replays to."""
    case = load("encode.json")["cases"][index]
    cfg = case["config"]
    secret = bytes(range(32))
    rng = np.random.default_rng(index)
    system = SystemDraws(random.Random(index), lambda n: rng.bytes(n))
    mech = build_mechanism(cfg, secret if uses_device_secret(cfg) else None)
    for value in case["values"] if "values" in case else [r["value"] for r in case["reports"]]:
        rec = Recorder(source=system)
        direct = mech.encode(value_index(cfg, value), campaign="c", draws=rec)
        replayed = mech.encode(value_index(cfg, value), campaign="c", draws=Replay(rec.tape))
        direct.batch_id = replayed.batch_id = b""
        assert direct == replayed


def test_the_sdk_default_is_the_os() -> None:
    """``encode`` without ``draws`` takes ``SYSTEM_DRAWS``: ``random.SystemRandom`` and
    ``os.urandom``, the sources the encoders called before the draws interface."""
    assert SYSTEM_DRAWS.rand is SYSTEM_RANDOM and SYSTEM_DRAWS.urandom is os.urandom
    assert inspect.signature(Mechanism.encode).parameters["draws"].default is SYSTEM_DRAWS
    assert draws_module.KINDS == ("uniform", "below", "u32", "bytes")
    mech = build_mechanism({"oracle": "oue", "epsilon": 1.0, "domain_size": 64})
    assert mech.encode(3).count == 1


# --- issues 26 and 28 on the device: sealed messages, dimensions, device-level windows ---------

def test_hpke_fixed_reproduces_rfc9180_and_opens_with_the_production_code() -> None:
    """The deterministic HPKE of the vectors (``testvectors/hpke_fixed.py``) gives RFC 9180's own
    vector for the suite (A.1.1), and what it seals the production ``sealing.open_all`` opens."""
    import device_vectors
    import hpke_fixed

    from ldptel import sealing

    v = device_vectors.RFC9180_A11
    sk_r, pk_r = hpke_fixed.derive_key_pair(bytes.fromhex(v["ikmR"]))
    assert (sk_r.hex(), pk_r.hex()) == (v["skRm"], v["pkRm"])
    out = hpke_fixed.seal(pk_r, bytes.fromhex(v["ikmE"]), bytes.fromhex(v["info"]), bytes.fromhex(v["pt"]),
                          bytes.fromhex(v["aad"]))
    assert out["enc"].hex() == v["pkEm"] and out["shared_secret"].hex() == v["shared_secret"]
    assert out["key"].hex() == v["key"] and out["base_nonce"].hex() == v["base_nonce"]
    assert out["ciphertext"].hex() == v["ct"]
    message = hpke_fixed.seal(pk_r, b"\x01" * 32, b"info", b"row!")["message"]
    assert sealing.open_all([message], sealing.load_private(sk_r), b"info", 4) == (b"row!", 0)
    assert sealing.open_all([message], sealing.load_private(sk_r), b"other", 4) == (b"", 1)


def test_sealed_vectors_open_with_the_analyzer_key() -> None:
    """Every envelope of ``sealed.json`` is a valid ``SealedBatch`` of one device (``reports`` 1,
    its real row and at most ``max_fakes`` fakes) whose messages the analyzer's private key opens
    (production ``open_all``) to the recorded plaintexts, under the ``info`` of its campaign,
    version, window and key, with the batch id derived from the chunk's and the report's index;
    the POST bodies carry exactly the envelopes (``SealedEnvelopes`` when several)."""
    import hashlib

    from ldptel import sealing
    from ldptel.client.sealed import analyzer_key
    from ldptel.mechanisms.fakes import max_fakes
    from ldptel.proto import ENVELOPES_SCHEMA_VERSION, SEALED_SCHEMA_VERSION, SealedBatch, SealedEnvelopes

    doc = load("sealed.json")
    private = sealing.load_private(bytes.fromhex(doc["analyzer"]["private"]))
    assert doc["suite"] == sealing.SUITE_ID
    n = 0
    for case in doc["cases"]:
        _, key_id = analyzer_key(case["config"], case["name"])
        assert key_id == doc["analyzer"]["key_id"]
        for env in case["envelopes"]:
            body = SealedBatch.FromString(bytes.fromhex(env["body"]))
            assert body.schema_version == SEALED_SCHEMA_VERSION and body.key_id == key_id
            assert body.window == env["window"] and body.reports == env["reports"]
            info = sealing.info(case["name"], case["config"]["version"], env["window"], key_id)
            assert info.hex() == env["info"]
            assert body.batch_id.hex() == env["batch_id"] == hashlib.sha256(
                bytes.fromhex(case["batch_id"]) + env["window"].to_bytes(8, "big")
                + env["index"].to_bytes(4, "big")).digest()[:16].hex()
            plain, bad = sealing.open_all(list(body.messages), private, info, case["row_bytes"])
            assert bad == 0
            assert plain.hex() == "".join(m["plaintext"] for m in env["messages"])
            # one device per envelope (issue 36): its one real row among its own fakes
            assert body.reports == 1 and case["reports"][env["index"]]["row"] in {
                m["plaintext"] for m in env["messages"]}
            assert len(body.messages) - 1 <= max_fakes(case["config"].get("fake_rate", 0.0))
            n += len(body.messages)
        # the POST bodies: alone a SealedBatch, several a SealedEnvelopes of the same envelopes
        posted = []
        for post in case["posts"]:
            raw = bytes.fromhex(post["body"])
            if post["envelopes"] == 1:
                posted.append(raw.hex())
            else:
                many = SealedEnvelopes.FromString(raw)
                assert many.schema_version == ENVELOPES_SCHEMA_VERSION
                assert len(many.envelopes) == post["envelopes"] <= doc["post_envelopes"]
                posted += [e.SerializeToString().hex() for e in many.envelopes]
        assert posted == [env["body"] for env in case["envelopes"]]
    assert n >= 70
    assert all(c["max_fakes"] == max_fakes(c["rate"], c["reports"]) for c in doc["max_fakes"])


def test_the_deterministic_path_stays_out_of_the_package() -> None:
    """The fixed ephemeral keys live in ``testvectors/`` only: no module of the installed package
    (SDK, collector, aggregator) names ``hpke_fixed`` or ``testvectors``, and the production
    ``sealing.seal`` takes no ephemeral key."""
    import re

    root = VECTORS.parent
    imports = re.compile(r"^\s*(from|import)\s+(hpke_fixed|testvectors|device_vectors|generate)\b", re.M)
    for folder in ("core", "mechanisms", "client", "server", "aggregator", "shuffler", "commands", "proto"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text()
            assert "hpke_fixed" not in text and not imports.search(text) and "sys.path" not in text, path
    from ldptel import sealing

    assert list(inspect.signature(sealing.seal).parameters) == ["rows", "public", "info_bytes"]


def test_analyzer_key_checks() -> None:
    """A device seals only to a key whose suite, length and id check out; otherwise the chunk
    waits (``TelemetryError``: retried after the configs are fetched again), nothing dropped."""
    from ldptel.client.errors import TelemetryError
    from ldptel.client.sealed import analyzer_key

    good = load("sealed.json")["analyzer"]["config"]
    assert analyzer_key({"analyzer_key": good}, "c")[1] == good["id"]
    for bad in ({**good, "id": good["id"] + 1}, {**good, "id": str(good["id"])}, {**good, "suite": "p256"},
                {**good, "public": "AAAA"}, {**good, "public": "not base64!"}, None, "x"):
        with pytest.raises(TelemetryError):
            analyzer_key({"analyzer_key": bad}, "c")


def test_device_level_reports_replay_from_their_draws() -> None:
    from ldptel.proto import ReportBatch

    for case in load("device_level.json")["cases"]:
        rep = case["report"]
        if rep is None:
            continue
        mech = build_mechanism(case["config"])
        replay = Replay(rep["draws"])
        batch = mech.encode(rep["value"], campaign=case["name"], draws=replay)
        assert replay.done
        batch.batch_id, batch.window = b"", case["window"]
        for name, value in case["dimensions"]:
            batch.dimensions.add(name=name, value=value)
        assert batch.SerializeToString().hex() == rep["row"]
        assert ReportBatch.FromString(bytes.fromhex(rep["batch"])).window == case["window"]
