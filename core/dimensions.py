"""A campaign's public breakdown dimensions and its cells (issue 28).

Config (a campaign table)::

    dimensions = { platform = ["android", "ios", "web"], arm = ["control", "treatment"],
                   app_version = { values = ["4.1", "4.2"], bucket = "major.minor" } }
    experiment = "arm"   # the experiment dimension: its first value is the control

Each dimension has a closed list of values; every dimension also has the value ``OTHER``
(``"other"``, last), which receives whatever a report gives that the list does not hold — an
unknown value, a missing dimension, a value that is not a string — so no report is lost over its
dimensions (``Dimensions.canonical``). ``bucket = "major.minor"`` (or ``"major"``) maps a version
string to its bucket first (``"4.2.17"`` → ``"4.2"``; ``"v5"`` → ``"5.0"``), so devices never send
their full version. Values are public by declaration: they travel in the clear with each report
(``ReportBatch.dimensions``, and a ``SealedBatch``'s envelope) and are never randomized.

The dimensions are kept in the order of their names (a campaign table stored in the registry comes
back with its keys sorted, so no other order would be the same in every process); a dimension's
values keep their declared order (the experiment's first is its control). A *cell* is one
combination of values, the cross product with ``OTHER`` last in each dimension, numbered in mixed
radix (the first dimension varies slowest): ``cell_index`` and ``cell_values`` are inverse. The
number of cells is bounded (``MAX_CELLS``, and per campaign its
state: ``campaign_limits``); a config over the bound is refused naming ``dimensions``.

This module is SDK-safe (standard library only): the SDK, the collector, the shuffler and the
aggregator map values with the same ``canonical``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ldptel.config_values import fail

OTHER = "other"
MAX_DIMENSIONS = 4
MAX_DIMENSION_VALUES = 64  # declared values per dimension (OTHER comes on top)
MAX_CELLS = 256  # the cross product, OTHER included in each dimension
MAX_VALUE_CHARS = 64
BUCKETS = ("major", "major.minor")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
VALUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
_VERSION_RE = re.compile(r"^[vV]?(\d{1,9})(?:\.(\d{1,9}))?")


def bucketed(value: str, bucket: str | None) -> str:
    """``value`` mapped to its version bucket (``"4.2.17"`` → ``"4.2"`` for ``major.minor``,
    ``"4"`` for ``major``); a value that is not a version string is returned as it is (and then
    falls into ``OTHER`` unless declared)."""
    if bucket is None:
        return value
    m = _VERSION_RE.match(value)
    if m is None:
        return value
    major, minor = int(m.group(1)), int(m.group(2) or 0)
    return f"{major}" if bucket == "major" else f"{major}.{minor}"


@dataclass(frozen=True)
class Dimension:
    """One dimension: its ``name``, declared ``values`` and optional version ``bucket``."""

    name: str
    values: tuple[str, ...]
    bucket: str | None = None

    @property
    def all_values(self) -> tuple[str, ...]:
        """The declared values, then ``OTHER``."""
        return (*self.values, OTHER)

    def value_of(self, given: Any) -> str:
        """The canonical value of what a report gives (``OTHER`` unless declared)."""
        if not isinstance(given, str):
            return OTHER
        value = bucketed(given, self.bucket)
        return value if value in self.values else OTHER

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "values": list(self.values)}
        if self.bucket is not None:
            out["bucket"] = self.bucket
        return out


@dataclass(frozen=True)
class Dimensions:
    """A campaign version's dimensions (in name order) and its ``experiment`` dimension."""

    dims: tuple[Dimension, ...]
    experiment: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    @property
    def n_cells(self) -> int:
        n = 1
        for d in self.dims:
            n *= len(d.all_values)
        return n

    def dimension(self, name: str) -> Dimension:
        return next(d for d in self.dims if d.name == name)

    def canonical(self, given: Mapping[str, Any]) -> tuple[str, ...]:
        """Each dimension's canonical value (name order) of a report's ``given`` values: an
        unknown value, a non-string or a missing dimension is ``OTHER``; names not declared are
        ignored."""
        return tuple(d.value_of(given.get(d.name)) for d in self.dims)

    def cell_index(self, values: Sequence[str]) -> int:
        """The cell of canonical ``values`` (mixed radix, the first dimension slowest)."""
        index = 0
        for d, v in zip(self.dims, values, strict=True):
            index = index * len(d.all_values) + d.all_values.index(v)
        return index

    def cell_values(self, index: int) -> tuple[str, ...]:
        """Inverse of ``cell_index``."""
        out: list[str] = []
        for d in reversed(self.dims):
            index, digit = divmod(index, len(d.all_values))
            out.append(d.all_values[digit])
        return tuple(reversed(out))

    def cell_of(self, given: Mapping[str, Any]) -> int:
        """``cell_index(canonical(given))``."""
        return self.cell_index(self.canonical(given))

    def labelled(self, values: Sequence[str]) -> dict[str, str]:
        """``{name: value}`` of canonical ``values``."""
        return dict(zip(self.names, values, strict=True))

    def public(self) -> list[dict[str, Any]]:
        """What devices fetch (``Campaign.public()["dimensions"]``), in name order."""
        return [d.public() for d in self.dims]

    @classmethod
    def from_public(cls, raw: Any, experiment: str | None = None) -> Dimensions | None:
        """The ``dimensions`` of a public config (a list of ``{name, values[, bucket]}``), or
        None when absent; ``ValueError`` for a malformed one (the SDK refuses the config)."""
        if raw is None:
            return None
        if not isinstance(raw, list) or not raw:
            raise ValueError("dimensions must be a non-empty list")
        dims = []
        for item in raw:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
                    or not isinstance(item.get("values"), list) \
                    or not all(isinstance(v, str) for v in item["values"]) \
                    or item.get("bucket") not in (None, *BUCKETS):
                raise ValueError(f"malformed dimension {item!r}")
            dims.append(Dimension(item["name"], tuple(item["values"]), item.get("bucket")))
        return cls(tuple(dims), experiment)

    def pairs(self, values: Sequence[str]) -> list[tuple[str, str]]:
        """``(name, value)`` pairs of canonical ``values`` (what goes on the wire)."""
        return list(zip(self.names, values, strict=True))


