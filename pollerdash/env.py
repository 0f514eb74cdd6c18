"""Typed readers for environment variables, used by settings.py only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

# psycopg prepares a statement once it has run this many times on a connection: never, in effect;
# `execute(..., prepare=True)` still prepares at once (psycopg/_preparing.py).
PREPARE_ONLY_WHEN_ASKED = 2**62


def env_str(name: str, default: str = "") -> str:
    # An empty value (NAME= in an env file) means "not set", not "set to nothing".
    return os.environ.get(name) or default


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_secret(name: str, default: str = "") -> str:
    """A secret from NAME, or from the file named by NAME_FILE (so it need not sit in the environment)."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get(name, default)


def database_from_url(url: str, *, base_dir: Path, pool_mode: str = "session") -> dict:
    """Django DATABASES entry from sqlite:///path or postgres://user:pass@host:port/name?opt=v.

    PostgreSQL may name several hosts, postgres://user@a:5432,b:5433/name?target_session_attrs=read-write:
    libpq tries them in order and keeps the first that accepts writes (a promoted replica after a
    failover). `pool_mode` is DATABASE_POOL_MODE: "transaction" behind PgBouncer's transaction
    pooling, where nothing may outlive a transaction (docs/deployment.md, "Topology")."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        raw_path = unquote(parts.path)
        # sqlite:///var/db.sqlite3 is relative to the project; sqlite:////abs/path is absolute.
        path = Path(raw_path[1:]) if raw_path.startswith("//") else Path(raw_path.lstrip("/"))
        if not path.is_absolute():
            path = base_dir / path
        path.parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(path),
            "OPTIONS": {
                # IMMEDIATE takes the write lock at BEGIN, so two writers queue behind the
                # busy timeout instead of failing with "database is locked" mid-transaction.
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
            },
            "TEST": {"NAME": str(path.with_name(f"test_{path.stem}.sqlite3"))},
        }
    if parts.scheme in {"postgres", "postgresql", "pgsql"}:
        return _postgres(url, parts.query, pool_mode=pool_mode)
    raise ValueError(f"DATABASE_URL: unsupported scheme {parts.scheme!r} (use sqlite:/// or postgres://)")


def _postgres(url: str, query: str, *, pool_mode: str) -> dict:
    # urlsplit refuses a netloc with several host:port pairs, so the netloc is split here.
    netloc, _, path = url.split("://", 1)[1].partition("/")
    credentials, _, hosts = netloc.rpartition("@")
    user, _, password = credentials.partition(":")
    names, ports = [], []
    for host in hosts.split(","):
        # [::1]:5432, 127.0.0.1:5432 or a bare name
        name, _, port = host.rpartition(":") if not host.endswith("]") and ":" in host else (host, "", "")
        names.append(name.strip("[]"))
        ports.append(port)
    options: dict[str, Any] = dict(parse_qsl(query))
    database: dict[str, Any] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(path.partition("?")[0]),
        "USER": unquote(user),
        "PASSWORD": unquote(password),
        "HOST": ",".join(names),
        # libpq: one port for every host, or one per host.
        "PORT": ",".join(port or "5432" for port in ports) if any(ports) else "",
        "OPTIONS": options,
    }
    if pool_mode == "transaction":
        # PgBouncer hands each transaction any server connection: a server-side prepared statement
        # (psycopg prepares a query run 5 times) or a WITH HOLD cursor (Django's .iterator() outside
        # a transaction) would be looked for on another connection. PgBouncer 1.18 also refuses the
        # `options` start-up parameter: lock_timeout is set on the role instead (a check says so).
        options["prepare_threshold"] = None
        database["DISABLE_SERVER_SIDE_CURSORS"] = True
    else:
        # No lock in pollerdash is meant to be held for long (the audit head, an account row):
        # fail a stuck wait after 10 s instead of piling every writer up behind it.
        options.setdefault("options", "-c lock_timeout=10s")
        # Prepared only where the code asks for it (fastsql.fetchone(prepare=True): the agent
        # door's reads on unique keys), never by psycopg's count of repeats: a repeated "due
        # before now" query could be kept on a generic plan that scans the table. Django's default,
        # None, would refuse every prepare.
        options.setdefault("prepare_threshold", PREPARE_ONLY_WHEN_ASKED)
    return database
