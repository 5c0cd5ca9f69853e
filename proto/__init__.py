"""Wire schema ``ldptel/v1/reports.proto`` and its generated Python (committed).

Regenerate with ``python -m ldptel.proto.regenerate``; ``tests/test_proto.py`` checks the
committed file is what protoc produces.
"""

from ldptel.proto.ldptel.v1.reports_pb2 import (
    Dimension,
    GrrPayload,
    HadamardPayload,
    HeavyHitterPayload,
    NumericPayload,
    OlhPayload,
    RangePayload,
    RapporPayload,
    ReportBatch,
    SealedBatch,
    SealedEnvelopes,
    UnaryPayload,
)

SCHEMA_VERSION = 1
SEALED_SCHEMA_VERSION = 2  # SealedBatch: campaigns in a shuffled privacy mode
ENVELOPES_SCHEMA_VERSION = 3  # SealedEnvelopes: several SealedBatch envelopes in one body


def schema_version_of(data: bytes) -> int:
    """The first ``schema_version`` (field 4, a varint in ``ReportBatch`` and ``SealedBatch``
    alike) of a serialized batch, read off the wire without parsing the message, so that the
    collector parses a body once, as the message it is; 0 when absent or unreadable (the parse
    then says what is wrong). SDKs write fields in number order: it is among the first four."""
    i, n = 0, len(data)
    try:
        while i < n:
            key, i = _varint(data, i)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, i = _varint(data, i)
                if field == 4:
                    return value & 0xFFFFFFFF
            elif wire == 2:
                length, i = _varint(data, i)
                i += length
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
            else:
                return 0
    except IndexError:
        return 0
    return 0


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def batch_version(batch: ReportBatch | SealedBatch) -> int:
    """The campaign version a batch names (0, i.e. absent, is version 1)."""
    return batch.campaign_version or 1


__all__ = [
    "ENVELOPES_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "Dimension",
    "GrrPayload",
    "HadamardPayload",
    "HeavyHitterPayload",
    "NumericPayload",
    "OlhPayload",
    "RangePayload",
    "RapporPayload",
    "ReportBatch",
    "SEALED_SCHEMA_VERSION",
    "SealedBatch",
    "SealedEnvelopes",
    "UnaryPayload",
    "batch_version",
    "schema_version_of",
]
