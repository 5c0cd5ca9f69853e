"""Helpers for the aggregator tests: configs on disk, stream entries written the way the collector
stores them (``ldptel.keys`` format), and a reference decode of a stream read directly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import redis
from http_support import AppServer, http_request

from ldptel.aggregator import store
from ldptel.aggregator.decoders import Accumulator
from ldptel.campaigns.config import Campaign, Config, load_config
from ldptel.keys import shard_of, stream_key
from ldptel.proto import ReportBatch

EXPORT_TOKEN = "export-token-for-tests"
INGEST_TOKEN = "ingest-token-for-tests"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return repr(v)


def write_config(path: Path, campaigns: list[dict], aggregator: dict | None = None,
                 server: dict | None = None, shuffler: dict | None = None,
                 issuer: dict | None = None) -> Config:
    """Write a TOML config and return it parsed."""
    server = {"ingest_tokens": [INGEST_TOKEN], "export_tokens": [EXPORT_TOKEN],
              "rate_limit_per_address_per_minute": 0,  # every test client sends from one address
              "max_unfinished_bodies_per_address": 64,  # … and posts concurrently from it
              **(server or {})}
    lines = ["[server]"] + [f"{k} = {_toml_value(v)}" for k, v in server.items()]
    if aggregator:
        lines += ["", "[aggregator]"] + [f"{k} = {_toml_value(v)}" for k, v in aggregator.items()]
    if shuffler:
        lines += ["", "[shuffler]"] + [f"{k} = {_toml_value(v)}" for k, v in shuffler.items()]
    if issuer is not None:  # issue 37: the token issuer
        lines += ["", "[issuer]"] + [f"{k} = {_toml_value(v)}" for k, v in issuer.items()]
    for camp in campaigns:
        lines += ["", "[[campaigns]]"] + [f"{k} = {_toml_value(v)}" for k, v in camp.items()]
    path.write_text("\n".join(lines) + "\n")
    return load_config(path)


def xadd_batches(r: redis.Redis, campaign: Campaign, batches: list[ReportBatch], window: int = 0) -> int:
    """Store batches as the collector does: one entry per batch (fields batch, window, count) on
    the shard chosen by its batch_id. Returns the number of reports."""
    pipe = r.pipeline(transaction=False)
    total = 0
    for b in batches:
        shard = shard_of(b.batch_id, campaign.shards)
        pipe.xadd(stream_key(campaign.name, shard),
                  {"batch": b.SerializeToString(), "window": window, "count": b.count})
        total += b.count
    pipe.execute()
    return total


def random_batches(campaign: Campaign, n_reports: int, per_batch: int, seed: int) -> list[ReportBatch]:
    """Randomized batches of a Zipf-ish population (vectorized encode)."""
    mech = campaign.mechanism()
    rng = np.random.default_rng(seed)
    d = len(campaign.labels())
    w = 1.0 / np.arange(1, d + 1)
    values = rng.choice(d, size=n_reports, p=w / w.sum())
    out = []
    for start in range(0, n_reports, per_batch):
        chunk = values[start:start + per_batch]
        if campaign.oracle == "rappor":
            labels = campaign.labels()
            chunk = [labels[v] for v in chunk]
        out.append(mech.encode_batch(chunk, rng=rng, campaign=campaign.name))
    return out


def reference(r: redis.Redis, campaign: Campaign) -> dict[int, Accumulator]:
    """Decode every entry of the campaign's streams directly (XRANGE), per window."""
    out: dict[int, Accumulator] = {}
    for shard in range(campaign.shards):
        for _, fields in r.xrange(stream_key(campaign.name, shard)):
            w = int(fields[b"window"])
            acc = out.setdefault(w, store.new_accumulator(campaign))
            acc.add(ReportBatch.FromString(fields[b"batch"]))
    return out


def same_state(a: Accumulator, b: Accumulator) -> bool:
    return a.state.keys() == b.state.keys() and all(np.array_equal(a.state[k], b.state[k]) for k in a.state)


def aggregate_cmd(config_path: Path, redis_url: str, once: bool = True) -> list[str]:
    cmd = [sys.executable, "-m", "ldptel.commands.cli", "aggregate", "--config", str(config_path),
           "--redis-url", redis_url]
    return cmd + (["--once"] if once else [])


def run_aggregate(config_path: Path, redis_url: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(aggregate_cmd(config_path, redis_url), capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ), check=True)


def shuffle_once(config: Config, r: redis.Redis):
    """Drain every ingress stream of ``config`` in this process (``Shuffler.run(once=True)``:
    everything released whatever the release rules say); returns its ``ShuffleStats``."""
    from ldptel.shuffler.worker import Shuffler

    return Shuffler(config, r).run(once=True)


def run_shuffle(config_path: Path, redis_url: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``ldptel shuffle --once`` as a subprocess (checked)."""
    cmd = [sys.executable, "-m", "ldptel.commands.cli", "shuffle", "--config", str(config_path),
           "--redis-url", redis_url, "--once"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ),
                          check=True)


# --- HTTP ------------------------------------------------------------------------------------

class HttpStack(AppServer):
    """The real collector app (``create_app``, with the export blueprint) served over HTTP by a
    Werkzeug server thread on a free 127.0.0.1 port."""

    def __init__(self, config: Config, redis_url: str) -> None:
        from ldptel.server.app import create_app

        app = create_app(config, redis_url)
        if "export" not in app.blueprints:  # until the factory registers it by default
            from ldptel.server.export import bp

            app.register_blueprint(bp)
        super().__init__(app)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None) -> tuple[int, dict, bytes]:
        reply = http_request(self.url, method, path, body, headers)
        return reply.status, reply.headers, reply.body

    def post_batch(self, batch: ReportBatch, token: str = INGEST_TOKEN) -> dict:
        status, _, body = self.request("POST", "/v1/reports", batch.SerializeToString(), {
            "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"})
        assert status == 202, (status, body)
        return json.loads(body)

    def get(self, path: str, token: str | None = EXPORT_TOKEN, headers: dict | None = None):
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        return self.request("GET", path, headers=h)


def signed_in(s: HttpStack) -> str:
    """The session cookie of a sign-in through the form (CSRF token included)."""
    _, headers, body = s.request("GET", "/signin")
    found = re.search(rb'name="csrf_token" value="([^"]+)"', body)
    assert found is not None, body[:300]
    cookie = headers["set-cookie"].split(";", 1)[0]
    form = f"token={EXPORT_TOKEN}&csrf_token={found.group(1).decode()}".encode()
    status, headers, _ = s.request("POST", "/signin", form, {
        "Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie})
    assert status == 302, status
    return headers["set-cookie"].split(";", 1)[0]
