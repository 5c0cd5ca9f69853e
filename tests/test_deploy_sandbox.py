"""The systemd units of ``deploy/`` under their own sandbox (issue 34, item 8): every path an
ldptel process of a unit writes — the analyzer's private keys, numba's cache, the privacy-plan
cache — is writable with the unit's ``ProtectSystem``/``ProtectHome``/``PrivateTmp`` and the
directories systemd makes for it (``StateDirectory``, ``CacheDirectory``, …), with the example
config installed as ``/etc/ldptel/ldptel.toml`` (it has a shuffled campaign, so the aggregator
writes keys). The paths are computed by ldptel itself, in a subprocess given the unit's
environment (``Environment=`` and ``EnvironmentFile=``, ``HOME`` a system user's
``/nonexistent``). ``systemd-analyze verify`` checks each unit too where it is installed.

Then an aggregator whose keys directory cannot be written: it keeps aggregating the local
campaigns, reports the shuffled ones as failing (an error in its log, the
``ldptel_aggregator_analyzer_keys_failing`` gauge) and does not exit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import pytest
from agg_support import aggregate_cmd, random_batches, write_config, xadd_batches
from http_support import request, start_collector
from sealed_support import LOCAL, SHUFFLED

from ldptel.aggregator.store import load_accumulator
from ldptel.campaigns.config import load_config

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
EXAMPLE = ROOT / "examples" / "ldptel.toml"
UNITS = sorted(DEPLOY.glob("*.service"))
SYSTEM_HOME = "/nonexistent"  # a system user's home (Debian's adduser --system)


def service_section(unit: Path) -> dict[str, list[str]]:
    """``[Service]`` of a unit: key → every value given (in order; continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", unit.read_text())
    out: dict[str, list[str]] = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def environment(svc: dict[str, list[str]]) -> dict[str, str]:
    """The unit's environment: ``EnvironmentFile=`` (ours, ``deploy/ldptel.env``) then
    ``Environment=`` lines (which win), and the ``HOME`` of a system user."""
    env = {"HOME": SYSTEM_HOME}
    for path in svc.get("EnvironmentFile", []):
        assert path.lstrip("-") == "/etc/ldptel/ldptel.env", path
        for line in (DEPLOY / "ldptel.env").read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, value = line.partition("=")
                env[key.strip()] = value.strip()
    for line in svc.get("Environment", []):
        for word in line.split():
            key, _, value = word.strip('"').partition("=")
            env[key] = value
    return env


def writable_roots(svc: dict[str, list[str]]) -> tuple[list[PurePosixPath], list[PurePosixPath]]:
    """(paths writable under the unit's sandbox, paths hidden by it). Only the sandbox settings
    our units use are modelled; an unknown one fails the test so that it gets modelled."""
    known = {"ProtectSystem", "ProtectHome", "PrivateTmp", "StateDirectory", "CacheDirectory",
             "LogsDirectory", "RuntimeDirectory", "ReadWritePaths", "StateDirectoryMode"}
    unknown = {k for k in svc if k.startswith(("ReadOnly", "Inaccessible", "TemporaryFileSystem",
                                                "BindPaths", "BindReadOnlyPaths"))} - known
    assert not unknown, f"sandbox settings this test does not model: {unknown}"
    protect = (svc.get("ProtectSystem") or ["no"])[-1]
    writable = [PurePosixPath("/")] if protect in ("no", "false") else []
    if protect in ("yes", "true", "full"):  # /usr, /boot (and /etc with full) read-only: the rest stays
        writable = [PurePosixPath(p) for p in ("/var", "/tmp", "/run", "/home", "/root", "/srv", "/opt")]
    for key, base in (("StateDirectory", "/var/lib"), ("CacheDirectory", "/var/cache"),
                      ("LogsDirectory", "/var/log"), ("RuntimeDirectory", "/run")):
        for value in svc.get(key, []):
            writable += [PurePosixPath(base) / d for d in value.split()]
    for value in svc.get("ReadWritePaths", []):
        writable += [PurePosixPath(p.lstrip("-")) for p in value.split()]
    if (svc.get("PrivateTmp") or ["no"])[-1] in ("yes", "true"):
        writable += [PurePosixPath("/tmp"), PurePosixPath("/var/tmp")]
    hidden = []
    home = (svc.get("ProtectHome") or ["no"])[-1]
    if home in ("yes", "true", "read-only", "tmpfs"):
        hidden = [PurePosixPath(p) for p in ("/home", "/root", "/run/user")]
    hidden.append(PurePosixPath(SYSTEM_HOME))  # does not exist: nothing can be made under it
    return writable, hidden


WRITTEN = """
import json, os, sys
from pathlib import Path
from ldptel.aggregator.keyring import keys_dir
from ldptel.campaigns.config import load_config
from ldptel.privacy import plan_cache
from ldptel.privacy.modes import is_shuffled

command, config = sys.argv[1].removeprefix("command="), load_config(sys.argv[2])
paths = {"privacy plan cache": str(plan_cache.cache_path())}
if os.environ.get("NUMBA_CACHE_DIR"):
    paths["numba cache"] = os.environ["NUMBA_CACHE_DIR"]
if command == "aggregate" and any(is_shuffled(c) for c in config.campaigns):
    paths["analyzer keys"] = str(keys_dir(config.analyzer))
print(json.dumps(paths))
"""


def written_paths(unit: Path, env: dict[str, str]) -> dict[str, str]:
    """What ldptel writes when run by ``unit`` with ``env`` (its own functions, in a subprocess)."""
    exec_start = service_section(unit)["ExecStart"][0].split()
    command = exec_start[1]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LDPTEL_", "XDG_", "NUMBA_"))}
    out = subprocess.run([sys.executable, "-c", WRITTEN, f"command={command}", str(EXAMPLE)],
                         capture_output=True, text=True, env={**clean, **env}, check=True, timeout=60)
    return json.loads(out.stdout)


def under(path: PurePosixPath, roots: list[PurePosixPath]) -> bool:
    return any(path == r or r in path.parents for r in roots)


@pytest.mark.parametrize("unit", [u for u in UNITS if "ldptel serve" in u.read_text() or "/ldptel " in
                                  u.read_text()], ids=lambda u: u.name)
def test_every_path_a_unit_writes_is_writable_in_its_sandbox(unit: Path) -> None:
    svc = service_section(unit)
    env = environment(svc)
    writable, hidden = writable_roots(svc)
    paths = written_paths(unit, env)
    if "aggregate" in unit.name:
        assert "analyzer keys" in paths  # the example config has a shuffled campaign
    for what, path in paths.items():
        p = PurePosixPath(path)
        assert p.is_absolute(), f"{unit.name}: {what} at a relative path {path}"
        assert not under(p, hidden), f"{unit.name}: {what} in {path}, hidden by ProtectHome or no home"
        assert under(p, writable), (f"{unit.name}: {what} in {path}, read-only under ProtectSystem="
                                    f"{svc.get('ProtectSystem')} (writable: {[str(w) for w in writable]})")
    if "aggregate" in unit.name:  # the keys are state (StateDirectory), kept by backups
        assert PurePosixPath(paths["analyzer keys"]).is_relative_to("/var/lib")


def test_the_redis_unit_writes_in_its_state_directory() -> None:
    svc = service_section(DEPLOY / "ldptel-redis.service")
    writable, _ = writable_roots(svc)
    [data] = re.findall(r"^dir\s+(\S+)", (DEPLOY / "redis.conf").read_text(), re.M)
    assert under(PurePosixPath(data), writable), data


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_systemd_analyze_verify(unit: Path) -> None:
    """``systemd-analyze verify``: nothing but the installed binary missing on this machine."""
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    problems = [ln for ln in (out.stdout + out.stderr).splitlines()
                if ln.strip() and "is not executable: No such file or directory" not in ln]
    assert not problems, problems


@pytest.mark.integration
def test_an_aggregator_that_cannot_write_its_keys_aggregates_the_local_campaigns(
        tmp_path: Path, redis_url: str, redis_client) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the keys directory should be")
    cfg_path = tmp_path / "ldptel.toml"
    write_config(cfg_path, [LOCAL, SHUFFLED], aggregator={"block_ms": 100})
    text = cfg_path.read_text() + f'\n[analyzer]\nkeys_dir = "{blocker / "keys"}"\n'
    cfg_path.write_text(text)
    config = load_config(cfg_path)
    local = config.campaign(LOCAL["name"])
    assert local is not None
    window = int(time.time() // local.window_seconds * local.window_seconds) if local.window_seconds else 0
    n = xadd_batches(redis_client, local, random_batches(local, 200, 50, seed=34), window=window)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
    proc = subprocess.Popen(aggregate_cmd(cfg_path, redis_url, once=False), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        counted = 0
        while time.monotonic() < deadline and proc.poll() is None:
            counted = load_accumulator(redis_client, local, window)[1]
            if counted >= n:
                break
            time.sleep(0.2)
        assert proc.poll() is None, f"the aggregator exited ({proc.returncode}): {proc.communicate()[1]}"
        assert counted == n
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "cannot write the analyzer keys" in err and SHUFFLED["name"] in err, err
    assert "Traceback" not in err, err
    # visible: the collector's /healthz says the shuffled campaign is failing, and stays 200
    collector = start_collector(tmp_path / "collector", text, redis_url)
    try:
        status, doc = request(collector.url, "GET", "/healthz")
    finally:
        collector.stop()
    assert status == 200, doc
    keys_component = doc["components"]["analyzer_keys"]  # type: ignore[index]
    assert keys_component["status"] == "failing" and keys_component["campaigns"] == [SHUFFLED["name"]]
