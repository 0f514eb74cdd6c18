"""Cards and decisions moved from the dashboard app into the domain without touching their tables:
a database migrated from the old schema, with rows in it, reads the same rows through the new models."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from operations.models import Authorization, Decision, Escalation

BEFORE = [("operations", "0008_rate_window"), ("escalations", "0006_notification_caps_and_repeated_refusals")]
AFTER = [("operations", "0009_move_cards_into_domain"), ("escalations", "0007_cards_moved_to_operations")]
T = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def _migrate(targets: list[tuple[str, str]]):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_rows_written_under_the_old_schema_read_through_the_domain_models(django_user_model):
    old = _migrate(BEFORE)
    User = old.get_model("auth", "User")
    user = User.objects.create(username="alice")
    profile = old.get_model("operations", "ProviderProfile").objects.create(
        slug="acme", name="ACME", status_url="https://acme.test/{job_id}", account="acme"
    )
    op = old.get_model("operations", "Operation").objects.create(
        id="op_01JMOVEDCARD0000000000000", provider=profile, account="acme", provider_job_id="j1",
        deadline_at=T, max_status_requests=3, max_transport_failures=3, created_at=T, updated_at=T,
    )  # fmt: skip
    esc = old.get_model("escalations", "Escalation").objects.create(
        operation=op, reason="deadline_exceeded", detail="the deadline passed", opened_at=T, assignee=user
    )
    auth = old.get_model("operations", "Authorization").objects.create(
        operation=op, number=2, kind="extension", granted_by=user, granted_by_label="user:alice", granted_at=T,
        escalation=esc, deadline_at=T, max_status_requests=7, max_transport_failures=3,
    )  # fmt: skip
    old.get_model("escalations", "Decision").objects.create(
        escalation=esc, operation=op, user=user, username="alice", decided_at=T, option="extend:15m:4",
        outcome="applied", authorization=auth, card_version=1,
    )  # fmt: skip
    ContentType = old.get_model("contenttypes", "ContentType")
    ContentType.objects.get_or_create(app_label="escalations", model="escalation")

    _migrate(AFTER)
    # The test database must end at the latest migrations for the tests after this one.
    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    card = Escalation.objects.select_related("operation", "assignee").get(pk=esc.pk)
    assert (card.operation.provider_job_id, card.assignee.username, card.reason) == ("j1", "alice", "deadline_exceeded")
    decision = Decision.objects.select_related("authorization__escalation").get()
    assert decision.option == "extend:15m:4" and decision.authorization.escalation.pk == esc.pk
    assert Authorization.objects.get(number=2).escalation == card
    assert Escalation._meta.db_table == "escalations_escalation" and Decision._meta.db_table == "escalations_decision"
    assert ContentType.objects.filter(app_label="operations", model="escalation").exists()


@pytest.mark.django_db(transaction=True)
def test_a_card_opened_before_the_cap_keeps_the_first_1000_characters_of_why_it_stopped():
    """Escalation.detail became varchar(1000) (issue 24 item 9): a longer one written before is cut
    with an ellipsis by the migration, which PostgreSQL would otherwise refuse."""
    old = _migrate([("operations", "0025_profile_backoff_multiplier_range")])
    profile = old.get_model("operations", "ProviderProfile").objects.create(
        slug="acme", name="ACME", status_url="https://acme.test/{job_id}", account="acme"
    )
    op = old.get_model("operations", "Operation").objects.create(
        id="op_01JLONGDETAIL000000000000", provider=profile, account="acme", provider_job_id="j1",
        deadline_at=T, max_status_requests=3, max_transport_failures=3, created_at=T, updated_at=T,
    )  # fmt: skip
    Card = old.get_model("operations", "Escalation")
    long = Card.objects.create(operation=op, reason="unknown_state", detail="x" * 10_000, opened_at=T)
    short = Card.objects.create(operation=op, reason="unknown_state", detail="y" * 1000, opened_at=T, state="decided")

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    assert Escalation.objects.get(pk=long.pk).detail == "x" * 999 + "…"
    assert Escalation.objects.get(pk=short.pk).detail == "y" * 1000
