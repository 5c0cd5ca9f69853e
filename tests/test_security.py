"""Security regressions of issue 11, against the real collector (gunicorn subprocess, real Redis,
real HTTP): open redirects through ``next``, CR/LF in ``next``, sessions that survive sign-out,
unthrottled failed authentication, CSV formula injection, missing security headers on API
responses, and an SDK that trusted any ε the server sent."""

from __future__ import annotations

import csv
import http.client
import io
import json
import re
import urllib.parse

import numpy as np
import pytest
from agg_support import shuffle_once
from http_support import Collector, http_request, start_collector
from ingest_support import EXPORT_TOKEN, INGEST_TOKEN, PROTOBUF, config_text

from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import load_config
from ldptel.client import TelemetryClient, TelemetryError
from ldptel.server import documents

EVIL = "=cmd|'/C calc'!A"
LABELS = [EVIL, "+1+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx", "plain", "-12.5", "a=b"]
EXTRA = f"""
[[campaigns]]
name = "labels"
oracle = "grr"
epsilon = 1.0
min_reports = 1
domain = {json.dumps(LABELS)}

[[campaigns]]
name = "hh"
kind = "heavy_hitters"
epsilon = 4.0
max_length = 16
levels = 16
width = 8
min_reports = 1

[[campaigns]]
name = "greedy"
oracle = "grr"
epsilon = 9.0
domain_size = 4

[[campaigns]]
name = "forever"
oracle = "rappor"
bloom_bits = 16
hashes = 2
cohorts = 2
f = 1e-9
p = 0.5
q = 0.75
candidates = ["a", "b"]
"""
# a fixed session secret: the per-test flush of ``redis_client`` would otherwise race a gunicorn
# worker that is still booting into a second random secret
SECRET = 'secret_key = "security-tests-session-secret"'
pytestmark = pytest.mark.collector(config_text(extra=EXTRA).replace("[server]\n", f"[server]\n{SECRET}\n", 1))
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


# --- helpers -----------------------------------------------------------------------------------

def _cookie(cookies: list[str]) -> str:
    return next(c.split(";", 1)[0] for c in cookies if c.startswith("ldptel_session="))


def signin_form(url: str) -> tuple[str, str]:
    """(cookie, CSRF token) of a fresh sign-in form."""
    reply = http_request(url, "GET", "/signin")
    assert reply.status == 200
    csrf = re.search(rb'name="csrf_token" value="([^"]+)"', reply.body).group(1).decode()
    return _cookie(reply.cookies), csrf


def post_signin(url: str, token: str, nxt: str | None = None):
    cookie, csrf = signin_form(url)
    data = {"token": token, "csrf_token": csrf, **({"next": nxt} if nxt is not None else {})}
    return http_request(url, "POST", "/signin", urllib.parse.urlencode(data), {**FORM, "Cookie": cookie})


def signed_in_cookie(url: str) -> str:
    reply = post_signin(url, EXPORT_TOKEN)
    assert reply.status == 302
    return _cookie(reply.cookies)


def browser_target(location: str) -> str:
    """Where a browser goes for ``Location: location`` relative to the site (WHATWG URL parsing
    of a special scheme: tabs and newlines removed, leading controls and spaces stripped,
    backslashes read as slashes)."""
    loc = re.sub(r"[\t\n\r]", "", location).lstrip("".join(map(chr, range(0x21)))).replace("\\", "/")
    return loc


def assert_same_origin(location: str, what: object) -> None:
    target = browser_target(location)
    assert target.startswith("/") and not target.startswith("//"), (what, location)
    assert not urllib.parse.urlsplit(target).netloc, (what, location)


CONTROLS = [*range(0x20), 0x7F]
BAD_NEXTS = (
    [f"/{chr(c)}/evil.example" for c in CONTROLS]  # each raw control character
    + [f"/%{c:02X}/evil.example" for c in CONTROLS]  # percent-encoded in the value itself
    + [f"{chr(c)}//evil.example" for c in CONTROLS]
    + ["//evil.example", "/\\evil.example", "\\\\evil.example", "/%2F/evil.example", "/%5Cevil.example",
       "/%252F/evil.example", "https://evil.example/", "javascript:alert(1)", "/\\/evil.example",
       "http:/evil.example", "/ /evil.example", "/\u3000/evil.example", "/%E3%80%80/evil.example"]
)


