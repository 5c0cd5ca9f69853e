"""ldptel collector: Flask app factory, ingest, export API, operator pages.

``create_app(config, redis_url)`` builds the app (``server/app.py``); ``ldptel serve`` runs it
under gunicorn (``server/serve.py``).
"""

from ldptel.server.app import BLUEPRINT_MODULES, ServerState, create_app, state
from ldptel.server.errors import ApiError

__all__ = ["BLUEPRINT_MODULES", "ApiError", "ServerState", "create_app", "state"]
