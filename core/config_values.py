"""``ConfigError`` and the typed readers every configuration table uses: each error names the
key (``campaigns[2].epsilon: …``)."""

from __future__ import annotations

from typing import Any

from ldptel.errors import ConfigError


def fail(key: str, msg: str) -> ConfigError:
    return ConfigError(f"{key}: {msg}", key)


def read_int(d: dict[str, Any], key: str, where: str, default: int | None, low: int, high: int) -> int:
    if key not in d:
        if default is None:
            raise fail(f"{where}.{key}", "is required")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise fail(f"{where}.{key}", f"must be an integer in [{low}, {high}], got {v!r}")
    return v


def read_seconds(d: dict[str, Any], key: str, where: str, default: float, low: float, high: float) -> float:
    """A number of seconds (integer or float, not a bool, NaN or infinity) in [low, high]."""
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= high:
        raise fail(f"{where}.{key}", f"must be a number of seconds in [{low:g}, {high:g}], got {v!r}")
    return float(v)