# --- 1, 2: next ------------------------------------------------------------------------------

def test_next_never_leaves_the_site_signed_in_get(collector: Collector) -> None:
    cookie = signed_in_cookie(collector.url)
    for nxt in BAD_NEXTS:
        path = "/signin?" + urllib.parse.urlencode({"next": nxt})
        reply = http_request(collector.url, "GET", path, headers={"Cookie": cookie})
        assert reply.status == 302, (nxt, reply.status)
        assert_same_origin(reply.headers["location"], nxt)
    # a plain same-site path still works
    reply = http_request(collector.url, "GET", "/signin?next=/campaigns/grr%3Fwindow%3D0",
                         headers={"Cookie": cookie})
    assert (reply.status, reply.headers["location"]) == (302, "/campaigns/grr?window=0")


def test_next_never_leaves_the_site_on_sign_in_post(collector: Collector) -> None:
    for nxt in BAD_NEXTS:
        reply = post_signin(collector.url, EXPORT_TOKEN, nxt)
        assert reply.status == 302, (nxt, reply.status)
        assert_same_origin(reply.headers["location"], nxt)
    reply = post_signin(collector.url, EXPORT_TOKEN, "/campaigns/grr")
    assert (reply.status, reply.headers["location"]) == (302, "/campaigns/grr")


def test_cr_lf_in_next_is_no_server_error(collector: Collector) -> None:
    cookie = signed_in_cookie(collector.url)
    for nxt in ("/x\r\nSet-Cookie: a=b", "/x\rX-A: b", "/x\nX-A: b", "/%0d%0aX-A:%20b"):
        reply = http_request(collector.url, "GET", "/signin?" + urllib.parse.urlencode({"next": nxt}),
                             headers={"Cookie": cookie})
        assert (reply.status, reply.headers.get("location")) == (302, "/"), nxt
        assert "x-a" not in reply.headers and not any(c.startswith("a=") for c in reply.cookies)
        reply = post_signin(collector.url, EXPORT_TOKEN, nxt)
        assert (reply.status, reply.headers.get("location")) == (302, "/"), nxt


# --- 3: sign-out ends the session -----------------------------------------------------------------

def _session_keys(r) -> list[bytes]:
    return sorted(r.scan_iter(match="ldptel:operator:session:*"))


def test_sign_out_ends_the_session_and_a_replayed_cookie_is_refused(collector: Collector,
                                                                    redis_client) -> None:
    cookie = {"Cookie": signed_in_cookie(collector.url)}
    download = "/campaigns/grr/download/estimates.csv"
    page = http_request(collector.url, "GET", "/", headers=cookie)
    assert page.status == 200
    assert http_request(collector.url, "GET", download, headers=cookie).status in (200, 409)
    csrf = re.search(rb'name="csrf_token" value="([^"]+)"', page.body).group(1).decode()
    reply = http_request(collector.url, "POST", "/signout", urllib.parse.urlencode({"csrf_token": csrf}),
                         {**FORM, **cookie})
    assert reply.status == 302 and reply.headers["location"].startswith("/signin")
    # the cookie of before the sign-out, replayed
    for path in ("/", "/campaigns/grr", download):
        reply = http_request(collector.url, "GET", path, headers=cookie)
        assert reply.status == 302 and reply.headers["location"].startswith("/signin"), (path, reply.status)
    assert http_request(collector.url, "GET", "/campaigns/grr/live", headers=cookie).status == 401
    assert _session_keys(redis_client) == []  # the server-side record is gone


def test_an_idle_session_expires(collector: Collector, redis_client) -> None:
    cookie = {"Cookie": signed_in_cookie(collector.url)}
    assert http_request(collector.url, "GET", "/", headers=cookie).status == 200
    keys = _session_keys(redis_client)  # the server-side record, expiring after the idle time
    assert len(keys) == 1, keys
    key = keys[0]
    assert 1790 <= redis_client.ttl(key) <= 1800
    redis_client.expire(key, 100)
    assert http_request(collector.url, "GET", "/campaigns/grr", headers=cookie).status == 200
    assert redis_client.ttl(key) > 1790  # every request renews it
    redis_client.pexpire(key, 1)  # what the idle timeout does, without waiting 30 minutes
    while redis_client.exists(key):
        pass
    reply = http_request(collector.url, "GET", "/", headers=cookie)
    assert reply.status == 302 and reply.headers["location"].startswith("/signin")


