"""Shared set-up for benchmarks: a scratch PostgreSQL database and the fake provider process.

Benchmarks are not tests: they print figures. Each uses its own database so it never touches a
developer's data or a test run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def django_on_scratch_postgres(name: str, *, reuse: bool = False, query: str = "") -> str:
    """Point Django at a fresh database NAME on the local PostgreSQL, migrated. Returns the URL.
    With `reuse`, an existing NAME (kept by an earlier run) is used as it is. `query` is the URL's
    query string (a multi-host server's `target_session_attrs=read-write`)."""
    import psycopg

    base = os.environ.get("BENCH_PG", "postgres://root@127.0.0.1:5432")
    tail = f"?{query}" if query else ""
    with psycopg.connect(f"{base}/postgres{tail}", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not (reuse and exists):
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{base}/{name}{tail}"
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pollerdash.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


def drop_scratch_database(name: str) -> None:
    """Drop a database made by django_on_scratch_postgres (a large benchmark's can take gigabytes)."""
    import psycopg
    from django.db import connections

    connections.close_all()
    base = os.environ.get("BENCH_PG", "postgres://root@127.0.0.1:5432")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_fake_provider(*, log: Path | None = None) -> tuple[subprocess.Popen, str]:
    """The fake provider in its own process, as in production (it does not share our GIL); its
    output goes to `log` when given."""
    port = free_port()
    with open(log or os.devnull, "ab") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "demo.fakeprovider", "--port", str(port)],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                allow_local_provider(url)
                return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("fake provider did not start")


def allow_local_provider(url: str) -> None:
    """The benchmarks' profiles have no credential, and a profile without one reaches only public https
    addresses unless its origin is listed (docs/DESIGN.md section 2): list the fake provider, here
    and for the processes started after this."""
    os.environ["PROVIDER_ALLOWED_ORIGINS"] = url
    from django.conf import settings

    if settings.configured:
        settings.PROVIDER_ALLOWED_ORIGINS = [url]


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]
