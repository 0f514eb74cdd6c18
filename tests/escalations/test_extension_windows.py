"""Extensions that last their window: a human's "N minutes / M checks" spends exactly M checks across the
window, counted at the real fake provider, on the injected clock (docs/DESIGN.md section 4, item 4)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from operations.decisions.services import escalation_decide
from operations.models import AuditEntry, Authorization, Escalation, Operation, StatusCheck
from operations.vocabulary import DelaySource, Reason
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db


def reload(obj):
    return type(obj).objects.get(pk=obj.pk)


def decide(esc: Escalation, user: object, option: str):
    return escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=user, option_id=option, card_version=reload(esc).version
    )


def sent_at(fake_provider, op: Operation) -> list[datetime]:
    """When each status request reached the provider (its own log, on the injected clock)."""
    return [
        datetime.fromtimestamp(r["at"], tz=timezone.get_current_timezone())
        for r in fake_provider.requests(job_id=op.provider_job_id)
        if r["kind"] == "status"
    ]


def open_card(op: Operation) -> Escalation:
    return Escalation.objects.get(operation=op, state=Escalation.State.OPEN)


def test_extend_15_min_4_checks_spends_exactly_4_checks_across_the_15_minutes(
    stopped, alice, clock, drive, fake_provider
):
    esc = stopped("never_finishes")
    op = reload(esc.operation)
    before = len(sent_at(fake_provider, op))
    decided = timezone.now()

    decide(esc, alice, "extend:15m:4")
    drive(op)

    after = sent_at(fake_provider, op)[before:]
    assert len(after) == 4
    assert after[0] == decided  # the job may have finished while the card waited: look at once
    spacing = timedelta(minutes=15) / 4
    gaps = [later - earlier for earlier, later in zip(after, after[1:], strict=False)]
    assert all(spacing / 2 <= gap <= spacing for gap in gaps), gaps
    op = reload(op)
    assert all(moment < op.deadline_at for moment in after)
    # The fourth check spent the window's budget: the card comes back then, not 12 s after the decision.
    card = open_card(op)
    assert card.reason == Reason.REQUEST_BUDGET_EXHAUSTED and card.opened_at == after[-1]
    assert op.status_requests_used == op.max_status_requests
    waits = StatusCheck.objects.filter(operation=op, sent_at__gte=decided, decision="wait").order_by("sent_at")
    assert {check.delay_source for check in waits} == {DelaySource.MANUAL_EXTENSION}


def test_treat_as_pending_grants_the_checks_it_says_and_paces_them(stopped, alice, drive, fake_provider):
    # Issue 11: "+4 requests" gave 15, spent in under three minutes.
    esc = stopped("unknown_state", params={"value": "needs_payment"}, max_status_requests=12)
    op = reload(esc.operation)
    assert esc.reason == Reason.UNKNOWN_STATE and op.status_requests_used == 1
    before = len(sent_at(fake_provider, op))
    decided = timezone.now()

    decide(esc, alice, "treat_as_pending:15m:4")
    op = reload(op)
    assert op.max_status_requests == 1 + 4
    # The card came before the deadline: the window runs 15 min past it, from now.
    window = op.deadline_at - decided
    assert window > timedelta(minutes=15)
    assert Authorization.objects.get(operation=op, number=2).check_spacing_s == window.total_seconds() / 4
    drive(op)

    after = sent_at(fake_provider, op)[before:]
    assert len(after) == 4 and after[0] == decided
    gaps = [later - earlier for earlier, later in zip(after, after[1:], strict=False)]
    assert all(window / 8 <= gap <= window / 4 for gap in gaps), gaps
    assert open_card(reload(op)).reason == Reason.REQUEST_BUDGET_EXHAUSTED


def test_provider_guidance_inside_a_window_still_wins(stopped, alice, drive, fake_provider):
    # Every answer asks for 400 s, longer than the window's 225 s spacing.
    esc = stopped("poll_interval_hint", params={"polls": 1000, "value": 400}, max_status_requests=1)
    op = reload(esc.operation)
    assert esc.reason == Reason.REQUEST_BUDGET_EXHAUSTED
    # The first check waits for what the provider asked on its last answer, too.
    asked = op.provider_wait_until
    assert asked is not None and asked > timezone.now()

    decide(esc, alice, "extend:15m:4")
    op = reload(op)
    assert op.next_poll_at == asked and op.deadline_at == asked + timedelta(minutes=15)
    drive(op)

    after = [moment for moment in sent_at(fake_provider, op) if moment >= asked]
    assert [later - earlier for earlier, later in zip(after, after[1:], strict=False)] == [timedelta(seconds=400)] * 2
    checks = StatusCheck.objects.filter(operation=op, sent_at__gte=asked, decision="wait").order_by("sent_at")
    assert {check.delay_source for check in checks} == {DelaySource.PROVIDER_POLL_HINT}
    # The fourth check would fall after the window: the deadline comes first, without a request.
    assert open_card(reload(op)).reason == Reason.DEADLINE_EXCEEDED


def test_one_request_grants_keep_their_meaning_and_leave_no_window(stopped, alice, drive, fake_provider, clock):
    esc = stopped("never_finishes")
    decide(esc, alice, "extend:15m:4")
    op = reload(esc.operation)
    assert op.check_spacing_s == 225.0
    drive(op)
    card = open_card(op)
    # A later one-request grant clears the window: its single check is not paced.
    Escalation.objects.filter(pk=card.pk).update(reason=Reason.PER_CALL_APPROVAL)
    decide(card, alice, "approve_one_check")
    op = reload(op)
    assert op.check_spacing_s is None
    assert op.max_status_requests == op.status_requests_used + 1


def test_the_decision_records_the_spacing_in_the_authorization_and_the_audit(stopped, alice):
    esc = stopped("never_finishes")
    decide(esc, alice, "extend:60m:8")
    auth = Authorization.objects.get(operation=esc.operation, number=2)
    assert auth.check_spacing_s == 450.0
    body = AuditEntry.objects.filter(operation_id=esc.operation_id, type="human.decision").get().body
    assert json.loads(bytes(body))["data"]["check_spacing_ms"] == 450_000