def test_session_idle_seconds_is_validated() -> None:
    from ldptel.campaigns.config import ConfigError, parse_config

    base = {"campaigns": [{"name": "a", "oracle": "grr", "epsilon": 1.0, "domain_size": 3}]}
    assert parse_config(base).server.session_idle_seconds == 1800
    assert parse_config({**base, "server": {"session_idle_seconds": 600}}).server.session_idle_seconds == 600
    for bad in (0, 59, 10**9, "1h", True):
        with pytest.raises(ConfigError, match=r"^server\.session_idle_seconds: "):
            parse_config({**base, "server": {"session_idle_seconds": bad}})


def test_removing_a_token_ends_its_sessions(redis_url: str, tmp_path) -> None:
    from agg_support import write_config

    from ldptel.server.app import create_app

    camp = [{"name": "a", "oracle": "grr", "epsilon": 1.0, "domain_size": 3}]
    old = create_app(write_config(tmp_path / "old.toml", camp, server={"export_tokens": [EXPORT_TOKEN]}),
                     redis_url)
    client = old.test_client()
    form = client.get("/signin").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    assert client.post("/signin", data={"token": EXPORT_TOKEN, "csrf_token": csrf}).status_code == 302
    assert client.get("/").status_code == 200
    new = create_app(write_config(tmp_path / "new.toml", camp, server={"export_tokens": ["another-token-x"]}),
                     redis_url)
    replay = new.test_client()
    replay.set_cookie("ldptel_session", client.get_cookie("ldptel_session").value)
    assert replay.get("/").status_code == 302


# --- 4: failed authentication is throttled ---------------------------------------------------------

