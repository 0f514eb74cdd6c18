"""PostgreSQL protections: the audit tables (the archive ledger among them) refuse UPDATE, DELETE
and TRUNCATE - also for a superuser session that sets session_replication_role = replica - and the
health check says when the runtime role could drop those triggers."""

from __future__ import annotations

import uuid

import pytest
from django.db import DatabaseError, DataError, connection, transaction

from operations.audit import checkpoints
from operations.audit import entries as audit
from operations.audit.health import audit_protection_checks
from operations.models import AuditArchive, AuditEntry
from tests.audit.helpers import append_entries
from tests.support import T0

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

STATEMENTS = {
    "operations_auditentry": [
        "UPDATE operations_auditentry SET body = body || '\\x20'::bytea WHERE seq = 1",
        "UPDATE operations_auditentry SET operation_id = 'op_x'",
        "DELETE FROM operations_auditentry WHERE seq = 2",
        "UPDATE operations_auditentry SET seq = seq + 100",
        # A pending entry: as protected as an integrated one, but for its one assignment of seq.
        "UPDATE operations_auditentry SET body = body || '\x20'::bytea WHERE seq IS NULL",
        "UPDATE operations_auditentry SET seq = 99, operation_id = 'op_x' WHERE seq IS NULL",
        "DELETE FROM operations_auditentry WHERE seq IS NULL",
        "TRUNCATE operations_auditentry",
        "TRUNCATE operations_auditentry CASCADE",
    ],
    "operations_audittreenode": [
        "UPDATE operations_audittreenode SET hash = hash || hash",
        "DELETE FROM operations_audittreenode",
        "TRUNCATE operations_audittreenode",
    ],
    "operations_auditarchive": [
        "UPDATE operations_auditarchive SET last_seq = last_seq + 1",
        "DELETE FROM operations_auditarchive",
        "TRUNCATE operations_auditarchive",
    ],
    "operations_auditcheckpoint": [
        "UPDATE operations_auditcheckpoint SET size = size + 1",
        "DELETE FROM operations_auditcheckpoint",
        "TRUNCATE operations_auditcheckpoint CASCADE",  # cosignatures reference it
    ],
}


@pytest.fixture
def audit_rows(signing_key: object, clock: object) -> None:
    append_entries(3)
    checkpoints.sign_checkpoint()
    append_entries(1, start=4)  # pending
    # A ledger row (the owner may add one; row triggers fire only for rows there are).
    AuditArchive.objects.create(
        log="pollerdash/audit", first_seq=1, last_seq=2, name="a.jsonl", sha256="0" * 64, size_bytes=0,
        root="0" * 64, archived_at=T0,
    )  # fmt: skip


def refused(statement: str, *, replica: bool) -> bool:
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            if replica:
                cursor.execute("SET LOCAL session_replication_role = replica")
            cursor.execute(statement)
    except DatabaseError as exc:
        return "append-only" in str(exc)
    return False


@pytest.mark.parametrize("replica", [False, True], ids=["origin", "replica"])
@pytest.mark.parametrize(
    "statement", [s for table in STATEMENTS.values() for s in table], ids=lambda s: " ".join(s.split()[:2])
)
def test_changes_to_the_audit_tables_are_refused(audit_rows, statement, replica):
    assert refused(statement, replica=replica)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), count(seq) FROM operations_auditentry")
        assert cursor.fetchone() == (4, 3)
        cursor.execute("SELECT count(*), max(size) FROM operations_auditcheckpoint")
        assert cursor.fetchone() == (2, 3)


def test_inserts_and_the_one_assignment_of_seq_still_work_under_the_triggers(audit_rows):
    append_entries(1, start=5)
    assert checkpoints.sign_checkpoint().size == 5


def names(checks: list) -> dict[str, tuple[bool, str]]:
    return {check.name: (check.ok, check.message) for check in checks}


def test_health_warns_about_a_superuser_runtime_role(audit_rows):
    checks = names(audit_protection_checks())
    assert checks["append-only triggers"][0] is True
    ok, message = checks["operations_auditentry owner"]
    assert ok is False and "superuser" in message


def test_health_warns_when_the_runtime_role_owns_the_tables_and_not_otherwise(audit_rows):
    role = f"pd_audit_{uuid.uuid4().hex[:10]}"
    with connection.cursor() as cursor:
        # Roles and ownership changes are transactional: the test's rollback undoes them.
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")
        cursor.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        cursor.execute(f"SET LOCAL ROLE {role}")
        clean = names(audit_protection_checks())
        cursor.execute("RESET ROLE")
        cursor.execute(f"ALTER TABLE operations_auditentry OWNER TO {role}")
        cursor.execute(f"SET LOCAL ROLE {role}")
        owning = names(audit_protection_checks())
        cursor.execute("RESET ROLE")
    assert clean["operations_auditentry owner"][0] is True
    assert clean["operations_auditcheckpoint owner"][0] is True
    ok, message = owning["operations_auditentry owner"]
    assert ok is False and f"{role} owns operations_auditentry" in message


def test_health_notices_a_disabled_trigger(audit_rows):
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE operations_auditentry DISABLE TRIGGER operations_auditentry_no_change")
    ok, message = names(audit_protection_checks())["append-only triggers"]
    assert ok is False and "operations_auditentry_no_change" in message


def test_an_insert_the_database_refuses_is_djangos_error_and_the_decision_rolls_back(settings):
    # The entry's INSERT goes through psycopg's own cursor (fastsql.fetchall_bound): a refusal by
    # the database itself still arrives as Django's exception class, and nothing commits.
    settings.AUDIT_LOG_NAME = "x" * 201  # longer than the column: Python lets it through
    with pytest.raises(DataError), transaction.atomic():
        audit.append(entry_type="controller.decision", actor=audit.SYSTEM_CONTROLLER, operation_id=None, data={})
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_appends_commit_after_a_refused_insert_and_on_a_new_connection(settings):
    # fastsql keeps one psycopg cursor per connection: a statement the database refused must not
    # spoil the next append, and after Django reconnects the append must use the new connection.
    log = settings.AUDIT_LOG_NAME

    def decision() -> audit.Appended:
        return audit.append(entry_type="controller.decision", actor=audit.SYSTEM_CONTROLLER, operation_id=None, data={})

    settings.AUDIT_LOG_NAME = "x" * 201
    with pytest.raises(DataError), transaction.atomic():
        decision()
    settings.AUDIT_LOG_NAME = log
    with transaction.atomic():
        first = decision()
    connection.close()
    with transaction.atomic():
        second = decision()
    stored = dict(AuditEntry.objects.values_list("pk", "body"))
    assert stored == {first.pk: first.body, second.pk: second.body}


def test_health_notices_a_disabled_archive_ledger_guard(audit_rows):
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE operations_auditarchive DISABLE TRIGGER operations_auditarchive_owner_only")
    ok, message = names(audit_protection_checks())["append-only triggers"]
    assert ok is False and "operations_auditarchive_owner_only" in message
