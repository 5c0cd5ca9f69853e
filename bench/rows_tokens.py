"""Rows of Privacy Pass tokens (issue 37), each against a floor measured beside it:

- issuance: ``blind_rsa.BlindSigner.blind_sign`` per token (the machine's OpenSSL raw private
  operation through ``libcrypto_rsa``, else GMP's CRT; then the RFC 9474 check sᵉ = m), against
  OpenSSL's RSA-2048 PSS signature (``cryptography``'s ``sign``: the same private operation plus
  the padding); target ≥ 1,000 tokens/s per core; a second row without a target measures the GMP
  fallback;
- verification: what the collector does per token (``privacy_pass.parse_authorization`` of the
  header, the challenge, ``verify_token``), against ``cryptography``'s bare RSA-PSS ``verify`` of
  the same signature; target ≥ 20,000 tokens/s per core;
- the collector's CPU per request with a token (a local campaign with ``require_tokens``, batch of
  100) against the same request to a campaign without tokens; target ≤ 1.3×. Measured twice:
  - **served** (the target's row): ``ldptel serve`` (its default HTTP server, one worker, on an
    embedded Redis of the bench) takes the requests over HTTP/1.1 keep-alive from this process;
    the CPU is the time on a core of every thread of serve's process tree (supervisor, HTTP
    server, worker) less its issuer child, read from ``/proc`` (the scheduler's nanoseconds)
    around each block of ``BLOCK`` requests, the two sides taking turns block by block, so both
    meet the same machine: what the collector host spends per request. The tokens are minted
    beforehand with the issuer's key; the client, the issuer and Redis are not counted;
  - **route only**: ``ReportRoute.answer`` in this process (no HTTP server; this thread's CPU
    time, blocks taking turns as above), the part of a request a token changes (verification, the
    spent-set check in ``INGEST_TOKEN``), against the same part without a token: a stricter
    ratio, since the HTTP server's share is left out of both.
"""

from __future__ import annotations

import atexit
import io
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from table import Paired, Row, Timed

from ldptel import blind_rsa, privacy_pass
from ldptel.campaigns.config import load_config
from ldptel.client import create_mechanism

PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)


def _issuance(quick: bool, backend: str | None = None) -> Timed:
    n = 100 if quick else 400
    key = rsa.generate_private_key(65537, 2048)
    signer = blind_rsa.BlindSigner(key, backend=backend)
    challenge = privacy_pass.challenge_for("bench", "c", 0)
    blinded = [
        privacy_pass.TokenRequest.decode(
            privacy_pass.token_request(key.public_key(), challenge).request
        ).blinded_msg
        for _ in range(n)
    ]
    msgs = [os.urandom(98) for _ in range(n)]

    def ours() -> None:
        for b in blinded:
            signer.blind_sign(b)

    def floor() -> None:
        for m in msgs:
            key.sign(m, PSS, hashes.SHA384())

    return Timed(ours, floor, float(n), check=lambda: f"signing by {signer.raw_version or 'GMP'}")


def _tokens(n: int, key: rsa.RSAPrivateKey, issuer: str, campaign: str, window: int) -> list:
    signer = blind_rsa.BlindSigner(key)
    challenge = privacy_pass.challenge_for(issuer, campaign, window)
    out = []
    for _ in range(n):
        pending = privacy_pass.token_request(key.public_key(), challenge)
        out.append(pending.finalize(key.public_key(), signer.blind_sign(pending.request[3:])))
    return out


def _verification(quick: bool) -> Timed:
    n = 500 if quick else 2000
    key = rsa.generate_private_key(65537, 2048)
    pub = key.public_key()
    tokens = _tokens(n, key, "bench", "c", 0)
    headers = [privacy_pass.authorization(t) for t in tokens]
    digest = privacy_pass.challenge_for("bench", "c", 0).digest()
    raw = [(t.token_input(), t.authenticator) for t in tokens]

    def ours() -> None:
        for h in headers:
            t = privacy_pass.parse_authorization(h)
            assert t is not None and t.challenge_digest == digest and privacy_pass.verify_token(pub, t)

    def floor() -> None:
        for m, s in raw:
            pub.verify(s, m, PSS, hashes.SHA384())

    return Timed(ours, floor, float(n))


