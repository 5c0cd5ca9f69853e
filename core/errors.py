"""Every public error of ldptel, in one tree under ``LdptelError``::

    LdptelError                         ldptel.errors (defined in ldptel.mechanisms.errors)
    ├── InvalidReport (ValueError)      a report no honest device sends; .index, .reason
    │   └── ImplausibleReport           its number of set bits (poisoning defence)
    ├── ConfigError (ValueError)        a bad config file, table or admin change; .key names it
    │   ├── CredentialsError            a Redis credentials file that does not fit its URL
    │   └── UncertifiableTarget         a central (ε, δ) target no plan can certify; .suggestion
    ├── WindowError (ValueError)        a bad ``window=`` value
    ├── StateMismatch (RuntimeError)    stored aggregator state that does not fit the campaign
    ├── DataDirBusy (RuntimeError)      another ``ldptel serve`` holds the data directory
    ├── ExportError (RuntimeError)      an error answer of the export API; .status, .code, .detail
    ├── TelemetryError (RuntimeError)   the SDK cannot proceed          ldptel.client.errors
    │   ├── UnknownCampaign (ValueError)    no campaign of that name
    │   ├── CampaignRefused                 over the device's max_epsilon
    │   ├── VersionClosed                   a campaign version the collector no longer takes
    │   ├── BadConfig                       a collector's campaign config that fails validation
    │   └── QueueUnavailable                the SDK's queue file cannot be opened
    ├── ApiError                        an HTTP error answer of the server  ldptel.server.errors
    │   └── BadParameter                a bad query parameter (400)
    └── PageError                       an operator page that cannot be shown (HTML)

Bad arguments to a function raise ``ValueError`` naming the argument, as the standard library
does (``ldptel.mechanisms.errors.bad_argument``, where a caller maps the argument to a config key:
``argument_of(exc)`` names it); everything else ldptel raises on purpose is caught by
``except ldptel.LdptelError``.
``ldptel`` exports the classes of this module; ``ldptel.client`` exports the SDK's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ldptel.mechanisms.errors import ImplausibleReport, InvalidReport, LdptelError


class ConfigError(LdptelError, ValueError):
    """A configuration problem; the message starts with the key, and ``key`` holds it
    (``campaigns[web].epsilon``; None for a problem of no one key, such as a file not found), so
    that no caller has to parse the message to find it."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class CredentialsError(ConfigError):
    """A credentials file that cannot be read, or does not fit the Redis URL it is used for (a
    configuration error: the CLI exits 2 with the message)."""


class UncertifiableTarget(ConfigError):
    """A central privacy target (``ldptel.privacy.planner.plan``) that cannot be certified within the
    limits; the message says what would work, ``suggestion`` holds it as {key: value} (for example
    {"batch_min": 2_000_000})."""

    def __init__(self, message: str, suggestion: dict[str, Any] | None = None,
                 key: str | None = None) -> None:
        super().__init__(message, key)
        self.suggestion = dict(suggestion or {})


class WindowError(LdptelError, ValueError):
    """An invalid ``window`` query value (the export API answers 400)."""


class StateMismatch(LdptelError, RuntimeError):
    """Stored state that does not fit a campaign's current parameters."""


class DataDirBusy(LdptelError, RuntimeError):
    """Another process holds the lock of a data directory."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        self.data_dir, self.pid = data_dir, pid
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(f"the data directory {data_dir} is in use by {holder} (another `ldptel serve` "
                         "of this config?); stop it first, or give this one another LDPTEL_DATA_DIR")


class ExportError(LdptelError, RuntimeError):
    """An error answer of the export API."""

    def __init__(self, status: int, code: str, detail: Any) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail = status, code, detail


__all__ = ["ConfigError", "CredentialsError", "DataDirBusy", "ExportError",
           "ImplausibleReport",
           "InvalidReport", "LdptelError", "StateMismatch", "UncertifiableTarget", "WindowError"]
