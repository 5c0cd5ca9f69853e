"""What the end-to-end shuffled benches share (``shuffled_accuracy.py``, ``shuffled_kinds.py``):
``ldptel serve`` on an embedded Redis with a config written by the bench, the analyzer key
published first, the CLI, the export API and the SDK as a device fleet."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ldptel.client import TelemetryClient
from ldptel.store.redis_server import EmbeddedRedis, free_port

INGEST, EXPORT = "bench-ingest-token", "bench-export-token"


def cli(*args: str, timeout: float = 900) -> float:
    """``ldptel ARGS`` in a child process; its wall seconds."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ldptel.commands.cli", *args], check=True, timeout=timeout,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def get(url: str, path: str) -> dict:
    """A JSON document of the export API (the bench's export token)."""
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {EXPORT}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def send(url: str, queue: Path, name: str, values: list, signing_key: str | None = None) -> float:
    """``values`` reported to campaign ``name`` by the SDK (pinning ``signing_key``, the analyzer
    signing key: ``Served.signing_key``) and flushed, every one accepted; the wall seconds of
    report + flush (sealing included)."""
    t0 = time.perf_counter()
    with TelemetryClient(url, INGEST, queue_path=queue, accept_unrandomized=True, batch_size=1000,
                         timeout=60, analyzer_signing_key=signing_key) as client:
        client.report_many(name, values)
        result = client.flush(timeout=600)
        assert result.pending == 0 and result.accepted == len(values), result
    return time.perf_counter() - t0


@dataclass(frozen=True)
class Served:
    url: str  # the collector and export API
    redis_url: str
    config: Path
    tmp: Path  # a directory removed at the end
    signing_key: str = ""  # what devices pin (``ldptel analyzer-key show``)

    def ldptel(self, command: str) -> float:
        """``ldptel shuffle|aggregate --once`` on this stack; its wall seconds."""
        return cli(command, "--config", str(self.config), "--redis-url", self.redis_url, "--once")


@contextmanager
def served(config_text: Callable[[Path], str]) -> Iterator[Served]:
    """``config_text(keys_dir)`` served by ``ldptel serve`` (2 workers) until the block ends."""
    with tempfile.TemporaryDirectory() as tmpdir, EmbeddedRedis(data_dir=Path(tmpdir) / "redis") as redis:
        tmp = Path(tmpdir)
        cfg = tmp / "bench.toml"
        cfg.write_text(config_text(tmp / "keys"))
        os.environ["LDPTEL_DATA_DIR"] = str(tmp / "data")
        stack = Served(f"http://127.0.0.1:{free_port()}", redis.url, cfg, tmp)
        stack.ldptel("aggregate")  # publishes the analyzer key
        shown = subprocess.run([sys.executable, "-m", "ldptel.commands.cli", "analyzer-key", "show",
                                "--config", str(cfg), "--quiet"],
                               check=True, capture_output=True, text=True, timeout=60)
        stack = dataclasses.replace(stack, signing_key=shown.stdout.strip())
        serve = subprocess.Popen([sys.executable, "-m", "ldptel.commands.cli", "serve", "--config", str(cfg),
                                  "--redis-url", redis.url, "--port", stack.url.rsplit(":", 1)[1],
                                  "--workers", "2"],
                                 stdout=subprocess.DEVNULL, stderr=open(tmp / "serve.log", "w"))
        try:
            for _ in range(150):
                try:
                    urllib.request.urlopen(f"{stack.url}/healthz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.2)
            yield stack
        finally:
            serve.terminate()
            serve.wait(30)