_STACK: dict = {}


def _collector_stack():
    if _STACK:
        return _STACK
    from ldptel.server.app import create_app
    from ldptel.server.issuer import load_or_create_key
    from ldptel.server.report_route import ReportRoute
    from ldptel.store.redis_server import EmbeddedRedis

    tmp = Path(tempfile.mkdtemp(prefix="ldptel-bench-tokens-"))
    server = EmbeddedRedis(data_dir=tmp / "redis")
    server.start()
    atexit.register(server.stop)
    camp = 'oracle = "grr"\nepsilon = 1.0\ndomain_size = 8\n'
    (tmp / "c.toml").write_text(
        '[server]\ningest_tokens = ["bench-ingest-token"]\nrate_limit_per_address_per_minute = 0\n'
        "rate_limit_per_minute = 1000000000\n\n[shuffler]\nenabled = false\n\n"
        f'[issuer]\nkey_file = "{tmp / "issuer" / "key.pem"}"\n\n'
        f'[[campaigns]]\nname = "tok"\nrequire_tokens = true\n{camp}\n'
        f'[[campaigns]]\nname = "plain"\nrequire_tokens = false\n{camp}'
    )
    config = load_config(tmp / "c.toml")
    key = load_or_create_key(config.issuer)
    app = create_app(config, server.url)
    _STACK.update(route=ReportRoute(app.extensions["ldptel"]), config=config, key=key.private_key,
                  path=tmp / "c.toml", redis_url=server.url)
    return _STACK


def _environ(body: bytes, auth: str) -> dict:
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/v1/reports",
        "CONTENT_TYPE": "application/x-protobuf",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "HTTP_AUTHORIZATION": auth,
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
    }


def _requests(st: dict, name: str, n: int) -> list[tuple[bytes, str]]:
    """``n`` (body, Authorization) pairs to campaign ``name`` (batch of 100 GRR reports, fresh batch
    ids): a fresh token each for "tok", the ingest bearer token for "plain"."""
    batch = create_mechanism("grr", epsilon=1.0, domain_size=8).encode_batch(
        [i % 8 for i in range(100)], campaign=name)
    bodies = []
    for _ in range(n):
        batch.batch_id = os.urandom(16)
        bodies.append(batch.SerializeToString())
    if name == "tok":
        tokens = _tokens(n, st["key"], st["config"].issuer.name, "tok", 0)
        auths = [privacy_pass.authorization(t) for t in tokens]
    else:
        auths = ["Bearer bench-ingest-token"] * n
    return list(zip(bodies, auths, strict=True))


BLOCK = 50  # requests per block of the collector rows: the sides alternate block by block


def _in_turns(n: int, block: Callable[[str, int], float]) -> tuple[float, float]:
    """Costs of ``n`` requests a side ("tok", "plain"), ``block(side, at)`` measuring requests
    ``at`` … ``at + BLOCK`` of a side, the sides taking turns (tok, plain, plain, tok, …) so both
    meet the same machine: a load change between them moves neither ratio."""
    used = {"tok": 0.0, "plain": 0.0}
    for i, at in enumerate(range(0, n, BLOCK)):
        for side in ("tok", "plain") if i % 2 == 0 else ("plain", "tok"):
            used[side] += block(side, at)
    return used["tok"], used["plain"]


def _collector(quick: bool) -> Paired:
    n = 150 if quick else 600
    st = _collector_stack()
    route = st["route"]

    def run() -> tuple[float, float]:
        """This thread's CPU seconds in ``ReportRoute.answer``, ``n`` requests a side in turns."""
        envs = {side: [_environ(body, auth) for body, auth in _requests(st, side, n)]
                for side in ("tok", "plain")}

        def block(side: str, at: int) -> float:
            t0 = time.thread_time()
            for env in envs[side][at:at + BLOCK]:
                status, _, out = route.answer(env)
                assert status == 202, out
            return time.thread_time() - t0

        return _in_turns(n, block)

    return Paired(run, float(n))


