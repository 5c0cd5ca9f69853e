from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GrrPayload(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[int]] = ...) -> None: ...

class UnaryPayload(_message.Message):
    __slots__ = ("bits",)
    BITS_FIELD_NUMBER: _ClassVar[int]
    bits: bytes
    def __init__(self, bits: _Optional[bytes] = ...) -> None: ...

class OlhPayload(_message.Message):
    __slots__ = ("seeds", "values")
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    seeds: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, seeds: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[int]] = ...) -> None: ...

class HadamardPayload(_message.Message):
    __slots__ = ("indices", "signs")
    INDICES_FIELD_NUMBER: _ClassVar[int]
    SIGNS_FIELD_NUMBER: _ClassVar[int]
    indices: _containers.RepeatedScalarFieldContainer[int]
    signs: bytes
    def __init__(self, indices: _Optional[_Iterable[int]] = ..., signs: _Optional[bytes] = ...) -> None: ...

class RapporPayload(_message.Message):
    __slots__ = ("cohorts", "bits")
    COHORTS_FIELD_NUMBER: _ClassVar[int]
    BITS_FIELD_NUMBER: _ClassVar[int]
    cohorts: _containers.RepeatedScalarFieldContainer[int]
    bits: bytes
    def __init__(self, cohorts: _Optional[_Iterable[int]] = ..., bits: _Optional[bytes] = ...) -> None: ...

class HeavyHitterPayload(_message.Message):
    __slots__ = ("levels", "seed_indices", "values")
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    SEED_INDICES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    levels: _containers.RepeatedScalarFieldContainer[int]
    seed_indices: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, levels: _Optional[_Iterable[int]] = ..., seed_indices: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[int]] = ...) -> None: ...

class RangePayload(_message.Message):
    __slots__ = ("levels", "indices", "signs", "seeds", "values")
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    INDICES_FIELD_NUMBER: _ClassVar[int]
    SIGNS_FIELD_NUMBER: _ClassVar[int]
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    levels: _containers.RepeatedScalarFieldContainer[int]
    indices: _containers.RepeatedScalarFieldContainer[int]
    signs: bytes
    seeds: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, levels: _Optional[_Iterable[int]] = ..., indices: _Optional[_Iterable[int]] = ..., signs: _Optional[bytes] = ..., seeds: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[int]] = ...) -> None: ...

class NumericPayload(_message.Message):
    __slots__ = ("bits", "values")
    BITS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    bits: bytes
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, bits: _Optional[bytes] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class Dimension(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ReportBatch(_message.Message):
    __slots__ = ("campaign", "batch_id", "count", "schema_version", "campaign_version", "window", "dimensions", "grr", "unary", "olh", "hadamard", "rappor", "heavy_hitters", "range", "numeric")
    CAMPAIGN_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAMPAIGN_VERSION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    GRR_FIELD_NUMBER: _ClassVar[int]
    UNARY_FIELD_NUMBER: _ClassVar[int]
    OLH_FIELD_NUMBER: _ClassVar[int]
    HADAMARD_FIELD_NUMBER: _ClassVar[int]
    RAPPOR_FIELD_NUMBER: _ClassVar[int]
    HEAVY_HITTERS_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    NUMERIC_FIELD_NUMBER: _ClassVar[int]
    campaign: str
    batch_id: bytes
    count: int
    schema_version: int
    campaign_version: int
    window: int
    dimensions: _containers.RepeatedCompositeFieldContainer[Dimension]
    grr: GrrPayload
    unary: UnaryPayload
    olh: OlhPayload
    hadamard: HadamardPayload
    rappor: RapporPayload
    heavy_hitters: HeavyHitterPayload
    range: RangePayload
    numeric: NumericPayload
    def __init__(self, campaign: _Optional[str] = ..., batch_id: _Optional[bytes] = ..., count: _Optional[int] = ..., schema_version: _Optional[int] = ..., campaign_version: _Optional[int] = ..., window: _Optional[int] = ..., dimensions: _Optional[_Iterable[_Union[Dimension, _Mapping]]] = ..., grr: _Optional[_Union[GrrPayload, _Mapping]] = ..., unary: _Optional[_Union[UnaryPayload, _Mapping]] = ..., olh: _Optional[_Union[OlhPayload, _Mapping]] = ..., hadamard: _Optional[_Union[HadamardPayload, _Mapping]] = ..., rappor: _Optional[_Union[RapporPayload, _Mapping]] = ..., heavy_hitters: _Optional[_Union[HeavyHitterPayload, _Mapping]] = ..., range: _Optional[_Union[RangePayload, _Mapping]] = ..., numeric: _Optional[_Union[NumericPayload, _Mapping]] = ...) -> None: ...

class SealedBatch(_message.Message):
    __slots__ = ("campaign", "batch_id", "reports", "schema_version", "campaign_version", "key_id", "window", "messages", "release", "release_parts", "release_reports", "release_part", "dimensions", "key_ids")
    CAMPAIGN_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAMPAIGN_VERSION_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_PARTS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_REPORTS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_PART_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    KEY_IDS_FIELD_NUMBER: _ClassVar[int]
    campaign: str
    batch_id: bytes
    reports: int
    schema_version: int
    campaign_version: int
    key_id: int
    window: int
    messages: _containers.RepeatedScalarFieldContainer[bytes]
    release: bytes
    release_parts: int
    release_reports: int
    release_part: int
    dimensions: _containers.RepeatedCompositeFieldContainer[Dimension]
    key_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, campaign: _Optional[str] = ..., batch_id: _Optional[bytes] = ..., reports: _Optional[int] = ..., schema_version: _Optional[int] = ..., campaign_version: _Optional[int] = ..., key_id: _Optional[int] = ..., window: _Optional[int] = ..., messages: _Optional[_Iterable[bytes]] = ..., release: _Optional[bytes] = ..., release_parts: _Optional[int] = ..., release_reports: _Optional[int] = ..., release_part: _Optional[int] = ..., dimensions: _Optional[_Iterable[_Union[Dimension, _Mapping]]] = ..., key_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class SealedEnvelopes(_message.Message):
    __slots__ = ("schema_version", "envelopes")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENVELOPES_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    envelopes: _containers.RepeatedCompositeFieldContainer[SealedBatch]
    def __init__(self, schema_version: _Optional[int] = ..., envelopes: _Optional[_Iterable[_Union[SealedBatch, _Mapping]]] = ...) -> None: ...
