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
