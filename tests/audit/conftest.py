"""Fixtures for the audit log tests: a real signing key, real appends, real exports.

`sample_export` builds an export the way production does (append, sign on a clock, export) so
the tamper tests start from genuine bytes (format 2, test_audit_tree_verifier.py):

    header, cp(0, the switch), e1..e4, cp(4), e5..e8, consistency(4, 8), cp(8),
    e9..e11, consistency(8, 11), cp(11, the closing checkpoint)

with the checkpoints a minute apart on the injected clock (the last one at T0 + 4 min).

`app_role` (PostgreSQL) is the application role of docs/deployment.md, with exactly its grants, for
attacks run as what every pollerdash process runs as: `app_role.run(sql)` for one statement,
`app_role.script(*sql)` for several in one transaction, `with app_role.session():` for application
code.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import DatabaseError, connection, transaction

from operations.audit import checkpoints
from operations.audit import verify as av
from operations.audit.export import stream_export
from tests.audit.helpers import OP_A, OP_B, Sample, append_entries
from tests.support import T0


@pytest.fixture
def signing_key(tmp_path: Path, settings: object) -> av.VerifierKey:
    path = tmp_path / "audit-signing-key.pem"
    key = checkpoints.generate_key_file(path)
    settings.AUDIT_SIGNING_KEY_FILE = str(path)
    settings.AUDIT_VERIFIER_KEYS_FILE = ""
    settings.AUDIT_LOG_NAME = "pollerdash/audit"
    return key


@pytest.fixture
def keys_file(tmp_path: Path, signing_key: av.VerifierKey) -> Path:
    path = tmp_path / "pollerdash-audit.keys"
    path.write_text(f"# pollerdash audit verifier keys\n{signing_key.line}\n")
    return path


@pytest.fixture
def sample_export(db: None, clock: object, signing_key: av.VerifierKey) -> Sample:
    append_entries(4, operation_id=OP_A)
    clock.move_to(T0 + timedelta(seconds=1), tick=False)
    checkpoints.sign_checkpoint()
    clock.move_to(T0 + timedelta(seconds=61), tick=False)
    append_entries(2, operation_id=OP_B, start=5)
    append_entries(2, operation_id=OP_A, start=7)
    checkpoints.sign_checkpoint()
    clock.move_to(T0 + timedelta(seconds=121), tick=False)
    checkpoints.sign_checkpoint()  # an empty minute: same size, newer time
    clock.move_to(T0 + timedelta(seconds=181), tick=False)
    append_entries(3, operation_id=OP_B, start=9)
    clock.move_to(T0 + timedelta(seconds=241), tick=False)
    data = b"".join(stream_export())
    return Sample(data=data, closed_at=T0 + timedelta(seconds=241), key=signing_key)


@pytest.fixture
def verify(tmp_path: Path, keys_file: Path) -> Callable[..., tuple[int, dict]]:
    """Run the verifier's command line on bytes: (exit status, the JSON it prints)."""
    counter = iter(range(1_000_000))

    def run(data: bytes, *args: str, keys: Path | None = None) -> tuple[int, dict]:
        path = tmp_path / f"export-{next(counter)}.jsonl"
        path.write_bytes(data)
        return av.run([str(path), "--keys", str(keys or keys_file), *args])

    return run


@dataclass
class AppRole:
    """A PostgreSQL role with exactly the deployment guide's grants ("Database roles"): it neither owns the
    audit tables nor is a superuser, as every pollerdash process runs in production."""

    name: str

    def run(self, sql: str, params: Sequence[object] | None = None) -> str:
        """One statement as this role, in a savepoint: "allowed", or the database's refusal."""
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL ROLE {self.name}")
                cursor.execute(sql, params)
                cursor.execute("RESET ROLE")
        except DatabaseError as exc:
            return str(exc)
        return "allowed"

    def script(self, *statements: str) -> str:
        """Several statements as this role in one transaction (a savepoint), as an attacker sends
        them: "allowed", or the database's refusal of the first one refused."""
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL ROLE {self.name}")
                for statement in statements:
                    cursor.execute(statement)
                cursor.execute("RESET ROLE")
        except DatabaseError as exc:
            return str(exc)
        return "allowed"

    @contextmanager
    def session(self) -> Iterator[None]:
        """Application code (Python) run as this role; the test's own role again afterwards."""
        with connection.cursor() as cursor:
            cursor.execute(f"SET ROLE {self.name}")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET ROLE")


@pytest.fixture
def app_role(db: None) -> AppRole:
    """The application role of docs/deployment.md, created inside the test's transaction (roles are
    transactional in PostgreSQL: the test's rollback drops it again). PostgreSQL only."""
    if connection.vendor != "postgresql":
        pytest.skip("database roles are PostgreSQL's")
    role = AppRole(f"pd_app_{uuid.uuid4().hex[:10]}")
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role.name} NOLOGIN")
        for grant in DEPLOYMENT_GRANTS:
            cursor.execute(grant.format(role=role.name))
    return role


# docs/deployment.md, "Database roles": what the application role is given, word for word (a test
# holds the guide to it). The database-wide revokes are not applied here: the attacks run with
# PostgreSQL's defaults, which the functions must withstand whatever the grants.
DEPLOYMENT_GRANTS = (
    "GRANT USAGE ON SCHEMA public TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}",
)
DEPLOYMENT_REVOKES = (
    "REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC",
    "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
)
