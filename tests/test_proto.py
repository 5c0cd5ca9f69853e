"""The committed generated Python equals what protoc produces from the .proto, and batches of
every mechanism survive a serialize/parse round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldptel.client import create_mechanism
from ldptel.proto import ReportBatch, regenerate

PROTO_DIR = Path(regenerate.__file__).resolve().parent


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    for generated in regenerate.generate(tmp_path):
        committed = PROTO_DIR / generated.relative_to(tmp_path)
        assert committed.read_bytes() == generated.read_bytes(), (
            f"{committed} is stale: run `make proto` and commit the result")


@pytest.mark.parametrize("oracle", ["grr", "sue", "oue", "olh", "hadamard"])
def test_round_trip(oracle: str) -> None:
    mech = create_mechanism(oracle, epsilon=1.0, domain_size=37)
    batch = mech.encode_batch(np.arange(37), rng=np.random.default_rng(3), campaign="c")
    parsed = ReportBatch.FromString(batch.SerializeToString())
    assert parsed.count == 37 and parsed.campaign == "c" and len(parsed.batch_id) == 16
    assert parsed.WhichOneof("payload") == mech.payload
    for key, col in mech.columns(batch).items():
        np.testing.assert_array_equal(mech.columns(parsed)[key], col)


def test_rappor_round_trip() -> None:
    mech = create_mechanism("rappor", bloom_bits=20, hashes=2, cohorts=4, f=0.5, p=0.5, q=0.75,
                            candidates=["a", "b"])
    batch = mech.encode_batch(["a", "b", "zz"], rng=np.random.default_rng(3))
    parsed = ReportBatch.FromString(batch.SerializeToString())
    cols = mech.columns(parsed)
    assert cols["bits"].shape == (3, 3) and cols["cohorts"].max() < 4
