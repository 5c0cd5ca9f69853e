"""Behind the documented nginx (issue 35): the operator session cookie is ``Secure`` when a
trusted proxy (``server.trusted_proxies``) says the client used HTTPS (``X-Forwarded-Proto``),
and only then; the real app over HTTP on the session Redis."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from agg_support import HttpStack, write_config

from ldptel.errors import ConfigError

CAMPAIGNS = [{"name": "c", "oracle": "grr", "epsilon": 1.0, "domain_size": 2}]


def session_cookie(stack: HttpStack, headers: dict[str, str]) -> str:
    """The ``Set-Cookie`` of the operator session that ``GET /signin`` starts (its CSRF token)."""
    status, answer, _ = stack.request("GET", "/signin", headers=headers)
    assert status == 200
    cookies = answer.get("set-cookie", [])
    cookies = [cookies] if isinstance(cookies, str) else cookies
    return next(c for c in cookies if c.startswith("ldptel_session="))


@pytest.mark.parametrize(("trusted", "secure"), [(["127.0.0.1"], True), (["10.0.0.0/8", "::1"], False),
                                                 ([], False)])
def test_secure_cookie_only_through_a_trusted_proxy(tmp_path: Path, redis_url: str,
                                                   redis_client: redis.Redis, trusted: list[str],
                                                   secure: bool) -> None:
    cfg = write_config(tmp_path / "c.toml", CAMPAIGNS, server={"trusted_proxies": trusted})
    stack = HttpStack(cfg, redis_url)  # its peer, as nginx's on one host: 127.0.0.1
    try:
        assert ("Secure" in session_cookie(stack, {"X-Forwarded-Proto": "https"})) is secure
        assert "Secure" not in session_cookie(stack, {})  # plain HTTP to the app itself
        # the last value is the nearest proxy's: a client's own "https" before it does not count
        assert "Secure" not in session_cookie(stack, {"X-Forwarded-Proto": "https, http"})
    finally:
        stack.close()


@pytest.mark.parametrize("bad", [["nginx"], "127.0.0.1", [1]])
def test_trusted_proxies_must_be_addresses(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match="server.trusted_proxies"):
        write_config(tmp_path / "c.toml", CAMPAIGNS, server={"trusted_proxies": bad})
