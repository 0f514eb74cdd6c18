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
