"""The business deadline asks a human (issue 17): no request after it unless a person allowed it, a card
with "keep waiting", and an early warning to on-call. Real controller, real fake provider, injected clock."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from escalations import tasks
from escalations.chart.requests import request_chart
from escalations.chart.svg import render_svg
from operations.audit.story import operation_story
from operations.decisions.services import escalation_decide
from operations.models import (
    AuditEntry,
    Authorization,
    Decision,
    Escalation,
    NotificationDelivery,
    Operation,
    StatusCheck,
)
from operations.polls import dispatch
from operations.polls.controller import poll_once
from operations.vocabulary import Reason, Status
from tests.support import T0, job_id, signed_in_now

pytestmark = pytest.mark.django_db

BUSINESS = T0 + timedelta(minutes=2)
DEADLINE = T0 + timedelta(minutes=10)


def queued() -> list[tuple[str, tuple]]:
    """The django-q2 tasks waiting in the queue, as (function, arguments)."""
    tasks_ = [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]
    return [(task["func"], task["args"]) for task in tasks_]


def reload(obj):
    return type(obj).objects.get(pk=obj.pk)


def sent_at(fake_provider, op: Operation) -> list[datetime]:
    return [
        datetime.fromtimestamp(r["at"], tz=timezone.get_current_timezone())
        for r in fake_provider.requests(job_id=op.provider_job_id)
        if r["kind"] == "status"
    ]


def decide(esc: Escalation, user: object, option: str, comment: str = ""):
    return escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=user,
        option_id=option,
        card_version=reload(esc).version,
        comment=comment,
    )


@pytest.fixture
def watched(make_operation, clock):
    """A job that never finishes, whose result stops being useful 2 min in (the technical deadline is at 10)."""

    def make(scenario: str = "never_finishes", **kwargs: object) -> Operation:
        kwargs.setdefault("deadline_at", DEADLINE)
        kwargs.setdefault("business_deadline_at", BUSINESS)
        kwargs.setdefault("max_status_requests", 100)
        return make_operation(job_id(scenario, **kwargs.pop("params", {})), **kwargs)

    return make


def test_a_job_pending_past_its_business_deadline_gets_no_request_after_it_and_opens_a_card(
    watched, drive, fake_provider
):
    op = watched()
    drive(op)

    op = reload(op)
    card = Escalation.objects.get(operation=op, state="open")
    assert op.status == Status.NEEDS_ATTENTION and card.reason == Reason.BUSINESS_DEADLINE_PASSED
    sent = sent_at(fake_provider, op)
    assert sent and all(moment < BUSINESS for moment in sent)
    assert len(sent) == op.status_requests_used == StatusCheck.objects.filter(operation=op).count()
    # Stopped at the first wake-up after it, not at the technical deadline or the budget.
    assert BUSINESS <= card.opened_at < BUSINESS + timedelta(seconds=op.provider.max_delay_s)
    assert "business deadline 2026-12-01 10:02:00 UTC passed before the job finished" in card.detail
    assert "no request was sent after it" in card.detail
    assert op.status_requests_used < op.max_status_requests and card.opened_at < op.deadline_at


def test_keep_waiting_resumes_polling_within_the_original_bounds_and_is_recorded(
    watched, drive, alice, fake_provider, clock
):
    op = watched()
    drive(op)
    card = Escalation.objects.get(operation=op, state="open")
    before = reload(op)
    sent_before = len(sent_at(fake_provider, op))

    result = decide(card, alice, "keep_waiting", comment="the release slipped, still useful")

    op = reload(op)
    assert result.outcome == Decision.Outcome.APPLIED and result.decision.user == alice
    assert result.decision.comment == "the release slipped, still useful"
    assert op.status == Status.RUNNING and op.next_poll_at == timezone.now()
    # No new authority: the bounds stay as they were, and no Authorization is added.
    assert (op.deadline_at, op.max_status_requests) == (before.deadline_at, before.max_status_requests)
    assert Authorization.objects.filter(operation=op).count() == 1
    assert op.business_deadline_waived_at == timezone.now()
    [entry] = [
        json.loads(bytes(body))
        for body in AuditEntry.objects.filter(operation_id=op.pk, type="human.decision").values_list("body", flat=True)
    ]
    assert entry["actor"] == {"kind": "user", "id": "alice"}
    assert entry["data"]["option"] == "keep_waiting" and entry["data"]["new_deadline"] is None

    drive(op, max_polls=200)
    op = reload(op)
    after = sent_at(fake_provider, op)[sent_before:]
    assert after and all(moment < op.deadline_at for moment in after)
    # Polling ran on to the technical deadline; the business deadline asked once, not again.
    reasons = list(Escalation.objects.filter(operation=op).order_by("opened_at").values_list("reason", flat=True))
    assert reasons == [Reason.BUSINESS_DEADLINE_PASSED, Reason.DEADLINE_EXCEEDED]
    story = [line.text for line in operation_story(operation_id=op.pk)]
    assert any("escalated: business deadline passed" in text for text in story)
    assert "alice chose to keep waiting past the business deadline, within the operation's own bounds" in " ".join(
        story
    )


def test_a_job_that_finishes_before_its_business_deadline_is_untouched(watched, drive):
    op = watched("slow_success", params={"polls": 2})
    drive(op)
    op = reload(op)
    assert op.status == Status.SUCCEEDED and not Escalation.objects.filter(operation=op).exists()
    assert op.business_deadline_waived_at is None


def test_a_business_deadline_after_the_technical_deadline_stays_informational(watched, drive):
    op = watched(deadline_at=T0 + timedelta(minutes=1), business_deadline_at=T0 + timedelta(minutes=5))
    drive(op)
    assert Escalation.objects.get(operation=op).reason == Reason.DEADLINE_EXCEEDED


def test_the_dispatchers_sweep_catches_a_business_deadline_while_no_poll_is_due(watched, clock, fake_provider):
    # The provider asked for an hour: the next poll is long after the business deadline.
    op = watched("retry_after_seconds", params={"value": 3600})
    dispatch.claim_due(owner="test", now=T0)
    current = reload(op)
    poll_once(operation_id=op.pk, fence=current.fence)
    assert reload(op).next_poll_at > BUSINESS
    assert dispatch.sweep_deadlines(now=BUSINESS - timedelta(seconds=1)) == 0
    clock.move_to(BUSINESS, tick=False)
    assert dispatch.run_pass(owner="test", now=BUSINESS).swept == 1
    card = Escalation.objects.get(operation=op)
    assert card.reason == Reason.BUSINESS_DEADLINE_PASSED and "no request was sent after it" in card.detail
    assert len(sent_at(fake_provider, op)) == 1


def test_an_extension_before_the_business_deadline_leaves_it_in_force_one_after_it_waives_it(
    watched, drive, alice, clock
):
    # The budget runs out before the business deadline; the extension's window reaches past it.
    op = watched(max_status_requests=2, business_deadline_at=T0 + timedelta(minutes=5))
    drive(op)
    card = Escalation.objects.get(operation=op, state="open")
    assert card.reason == Reason.REQUEST_BUDGET_EXHAUSTED
    option = next(o for o in card_options(card) if o["id"] == "extend:15m:4")
    assert "polling stops at the business deadline 10:05 UTC for a person to decide" in option["effect"]
    decide(card, alice, "extend:15m:4")
    drive(op)
    card = Escalation.objects.get(operation=op, state="open")
    assert card.reason == Reason.BUSINESS_DEADLINE_PASSED
    # Decided at or after the business deadline, an extension is a person's word to poll past it.
    decide(card, alice, "extend:15m:4")
    op = reload(op)
    assert op.business_deadline_waived_at == timezone.now() and op.status == Status.RUNNING
    drive(op)
    reasons = list(Escalation.objects.filter(operation=op).order_by("opened_at").values_list("reason", flat=True))
    assert reasons.count(Reason.BUSINESS_DEADLINE_PASSED) == 1


def card_options(card: Escalation) -> list[dict]:
    from operations.cards.card import load_card

    op = Operation.objects.select_related("provider").get(pk=card.operation_id)
    return [option.as_dict() for option in load_card(escalation=card, operation=op, now=timezone.now()).options]


@pytest.fixture
def notify(settings):
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    settings.NOTIFY_WEBHOOK_URL = ""
    settings.SITE_URL = "https://pollerdash.example.test"


def test_the_early_warning_is_sent_once_while_the_job_still_runs(watched, make_profile, clock, notify, pump):
    profile = make_profile(business_deadline_warning_s=60)
    op = watched(provider=profile)
    assert dispatch.warn_business_deadlines(now=BUSINESS - timedelta(seconds=61)) == 0
    assert dispatch.warn_business_deadlines(now=BUSINESS - timedelta(seconds=60)) == 1
    # Recorded on the operation: the next passes (any dispatcher) do not warn again.
    assert dispatch.warn_business_deadlines(now=BUSINESS - timedelta(seconds=30)) == 0
    assert reload(op).business_deadline_warned_at == BUSINESS - timedelta(seconds=60)
    # One outbox row per recipient, written with the warning, sent by a worker like every message.
    [row] = NotificationDelivery.objects.filter(operation=op)
    assert (row.event, row.channel, row.address, row.escalation_id) == (
        "business_deadline_near",
        "email",
        "oncall@example.test",
        None,
    )

    clock.move_to(BUSINESS - timedelta(seconds=60), tick=False)
    assert pump() == ["sent"]
    [message] = mail.outbox
    assert message.subject == f"[pollerdash] Business deadline in 1 min: {op.provider.slug} ({op.pk})"
    assert f"https://pollerdash.example.test/operations/{op.pk}/" in message.body
    assert "Nothing to decide now" in message.body and "2026-12-01 10:02 UTC" in message.body
    # A notification, not a card: polling carries on.
    assert not Escalation.objects.filter(operation=op).exists() and reload(op).status in ("pending", "running")
    story = [line.text for line in operation_story(operation_id=op.pk)]
    assert "business deadline 10:02:00 UTC is near and the job is still running: on-call warned" in story


def test_no_warning_without_the_profile_key_or_once_the_job_is_done(watched, make_profile, drive, notify):
    assert watched() and dispatch.warn_business_deadlines(now=BUSINESS - timedelta(seconds=5)) == 0
    profile = make_profile(business_deadline_warning_s=600)
    done = watched("slow_success", params={"polls": 0}, provider=profile)
    drive(done)
    assert reload(done).status == Status.SUCCEEDED
    assert dispatch.warn_business_deadlines(now=BUSINESS - timedelta(seconds=5)) == 0
    assert queued() == [] and not NotificationDelivery.objects.exists()


def test_a_queued_warning_for_a_job_that_ended_meanwhile_is_not_sent(watched, make_profile, notify, drive, pump):
    profile = make_profile(business_deadline_warning_s=600)
    op = watched("slow_success", params={"polls": 0}, provider=profile)
    assert dispatch.warn_business_deadlines(now=T0) == 1
    drive(op)
    assert pump() == ["skipped"]
    assert mail.outbox == []
    row = NotificationDelivery.objects.get(operation=op)
    assert (row.state, row.detail) == ("skipped", "the operation is no longer being watched")


def test_a_warning_queued_by_the_version_before_becomes_a_message_like_the_others(
    watched, make_profile, notify, pump, clock
):
    """A task the previous version queued (it sent the message from the task itself) still in the
    queue during an upgrade: it writes the outbox rows, and a worker sends them."""
    profile = make_profile(business_deadline_warning_s=600)
    op = watched(provider=profile)
    assert tasks.notify_business_deadline(op.pk) == "queued: 1 message(s)"
    assert tasks.notify_business_deadline("op_01ARZ3NDEKTSV4RRFFQ69G5FAV") == "skipped: the operation no longer exists"
    assert pump() == ["sent"]
    [message] = mail.outbox
    assert message.subject.startswith("[pollerdash] Business deadline in ")


def test_the_chart_marks_where_polling_stopped_at_the_business_deadline(watched, drive):
    op = watched()
    drive(op)
    op = reload(op)
    chart = request_chart(
        checks=list(StatusCheck.objects.filter(operation=op).order_by("sent_at")),
        authorizations=list(Authorization.objects.filter(operation=op)),
        created_at=op.created_at,
        deadline_at=op.deadline_at,
        business_deadline_at=op.business_deadline_at,
        now=timezone.now(),
        business_stop=True,
    )
    [line] = [line for line in chart.lines if line.kind == "business"]
    assert line.label == "polling stopped at the business deadline 10:02:00"
    assert "polling stopped at the business deadline 10:02:00" in render_svg(chart)


def test_the_exports_and_the_report_name_the_reason_and_the_choice(watched, drive, alice, client, signing_key) -> None:
    op = watched()
    drive(op)
    decide(Escalation.objects.get(operation=op, state="open"), alice, "keep_waiting")
    client.force_login(alice)
    decisions = body(client.get(reverse("operation_decisions_csv", args=[op.pk]))).decode()
    [row] = list(csv.DictReader(io.StringIO(decisions)))
    assert (row["reason"], row["option"], row["outcome"], row["user"]) == (
        "business_deadline_passed",
        "keep_waiting",
        "applied",
        "alice",
    )
    assert row["new_deadline_at"] == "" and row["authorization_number"] == ""
    report = client.get(reverse("operation_report", args=[op.pk])).content.decode()
    assert "escalated: business deadline passed" in report
    assert "Keep waiting until the technical deadline" in report
    audit = body(client.get(reverse("operation_audit_jsonl", args=[op.pk]))).decode()
    assert '"reason":"business_deadline_passed"' in audit


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content
