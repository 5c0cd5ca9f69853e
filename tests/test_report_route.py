"""Unit tier: the wire peek the report route uses to parse a body once as what it is
(``proto.schema_version_of``), against protobuf's own parse."""

from __future__ import annotations

import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ldptel.client import create_mechanism
from ldptel.proto import ReportBatch, SealedBatch, schema_version_of


def test_the_peek_reads_what_the_parse_reads() -> None:
    mech = create_mechanism("olh", epsilon=1.0, domain_size=64)
    rng = np.random.default_rng(1)
    for n in (1, 7, 300):
        batch = mech.encode_batch(rng.integers(0, 64, n), rng=rng, campaign="c")
        body = batch.SerializeToString()
        assert schema_version_of(body) == ReportBatch.FromString(body).schema_version == 1
    sealed = SealedBatch(campaign="c", batch_id=os.urandom(16), reports=3, schema_version=2, key_id=7,
                         window=1_700_000_000, messages=[os.urandom(60) for _ in range(5)])
    assert schema_version_of(sealed.SerializeToString()) == 2
    assert schema_version_of(ReportBatch(campaign="c", count=1).SerializeToString()) == 0  # absent


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_the_peek_never_fails_on_garbage(data: bytes) -> None:
    """Any bytes: a number (the parse that follows refuses what is not a batch)."""
    assert isinstance(schema_version_of(data), int)
