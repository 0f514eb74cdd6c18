"""Typed readers for environment variables, used by settings.py only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit


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


def database_from_url(url: str, *, base_dir: Path) -> dict:
    """Django DATABASES entry from sqlite:///path or postgres://user:pass@host:port/name?opt=v."""
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
        options = dict(parse_qsl(parts.query))
        # No lock in pollerdash is meant to be held for long (the audit head, an account row):
        # fail a stuck wait after 10 s instead of piling every writer up behind it.
        options.setdefault("options", "-c lock_timeout=10s")
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "OPTIONS": options,
        }
    raise ValueError(f"DATABASE_URL: unsupported scheme {parts.scheme!r} (use sqlite:/// or postgres://)")


def drop_session_locks(conn: Any) -> None:
    """The psycopg pool's reset: a connection goes back into the pool holding no session advisory
    lock, so an export slot (escalations/export_slots.py) a request failed to free ends with it."""
    conn.execute("SELECT pg_advisory_unlock_all()")
    conn.rollback()  # idle again whatever its autocommit mode; unlocking is not undone by it
