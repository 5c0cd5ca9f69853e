"""Operator pages: ``GET /`` (campaigns) and ``GET /campaigns/<name>``, server-rendered with inline
SVG charts (``server/charts.py``), no external assets.

Sign-in: ``/signin`` takes an export token and starts a signed session cookie (``session``);
every page but ``/signin`` redirects there without a session (the JSON endpoints answer 401);
POST forms (sign-in, sign-out) carry a per-session CSRF token.

The numbers come from the export API's document functions (``contexts``), so the page and the
API agree exactly; downloads are those documents too (``downloads``). Campaign status — counts,
aggregator lag, ingest rate — is read without decoding (``status``); labels in ``labels``.

Auto-refresh: a small inline script polls ``…/live`` (same query string) every
``REFRESH_SECONDS`` and swaps the HTML fragments it returns; estimates are re-rendered only when
the window's state changed (``version``).

Modules: ``views`` (the blueprint ``bp``: routes, guard, headers, error pages), ``session``,
``status``, ``labels``, ``contexts``, ``downloads``, ``trend`` (the trend over windows).
"""

from ldptel.server.pages.views import REFRESH_SECONDS, bp

__all__ = ["REFRESH_SECONDS", "bp"]
