"""The Redis credentials file of the role users (``ldptel.store.acl``), written by ``ldptel redis-acl``
or by ``ldptel serve`` for its embedded Redis, read by every process that connects with a role
(``redis_client.connect(url, role=…)``).

Where: ``$LDPTEL_REDIS_CREDENTIALS``, else ``DEFAULT_NAME`` in the data directory
(``$LDPTEL_DATA_DIR``, default ``~/.local/share/ldptel``) if that file exists. Without a file a
process connects as the URL says (an unsecured development Redis keeps working).

Format (JSON, mode 0600): ``{"servers": ["host:port", …], "users": {role: {"username",
"password"}}}``. ``servers`` are the Redis servers (or cluster seed nodes) the users were created
on: a file is used only for a URL naming one of them, so credentials are never sent to another
Redis (a file named by the environment variable that does not fit the URL is an error).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ldptel.errors import CredentialsError

ENV = "LDPTEL_REDIS_CREDENTIALS"
DEFAULT_NAME = "redis-credentials.json"


@dataclass(frozen=True)
class Credentials:
    servers: tuple[str, ...]
    users: dict[str, tuple[str, str]]  # role → (username, password)
    path: Path

    def fits(self, url: str) -> bool:
        """Whether ``url`` names one of ``servers``."""
        return bool(set(servers_of(url)) & set(self.servers))


def data_dir() -> Path:
    return Path(os.environ.get("LDPTEL_DATA_DIR") or Path.home() / ".local" / "share" / "ldptel")


def default_path() -> Path:
    return data_dir() / DEFAULT_NAME


def embedded_data_dir(config_path: str | os.PathLike[str] | None) -> Path:
    """Where ``ldptel serve --config FILE`` keeps its embedded Redis: ``data_dir()`` plus
    ``redis-<config stem>-<hash of the resolved path>``, so a restarted ``serve`` of the same
    config finds its data again, and every command given ``--config FILE`` finds that Redis and
    its credentials (``DEFAULT_NAME`` in it)."""
    import hashlib

    cfg = Path(config_path).resolve() if config_path else Path("ldptel")
    digest = hashlib.sha256(str(cfg).encode()).hexdigest()[:10]
    return data_dir() / f"redis-{cfg.stem}-{digest}"


def embedded_files() -> list[Path]:
    """The credentials files of every embedded Redis under ``data_dir()``, newest first."""
    found = [p for p in data_dir().glob(f"redis-*/{DEFAULT_NAME}") if p.is_file()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def servers_of(url: str) -> list[str]:
    """The ``host:port`` of every server a URL names (cluster URLs: every seed; ``unix://``: the
    socket path)."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() == "unix":
        return [urlsplit(url).path]
    netloc = rest.split("/", 1)[0].rpartition("@")[2]
    out = []
    for part in netloc.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host:
            host, port = part.strip(), "6379"
        out.append(f"{host.strip('[]').lower()}:{port or 6379}")
    return out


def load(path: str | os.PathLike[str]) -> Credentials:
    """Read a credentials file (``CredentialsError`` naming the file if it is unreadable)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
        users = {role: (str(u["username"]), str(u["password"])) for role, u in doc["users"].items()}
        return Credentials(tuple(doc["servers"]), users, p)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CredentialsError(f"Redis credentials file {p}: {exc}") from None


def write(path: str | os.PathLike[str], servers: list[str], users: dict[str, tuple[str, str]]) -> Path:
    """Write the file with mode 0600 (created so, never readable by others in between)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"servers": servers, "users": {role: {"username": u, "password": pw}
                                                 for role, (u, pw) in users.items()}}, fh, indent=2)
    os.chmod(tmp, 0o600)
    os.replace(tmp, p)
    return p


def find(url: str) -> Credentials | None:
    """The credentials for ``url``: the file of ``$LDPTEL_REDIS_CREDENTIALS`` (which must exist
    and fit the URL), else the default file if it exists and fits, else None."""
    named = os.environ.get(ENV)
    if named:
        creds = load(named)
        if not creds.fits(url):
            raise CredentialsError(f"Redis credentials file {named} ({ENV}) was made for "
                                   f"{', '.join(creds.servers)}, not for {', '.join(servers_of(url))}")
        return creds
    path = default_path()
    if path.exists():
        creds = load(path)
        if creds.fits(url):
            return creds
    return None


def user_for(url: str, role: str) -> tuple[str, str] | None:
    """(username, password) of ``role`` for ``url``, or None when no credentials apply."""
    creds = find(url)
    if creds is None:
        return None
    if role not in creds.users:
        raise CredentialsError(f"Redis credentials file {creds.path} has no user for the role {role!r}")
    return creds.users[role]
