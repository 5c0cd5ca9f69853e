"""ldptel: local-differential-privacy telemetry (SDK, collector, shuffler, aggregator).

``ldptel.LdptelError`` is the root of every error ldptel raises on purpose; the whole tree is in
``ldptel.errors``. The SDK is ``ldptel.client``, the export API client ``ldptel.export``, the
privacy analyses ``ldptel.privacy``, the mechanisms' math ``ldptel.mechanisms``.
"""

from ldptel.errors import (
    ConfigError,
    CredentialsError,
    DataDirBusy,
    ExportError,
    ImplausibleReport,
    InvalidReport,
    LdptelError,
    StateMismatch,
    UncertifiableTarget,
    WindowError,
)

__version__ = "0.1.0"

__all__ = ["ConfigError", "CredentialsError", "DataDirBusy", "ExportError", "ImplausibleReport",
           "InvalidReport", "LdptelError", "StateMismatch", "UncertifiableTarget", "WindowError",
           "__version__"]