def parse_dimensions(raw: Any, experiment: Any, where: str) -> Dimensions | None:
    """A campaign table's ``dimensions`` and ``experiment`` → ``Dimensions`` (None when
    ``dimensions`` is absent); ``ConfigError`` naming the key otherwise."""
    if raw is None:
        if experiment is not None:
            raise fail(f"{where}.experiment", "needs dimensions (the experiment is one of them)")
        return None
    key = f"{where}.dimensions"
    if not isinstance(raw, dict) or not raw:
        raise fail(key, 'must be a table of dimension = ["value", …], e.g. '
                        '{ platform = ["android", "ios"] }')
    if len(raw) > MAX_DIMENSIONS:
        raise fail(key, f"at most {MAX_DIMENSIONS} dimensions, got {len(raw)}")
    ordered = sorted(raw.items(), key=lambda kv: str(kv[0]))
    dims = [_dimension(name, spec, f"{key}.{name}") for name, spec in ordered]
    out = Dimensions(tuple(dims), None)
    if out.n_cells > MAX_CELLS:
        sizes = " × ".join(f"{len(d.all_values)} ({d.name})" for d in dims)
        raise fail(key, f"{sizes} = {out.n_cells} cells (each dimension's values and 'other'), over "
                        f"{MAX_CELLS}: fewer values or dimensions (each cell is estimated on its own)")
    if experiment is None:
        return out
    if not isinstance(experiment, str) or experiment not in out.names:
        raise fail(f"{where}.experiment", f"must name one of the dimensions ({', '.join(out.names)}), "
                                          f"got {experiment!r}")
    if len(out.dimension(experiment).values) < 2:
        raise fail(f"{where}.experiment", "the experiment dimension needs at least 2 values (the "
                                          "first is the control)")
    return Dimensions(out.dims, experiment)


def _dimension(name: Any, spec: Any, key: str) -> Dimension:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise fail(key, "a dimension name matches [a-z][a-z0-9_]{0,31}")
    bucket = None
    if isinstance(spec, dict):
        extra = set(spec) - {"values", "bucket"}
        if extra:
            raise fail(f"{key}.{sorted(extra)[0]}", "unknown key (allowed: values, bucket)")
        bucket = spec.get("bucket")
        if bucket is not None and bucket not in BUCKETS:
            raise fail(f"{key}.bucket", f"must be one of {', '.join(BUCKETS)}, got {bucket!r}")
        spec = spec.get("values")
    if not isinstance(spec, list) or not spec:
        raise fail(key, "must be a non-empty list of values (or { values = [...], bucket = "
                        '"major.minor" })')
    if len(spec) > MAX_DIMENSION_VALUES:
        raise fail(key, f"at most {MAX_DIMENSION_VALUES} values, got {len(spec)}")
    for v in spec:
        if not isinstance(v, str) or not VALUE_RE.match(v):
            raise fail(key, f"values are strings of 1 to {MAX_VALUE_CHARS} letters, digits and . _ + -, "
                            f"starting with a letter or digit; got {v!r}")
        if v == OTHER:
            raise fail(key, f"{OTHER!r} is implicit (it receives every value not listed)")
        if bucket is not None and bucketed(v, bucket) != v:
            raise fail(key, f"with bucket = {bucket!r} each value is a bucket like "
                            f"{bucketed('4.2.0', bucket)!r}, got {v!r}")
    if len(set(spec)) != len(spec):
        raise fail(key, "values must be distinct")
    return Dimension(name, tuple(spec), bucket)


def cells_of(dims: Dimensions | None) -> int:
    """Cells of a campaign (1 without dimensions)."""
    return 1 if dims is None else dims.n_cells


def iter_cells(dims: Dimensions) -> Iterable[tuple[int, tuple[str, ...]]]:
    """Every (cell index, canonical values), in index order."""
    for i in range(dims.n_cells):
        yield i, dims.cell_values(i)


__all__ = ["BUCKETS", "MAX_CELLS", "MAX_DIMENSIONS", "MAX_DIMENSION_VALUES", "OTHER", "Dimension",
           "Dimensions", "bucketed", "cells_of", "iter_cells", "parse_dimensions"]
