"""ldptel collector: Flask app factory, ingest, export API, operator pages.

``create_app(config, redis_url)`` builds the app (``server/app.py``); ``ldptel serve`` runs it
under gunicorn (``server/serve.py``). The names below are imported on first use, so that
``ldptel serve`` can set up ``prometheus_client``'s multiprocess mode before anything imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ldptel.server.app import BLUEPRINT_MODULES, ServerState, create_app, state
    from ldptel.server.errors import ApiError

__all__ = ["BLUEPRINT_MODULES", "ApiError", "ServerState", "create_app", "state"]
_HOMES = {"ApiError": "ldptel.server.errors"}


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(_HOMES.get(name, "ldptel.server.app")), name)
    raise AttributeError(f"module 'ldptel.server' has no attribute {name!r}")