_SERVED: dict = {}


def _served_stack():
    """``ldptel serve`` (one worker, no aggregator) on the route stack's Redis and config, and the
    pid of its issuer child (its CPU is not the collector's)."""
    if _SERVED:
        return _SERVED
    import subprocess
    import sys

    from serve_cost import wait_healthy
    from serve_latency import children

    from ldptel.store.redis_server import free_port

    st = _collector_stack()
    port, issuer_port = free_port(), free_port()
    path = st["path"]
    served = path.with_name("served.toml")
    served.write_text(path.read_text().replace("[issuer]\n", f"[issuer]\nport = {issuer_port}\n", 1))
    log = open(path.with_name("serve.log"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "ldptel.commands.cli", "serve", "--config", str(served),
                             "--redis-url", st["redis_url"], "--no-aggregator", "--workers", "1",
                             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()

    atexit.register(stop)
    wait_healthy(f"http://127.0.0.1:{port}")
    issuer = next(p for p in children(proc.pid) if b"\0issuer\0" in Path(f"/proc/{p}/cmdline").read_bytes())
    _SERVED.update(port=port, pid=proc.pid, issuer=issuer)
    return _SERVED


def _collector_served(quick: bool) -> Paired:
    import http.client

    from serve_latency import descendants, thread_cpu, thread_cpu_used

    n = 300 if quick else 1500
    st, sv = _collector_stack(), _served_stack()
    conn = http.client.HTTPConnection("127.0.0.1", sv["port"], timeout=60)

    def post(requests: list[tuple[bytes, str]]) -> None:
        for body, auth in requests:
            conn.request("POST", "/v1/reports", body=body, headers={
                "Content-Type": "application/x-protobuf", "Authorization": auth})
            resp = conn.getresponse()
            out = resp.read()
            assert resp.status == 202, out

    def run() -> tuple[float, float]:
        """CPU seconds of serve's threads (its tree less the issuer's), ``n`` requests a side in
        turns."""
        requests = {side: _requests(st, side, n) for side in ("tok", "plain")}
        pids = descendants(sv["pid"]) - descendants(sv["issuer"])

        def block(side: str, at: int) -> float:
            before = thread_cpu(pids)
            post(requests[side][at:at + BLOCK])
            return thread_cpu_used(before, thread_cpu(pids))

        return _in_turns(n, block)

    return Paired(run, float(n))


ROWS = [
    Row(
        "token issuance (blind RSA-2048 sign: the machine's OpenSSL, raw private operation)",
        "ns/report",
        "OpenSSL RSA-2048 PSS sign",
        "≥ 1,000 tokens/s per core (≤ 1,000,000 ns)",
        _issuance,
        group="tokens",
        before="867,000 ns (GMP CRT, issue 37's first build)",
    ),
    Row(
        "the same, GMP fallback (no OpenSSL 3 libcrypto: CRT with gmpy2.powmod_sec)",
        "ns/report",
        "OpenSSL RSA-2048 PSS sign",
        "— (fallback)",
        lambda quick: _issuance(quick, "gmp"),
        group="tokens",
    ),
    Row(
        "token verification at the collector (parse, challenge, RSA-PSS verify)",
        "ns/report",
        "cryptography RSA-PSS verify alone",
        "≥ 20,000 tokens/s per core (≤ 50,000 ns)",
        _verification,
        group="tokens",
    ),
    Row(
        "collector CPU per request with a token, batch 100 (ldptel serve over HTTP)",
        "ms",
        "same request, campaign without tokens",
        "≤ 1.3×",
        _collector_served,
        group="tokens",
        repeats=1,
    ),
    Row(
        "the same, route only (ReportRoute.answer in process, no HTTP server)",
        "ms",
        "same request, campaign without tokens",
        "— (stricter view: the HTTP server's share left out)",
        _collector,
        group="tokens",
        repeats=1,
    ),
]