def from_address(url: str, source: str, method: str, path: str, body: str | bytes | None = None,
                 headers: dict | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request from the loopback address ``source`` (any 127.x.y.z reaches the collector)."""
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=15,
                                      source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_failed_authentication_is_throttled(redis_url: str, redis_client, tmp_path) -> None:
    """Defaults: 20 failures per address or token prefix per 60 s; one worker, so that the
    worker that counted the failures is the one that answers."""
    c = start_collector(tmp_path, config_text(), redis_url, workers=1)
    try:
        def api(source: str, token: str) -> tuple[int, dict[str, str], bytes]:
            return from_address(c.url, source, "GET", "/v1/campaigns/grr/estimates",
                                headers={"Authorization": f"Bearer {token}"})

        statuses = [api("127.0.0.1", f"wrong-token-{i:04d}")[0] for i in range(20)]
        assert statuses == [401] * 20
        status, headers, body = api("127.0.0.1", "wrong-token-0020")
        assert status == 429 and json.loads(body)["error"] == "too_many_failures"
        assert 1 <= int(headers["retry-after"]) <= 60
        # the address is blocked, even with a valid token ...
        status, headers, _ = api("127.0.0.1", EXPORT_TOKEN)
        assert status == 429 and 1 <= int(headers["retry-after"]) <= 60
        # ... and a failure with the hammered token prefix from elsewhere too
        assert api("127.0.0.3", "wrong-token-9999")[0] == 429
        # but a valid token from another address is not throttled by those failures
        assert api("127.0.0.2", EXPORT_TOKEN)[0] in (200, 409)
        assert api("127.0.0.2", "other-prefix-1")[0] == 401  # nor is a first failure elsewhere
        ingest = from_address(c.url, "127.0.0.4", "POST", "/v1/reports", b"",
                              {"Authorization": "Bearer bad-ingest-token", "Content-Type": PROTOBUF})
        assert ingest[0] == 401
        # the sign-in form: the same limit per address
        cookie, csrf = signin_form(c.url)

        def signin(source: str, token: str) -> tuple[int, dict[str, str], bytes]:
            data = urllib.parse.urlencode({"token": token, "csrf_token": csrf})
            return from_address(c.url, source, "POST", "/signin", data, {**FORM, "Cookie": cookie})

        assert [signin("127.0.0.5", f"bad-signin-{i:03d}")[0] for i in range(20)] == [401] * 20
        status, headers, body = signin("127.0.0.5", "bad-signin-020")
        assert status == 429 and b"Too many failed sign-ins" in body
        assert 1 <= int(headers["retry-after"]) <= 60
        assert signin("127.0.0.5", EXPORT_TOKEN)[0] == 429
        assert signin("127.0.0.6", EXPORT_TOKEN)[0] == 302
        # Redis holds keyed digests with the window as TTL, never an address or a token
        stored = list(redis_client.scan_iter(match="{ldptel:authfail}:*"))
        assert stored and all(0 < redis_client.ttl(k) <= 60 for k in stored)
        dump = b" ".join(stored + [redis_client.get(k) for k in stored])
        assert b"127.0.0" not in dump and b"wrong-to" not in dump and b"bad-sign" not in dump
    finally:
        c.stop()


def test_throttle_buckets_and_config() -> None:
    from ldptel.campaigns.config import ConfigError, parse_config
    from ldptel.server.throttle import address_bucket

    assert address_bucket("192.0.2.7") == "192.0.2.7"
    assert address_bucket("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert address_bucket("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert address_bucket("::ffff:192.0.2.7") == "192.0.2.7"
    base = {"campaigns": [{"name": "a", "oracle": "grr", "epsilon": 1.0, "domain_size": 3}]}
    srv = parse_config(base).server
    assert (srv.auth_failure_limit, srv.auth_failure_window_seconds) == (20, 60)
    for key, bad in (("auth_failure_limit", 0), ("auth_failure_window_seconds", 0),
                     ("auth_failure_limit", "x")):
        with pytest.raises(ConfigError, match=rf"^server\.{key}: "):
            parse_config({**base, "server": {key: bad}})


# --- 5: CSV formula injection -----------------------------------------------------------------

def test_csv_cells_that_start_a_formula_are_neutralized() -> None:
    csv_cell, csv_text = getattr(documents, "csv_cell", lambda v: v), documents.csv_text
    for bad in ("=1+1", "+1+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx", "-", "+", "=", "-inf", "-1_0", "-1e5x"):
        assert csv_cell(bad) == "'" + bad, bad
    for same in ("plain", "a=b", "", "-12.5", "+3", "-0.5e-3", ".5", -12.5, 3, 0.25):
        assert csv_cell(same) == same, same
    assert csv_cell(None) == ""
    rows = [{"value": EVIL, "estimate": -12.5}, {"value": "ok", "estimate": None}]
    text = csv_text(rows, ["value", "estimate"])
    assert list(csv.reader(io.StringIO(text))) == [["value", "estimate"], ["'" + EVIL, "-12.5"], ["ok", ""]]


def test_exported_csv_neutralizes_labels_and_keeps_negative_numbers(collector: Collector,
                                                                    redis_client) -> None:
    cfg = load_config(collector.config_path)
    camp = cfg.campaign("labels")
    batch = camp.mechanism().encode_batch(np.arange(90) % 3, rng=np.random.default_rng(5), campaign="labels")
    reply = http_request(collector.url, "POST", "/v1/reports", batch.SerializeToString(),
                         {"Content-Type": PROTOBUF, "Authorization": f"Bearer {INGEST_TOKEN}"})
    assert reply.status == 202
    shuffle_once(cfg, redis_client)
    Worker(cfg, redis_client).run(once=True)
    auth = {"Authorization": f"Bearer {EXPORT_TOKEN}"}
    doc = json.loads(http_request(collector.url, "GET", "/v1/campaigns/labels/estimates", headers=auth).body)
    reply = http_request(collector.url, "GET", "/v1/campaigns/labels/estimates?format=csv", headers=auth)
    assert reply.status == 200
    rows = list(csv.reader(io.StringIO(reply.body.decode(), newline="")))[1:]
    by_label = {r[0]: r for r in rows if r}
    for label in LABELS:
        safe = label if label in ("plain", "-12.5", "a=b") else "'" + label
        assert safe in by_label, (label, sorted(by_label))
    # the numbers are the JSON's numbers, negative ones included, written as numbers
    estimates = [float(r[1]) for r in rows]
    assert estimates == [it["estimate"] for it in doc["items"]] and min(estimates) < 0
    assert not any(cell.startswith("'") for r in rows for cell in r[1:])


@pytest.mark.slow
def test_a_device_sent_formula_is_neutralized_in_the_heavy_hitter_csv(collector: Collector,
                                                                      redis_client) -> None:
    """The issue's report: a heavy-hitter string sent by devices was the first cell of the CSV."""
    cfg = load_config(collector.config_path)
    camp = cfg.campaign("hh")
    values = np.where(np.arange(8000) % 5 == 0, "benign", EVIL)
    batch = camp.mechanism().encode_batch(list(values), rng=np.random.default_rng(11), campaign="hh")
    reply = http_request(collector.url, "POST", "/v1/reports", batch.SerializeToString(),
                         {"Content-Type": PROTOBUF, "Authorization": f"Bearer {INGEST_TOKEN}"})
    assert reply.status == 202
    shuffle_once(cfg, redis_client)
    Worker(cfg, redis_client).run(once=True)
    doc = json.loads(http_request(collector.url, "GET", "/v1/campaigns/hh/heavy-hitters",
                                  headers={"Authorization": f"Bearer {EXPORT_TOKEN}"}).body)
    assert doc["items"][0]["value"] == EVIL  # the JSON keeps the string as sent
    assert all(isinstance(it["std_error"], float) and it["std_error"] > 0 for it in doc["items"])
    reply = http_request(collector.url, "GET", "/campaigns/hh/download/heavy-hitters.csv",
                         headers={"Cookie": signed_in_cookie(collector.url)})
    assert reply.status == 200
    rows = list(csv.reader(io.StringIO(reply.body.decode(), newline="")))
    assert rows[1][0] == "'" + EVIL
    assert not any(cell.lower() in ("nan", "inf", "-inf", "") for row in rows[1:] for cell in row[1:])
    assert not any(cell.startswith(("=", "+", "@", "\t", "\r")) for row in rows for cell in row)


# --- 6: security headers on every response ---------------------------------------------------

def test_every_response_carries_nosniff_and_a_csp(collector: Collector) -> None:
    auth = {"Authorization": f"Bearer {EXPORT_TOKEN}"}
    cases = [("GET", "/v1/campaigns", {"Authorization": f"Bearer {INGEST_TOKEN}"}, 200),
             ("GET", "/v1/campaigns/grr/estimates", auth, None),
             ("GET", "/v1/campaigns/nope/estimates", auth, 404),
             ("GET", "/no/such/path", {}, 404),
             ("POST", "/v1/reports", {"Content-Type": PROTOBUF}, 401),
             ("GET", "/healthz", {}, 200)]
    for method, path, headers, status in cases:
        reply = http_request(collector.url, method, path, b"" if method == "POST" else None, headers)
        assert status is None or reply.status == status, (path, reply.status)
        assert reply.headers.get("x-content-type-options") == "nosniff", path
        csp = reply.headers.get("content-security-policy", "")
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp, (path, csp)
    # the pages keep their own nonce-based policy (one CSP header, not two)
    reply = http_request(collector.url, "GET", "/signin")
    csp = reply.headers["content-security-policy"]
    assert "script-src 'nonce-" in csp and "style-src 'self'" in csp and csp.count("default-src") == 1
    assert reply.headers["x-content-type-options"] == "nosniff"


# --- 7: the SDK's privacy ceiling -------------------------------------------------------------

def test_sdk_refuses_campaigns_over_max_epsilon(collector: Collector, tmp_path, redis_client) -> None:
    client = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite")
    with pytest.raises(TelemetryError, match=r"'greedy'.*per-report ε = 9 exceeds .*max_epsilon = 8"):
        client.report("greedy", 1)
    with pytest.raises(TelemetryError, match=r"'forever'.*lifetime ε∞ = 85\.\d exceeds .*max_epsilon = 8"):
        client.report("forever", "a")
    client.report("grr", "apple")  # a campaign within the bound is unaffected
    assert client.pending() == 1
    # reports queued by a client that allowed more are not sent by one that allows less
    lax = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite", max_epsilon=100)
    lax.report("greedy", 1)
    lax.report("forever", "a")
    lax.queue.close()
    result = client.flush(timeout=10)
    assert (result.accepted, result.dropped, result.pending) == (1, 2, 0)
    assert {k for k in redis_client.scan_iter("{ldptel:*}:ingress")} == {b"{ldptel:grr:0}:ingress"}
    client.close(flush_timeout=None)
    with pytest.raises(ValueError, match="max_epsilon"):
        TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "r.sqlite", max_epsilon=0)
