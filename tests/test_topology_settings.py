"""DATABASE_URL for the production topology: several hosts for a failover, PgBouncer's transaction
pooling (docs/deployment.md, "Topology"). Settings are read at start-up, so the refusals run in a
fresh interpreter, as a process would start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pollerdash.env import PREPARE_ONLY_WHEN_ASKED, database_from_url

ROOT = Path(__file__).resolve().parents[1]


def test_a_multi_host_url_reaches_libpq_as_host_and_port_lists() -> None:
    url = "postgres://app:s%40cret@db-a:5432,db-b:5433/pollerdash?target_session_attrs=read-write"
    db = database_from_url(url, base_dir=ROOT)
    assert (db["HOST"], db["PORT"], db["NAME"], db["USER"], db["PASSWORD"]) == (
        "db-a,db-b",
        "5432,5433",
        "pollerdash",
        "app",
        "s@cret",
    )
    assert db["OPTIONS"]["target_session_attrs"] == "read-write"
    # One port for both, or none at all (libpq's 5432).
    assert database_from_url("postgres://app@a,b/x", base_dir=ROOT)["PORT"] == ""
    assert database_from_url("postgres://app@[::1]:6432/x", base_dir=ROOT)["HOST"] == "::1"


def test_a_direct_url_keeps_its_lock_timeout_and_server_side_cursors() -> None:
    db = database_from_url("postgres://root@127.0.0.1:5432/x", base_dir=ROOT)
    # Prepared statements only where the code asks (fastsql.fetchone(prepare=True)).
    assert db["OPTIONS"] == {"options": "-c lock_timeout=10s", "prepare_threshold": PREPARE_ONLY_WHEN_ASKED}
    assert "DISABLE_SERVER_SIDE_CURSORS" not in db


def test_transaction_pooling_sends_nothing_that_outlives_a_transaction() -> None:
    db = database_from_url("postgres://root@127.0.0.1:6432/x", base_dir=ROOT, pool_mode="transaction")
    # No session start-up option, no server-side prepared statement, no WITH HOLD cursor.
    assert db["OPTIONS"] == {"prepare_threshold": None}
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is True


def _check(**env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "SECRET_KEY": "t", **env}
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=full, capture_output=True, text=True, timeout=120
    )


def test_a_session_option_behind_transaction_pooling_is_refused_at_start_up_by_name() -> None:
    done = _check(
        DATABASE_URL="postgres://root@127.0.0.1:1/x?options=-c%20statement_timeout%3D5s",
        DATABASE_POOL_MODE="transaction",
    )
    assert done.returncode != 0
    assert "pollerdash.E210" in done.stderr and "statement_timeout" in done.stderr
    assert "ALTER ROLE" in done.stderr


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"DATABASE_POOL_MODE": "statement"}, "DATABASE_POOL_MODE='statement': use session or transaction"),
        ({"DATABASE_POOL_MODE": "transaction", "DATABASE_URL": "sqlite:///var/x.sqlite3"}, "not SQLite"),
    ],
)
def test_a_pool_mode_pollerdash_cannot_honour_stops_the_process(env: dict[str, str], said: str) -> None:
    done = _check(**env)
    assert done.returncode != 0 and said in done.stderr
