"""Dashboard pages run a fixed number of SQL queries, whatever the number of rows (<= 15)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from operations.decisions.services import escalation_decide
from operations.lifecycle.cards import open_card
from operations.models import Decision, Operation, StatusCheck
from operations.vocabulary import Reason, Status
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db
MAX_QUERIES = 15


@pytest.fixture
def responder() -> object:
    user = get_user_model().objects.create_user(username="rita", password="x")
    user.groups.add(Group.objects.get_or_create(name="responder")[0])
    return user


def seed(make_operation, user, count: int, start: int = 0) -> Operation:
    """`count` operations stopped for a human, each with status checks and decisions on its card."""
    last = None
    for index in range(start, start + count):
        op = make_operation(f"never_finishes__id=q{index}", purpose=f"export {index}")
        now = timezone.now()
        StatusCheck.objects.bulk_create(
            StatusCheck(
                operation=op,
                account=op.account,
                fence=n,
                started_at=now + timedelta(seconds=n),
                sent_at=now + timedelta(seconds=n),
                received_at=now + timedelta(seconds=n),
                http_status=200,
                provider_state="running",
                decision="wait",
                delay_source="local_backoff",
            )
            for n in range(3)
        )
        with transaction.atomic():
            Operation.objects.filter(pk=op.pk).update(status=Status.NEEDS_ATTENTION, status_requests_used=3)
            op.refresh_from_db()
            esc = open_card(operation=op, reason=Reason.DEADLINE_EXCEEDED, detail="the deadline passed", context={})
        escalation_decide(
            sign_in=signed_in_now(), escalation_id=esc.pk, user=user, option_id="inspect", card_version=esc.version
        )
        escalation_decide(
            sign_in=signed_in_now(),
            escalation_id=esc.pk,
            user=user,
            option_id="extend:600m:1",
            card_version=esc.version,
        )
        last = op
    assert last is not None
    return last


def queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured.captured_queries)


@pytest.mark.parametrize("name", ["inbox", "operation_list", "operation_detail", "decision_history"])
def test_each_page_runs_the_same_few_queries_with_more_rows(
    name,
    make_operation,
    responder,
    django_assert_max_num_queries,
) -> None:
    client = Client()
    client.force_login(responder)
    op = seed(make_operation, responder, 2)
    url = reverse(name, args=[op.pk]) if name == "operation_detail" else reverse(name)
    small = queries(client, url)
    op = seed(make_operation, responder, 10, start=2)
    url = reverse(name, args=[op.pk]) if name == "operation_detail" else reverse(name)
    with django_assert_max_num_queries(MAX_QUERIES):
        response = client.get(url)
    assert response.status_code == 200
    assert queries(client, url) == small, small
    assert Decision.objects.count() == 24


def open_cards(make_operation, count: int, *, start: int, reason: Reason = Reason.DEADLINE_EXCEEDED) -> list:
    """`count` open cards of one provider account and reason: one group."""
    cards = []
    for index in range(start, start + count):
        op = make_operation(f"never_finishes__id=g{index}", purpose=f"grouped export {index}")
        with transaction.atomic():
            Operation.objects.filter(pk=op.pk).update(status=Status.NEEDS_ATTENTION)
            op.refresh_from_db()
            cards.append(open_card(operation=op, reason=reason, detail="the deadline passed", context={}))
    return cards


def test_the_inbox_with_groups_and_a_group_page_run_the_same_few_queries(make_operation, responder) -> None:
    from operations.decisions import ownership

    client = Client()
    client.force_login(responder)
    cards = open_cards(make_operation, 3, start=0)
    open_cards(make_operation, 1, start=100, reason=Reason.PROVIDER_FAILURE)
    ownership.card_acknowledge(escalation_id=cards[0].pk, user=responder)
    urls = [reverse("inbox"), reverse("inbox") + "?mine=1", reverse("card_group", args=[cards[0].group_id])]
    small = [queries(client, url) for url in urls]
    cards += open_cards(make_operation, 12, start=3)
    open_cards(make_operation, 1, start=101, reason=Reason.RATE_LIMITED)
    ownership.card_acknowledge(escalation_id=cards[5].pk, user=responder)
    ownership.card_note(escalation_id=cards[6].pk, user=responder, text="on it")
    for url, before in zip(urls, small, strict=True):
        assert queries(client, url) == before <= MAX_QUERIES, url
