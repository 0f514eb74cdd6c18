"""Plain SQL on the hot path (operations/infrastructure/fastsql.py): the same rows and errors as the ORM's."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import DataError, connection, transaction
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext

from operations.infrastructure import fastsql
from operations.models import Operation
from operations.polls.poll_inputs import load_for_polls

pytestmark = pytest.mark.django_db


def test_an_operation_loaded_from_a_plain_row_is_the_orms_with_the_cold_columns_deferred(
    make_operation: Callable[..., Operation],
) -> None:
    created = make_operation("job-1", metadata={"team": "search"})
    loaded = load_for_polls([created.pk])[created.pk]
    orm = Operation.objects.get(pk=created.pk)
    assert not loaded._state.adding and loaded._state.db == "default"
    assert "metadata" in loaded.get_deferred_fields()
    for field in Operation._meta.concrete_fields:
        if field.attname not in loaded.get_deferred_fields():
            assert getattr(loaded, field.attname) == getattr(orm, field.attname), field.attname
    # A deferred column is read from the database when asked for, as with only().
    assert loaded.metadata == {"team": "search"}
    # The instance saves as any other: an UPDATE of the row, not a new one.
    loaded.warnings = ["checked"]
    loaded.save(update_fields=["warnings"])
    assert Operation.objects.get(pk=created.pk).warnings == ["checked"]
    assert Operation.objects.count() == 1


def test_a_post_init_receiver_still_sees_instances_built_from_plain_rows(
    make_operation: Callable[..., Operation],
) -> None:
    created = make_operation("job-2")
    seen: list[str] = []

    def receiver(sender: type[Operation], instance: Operation, **kwargs: object) -> None:
        seen.append(instance.pk)

    post_init.connect(receiver, sender=Operation)
    try:
        load_for_polls([created.pk])
    finally:
        post_init.disconnect(receiver, sender=Operation)
    assert seen == [created.pk]


@pytest.mark.postgres
def test_a_refused_plain_statement_is_djangos_error_and_rolls_back(
    make_operation: Callable[..., Operation],
) -> None:
    # On PostgreSQL the hot statements bypass Django's cursor (fastsql.bound_cursor).
    created = make_operation("job-3")
    with pytest.raises(DataError), transaction.atomic():
        fastsql.execute(f"UPDATE {fastsql.table(Operation)} SET warnings = '[]' WHERE id = %s", [created.pk])
        fastsql.execute(f"UPDATE {fastsql.table(Operation)} SET account = %s WHERE id = %s", ["x" * 500, created.pk])
    assert Operation.objects.get(pk=created.pk).warnings == created.warnings


def test_plain_statements_are_seen_by_query_capture(make_operation: Callable[..., Operation]) -> None:
    created = make_operation("job-4")
    with CaptureQueriesContext(connection) as captured:
        load_for_polls([created.pk])
    # The operation's own query is counted (then the profile, read once per process and cached).
    assert f"{fastsql.table(Operation)} o" in captured.captured_queries[0]["sql"]


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.postgres
def test_the_agent_doors_reads_are_planned_once_per_connection_and_nothing_else_is(
    make_operation: Callable[..., Operation],
) -> None:
    # Every agent request runs the token check; prepared, PostgreSQL plans it once per
    # connection instead of on each request. A query repeated anywhere else is never prepared: a
    # generic plan kept for a "due before now" query could scan the table.
    from django.utils import timezone

    from operations.agents.identities import agent_authenticate, agent_token_issue
    from operations.api.selectors import token_operation
    from operations.models import AgentToken

    issued = agent_token_issue(name="prepared-agent")
    op = make_operation("job-prepared", agent=issued.agent)
    repeated = f"SELECT id, status FROM {fastsql.table(Operation)} WHERE id = %s"
    for _ in range(10):
        assert Operation.objects.filter(pk=op.pk).first() is not None
        assert fastsql.fetchone(repeated, [op.pk]) == (op.pk, op.status)
    for _ in range(3):
        assert agent_authenticate(token=issued.token) == issued.agent
        assert token_operation(token=issued.token, operation_id=op.pk) == (issued.agent, op)
    prepared = _prepared_statements()
    assert sum("token_sha256" in statement for statement in prepared) >= 2
    assert not any(statement.startswith("SELECT id, status") for statement in prepared)
    # The statement is planned once, not its answer kept: a revoked token is refused at once.
    AgentToken.objects.filter(agent=issued.agent).update(revoked_at=timezone.now())
    assert agent_authenticate(token=issued.token) is None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_prepared_read_survives_a_migration_that_changes_a_returned_columns_type() -> None:
    # A deploy migrates from another process while this one keeps its connection: the prepared
    # statement's result type changed under it. The read answers instead of failing until a restart.
    import psycopg

    params = connection.get_connection_params()
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("CREATE TABLE fastsql_prepared_probe (id integer PRIMARY KEY, name varchar(10))")
        try:
            other.execute("INSERT INTO fastsql_prepared_probe VALUES (1, 'before')")
            sql = "SELECT id, name FROM fastsql_prepared_probe WHERE id = %s"
            assert fastsql.fetchone(sql, [1], prepare=True) == (1, "before")
            assert fastsql.fetchone(sql, [1], prepare=True) == (1, "before")
            other.execute("ALTER TABLE fastsql_prepared_probe ALTER COLUMN name TYPE varchar(40)")
            other.execute("UPDATE fastsql_prepared_probe SET name = 'after the migration'")
            assert fastsql.fetchone(sql, [1], prepare=True) == (1, "after the migration")
        finally:
            other.execute("DROP TABLE fastsql_prepared_probe")
