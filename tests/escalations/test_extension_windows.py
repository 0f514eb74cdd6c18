"""Extensions that last their window: a human's "N minutes / M checks" spends exactly M checks across the
window, counted at the real fake provider, on the injected clock (docs/DESIGN.md section 4, item 4)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from operations.decisions.bulk import Member, decide_bulk
from operations.decisions.services import escalation_decide
from operations.models import AuditEntry, Authorization, Escalation, Operation, StatusCheck
from operations.polls.controller import poll_once
from operations.vocabulary import POLLABLE_STATUSES, DelaySource, Reason
from tests.support import job_id, signed_in_now

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


# The button's words: "+4 requests: 4 checks, about every 4 min, until 10:20 UTC".
WORDS = re.compile(r"\+(\d+) requests: (\d+) checks, about every (\d+) min, until (\d\d):(\d\d) UTC")


def button_words(client, op: Operation, option_label: str) -> tuple[int, timedelta, datetime]:
    """(checks, "about every", "until") as the card on the operation page says them, for one option."""
    page = client.get(f"/operations/{op.pk}/").content.decode()
    at = page.index(f'<span class="opt-label">{option_label}</span>')
    words = WORDS.search(page, at)
    assert words is not None, page[at : at + 400]
    now = timezone.now()
    until = now.replace(hour=int(words[4]), minute=int(words[5]), second=0, microsecond=0)
    return int(words[2]), timedelta(minutes=int(words[3])), until


def assert_the_window_kept_its_words(
    *, checks: int, every: timedelta, until: datetime, first: datetime, sent: list[datetime], card: Escalation
) -> None:
    # As many requests as the button said, the first at once.
    assert len(sent) == checks and sent[0] == first
    # "until 10:20": every check before then, the last in the window's final stretch of "about every".
    assert all(moment < until + timedelta(minutes=1) for moment in sent)
    assert until - sent[-1] <= every + timedelta(seconds=30)
    # "about every 4 min": one check in each stretch of the window, none bunched up.
    stretch = (card.operation.deadline_at - first) / checks
    assert abs(stretch - every) <= timedelta(seconds=30)
    assert [int((moment - first) / stretch) for moment in sent] == list(range(checks)), sent
    # The card comes back at the last check (it spent the window's budget), never before it.
    assert card.opened_at == sent[-1] and card.reason == Reason.REQUEST_BUDGET_EXHAUSTED
    assert "last check of the window" in card.detail


def test_extend_15_min_4_checks_lasts_the_window_the_button_promised(stopped, alice, client, drive, fake_provider):
    # Issue 25: the fourth check, and the card with it, came at 44-63 % of the window.
    esc = stopped("never_finishes")
    op = reload(esc.operation)
    client.force_login(alice)
    checks, every, until = button_words(client, op, "Extend 15 min / 4 checks")
    assert (checks, every) == (4, timedelta(minutes=4))
    before = len(sent_at(fake_provider, op))
    decided = timezone.now()

    decide(esc, alice, "extend:15m:4")
    op = reload(op)
    assert op.deadline_at - until < timedelta(minutes=1)
    drive(op)

    sent = sent_at(fake_provider, op)[before:]
    card = open_card(op)
    assert_the_window_kept_its_words(checks=checks, every=every, until=until, first=decided, sent=sent, card=card)
    # The words, the Authorization's record and what happened agree on the spacing.
    assert Authorization.objects.get(operation=op, number=2).check_spacing_s == 225.0
    op = reload(op)
    assert op.status_requests_used == op.max_status_requests
    waits = StatusCheck.objects.filter(operation=op, sent_at__gte=decided, decision="wait").order_by("sent_at")
    assert {check.delay_source for check in waits} == {DelaySource.MANUAL_EXTENSION}


def test_treat_as_pending_grants_the_checks_it_says_and_lasts_its_window(stopped, alice, client, drive, fake_provider):
    # Issue 11: "+4 requests" gave 15, spent in under three minutes.
    esc = stopped("unknown_state", params={"value": "needs_payment"}, max_status_requests=12)
    op = reload(esc.operation)
    assert esc.reason == Reason.UNKNOWN_STATE and op.status_requests_used == 1
    client.force_login(alice)
    checks, every, until = button_words(client, op, "Treat “needs_payment” as pending: 15 min / 4 checks")
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

    sent = sent_at(fake_provider, op)[before:]
    card = open_card(reload(op))
    assert_the_window_kept_its_words(checks=checks, every=every, until=until, first=decided, sent=sent, card=card)


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
    assert len(after) == 3 and after[0] == asked
    # Never sooner than the provider asked; once its wait carried a check past its slot (the third
    # would have come at 562-670 s), the wait names the source.
    assert all(later - earlier >= timedelta(seconds=400) for earlier, later in zip(after, after[1:], strict=False))
    assert after[2] - after[1] == timedelta(seconds=400)
    checks = StatusCheck.objects.filter(operation=op, sent_at__gte=asked, decision="wait").order_by("sent_at")
    assert checks.last().delay_source == DelaySource.PROVIDER_POLL_HINT
    # The fourth check would fall after the window: the deadline comes first, without a request,
    # and the card opens at the deadline, not before.
    card = open_card(reload(op))
    assert card.reason == Reason.DEADLINE_EXCEEDED and card.opened_at == op.deadline_at


def drive_all(ops: list[Operation], *, clock, rng) -> None:
    """The dispatcher over several operations: the earliest due one next, once, on the injected clock."""
    for _ in range(200):
        live = [o for o in Operation.objects.filter(pk__in=[o.pk for o in ops]) if o.status in POLLABLE_STATUSES]
        if not live:
            return
        due = min(live, key=lambda o: o.next_poll_at)
        if due.next_poll_at > timezone.now():
            clock.move_to(due.next_poll_at, tick=False)
        poll_once(operation_id=due.pk, fence=due.fence, rng=rng)


def test_a_bulk_extension_lasts_its_window_on_every_card(stopped, alice, clock, rng, fake_provider):
    # Issue 25, first two rows: a bulk "15 min / 4" came back after 44 % and 56 % of its window.
    cards = [stopped("never_finishes", purpose=f"Export {n}") for n in range(3)]
    assert len({card.group_id for card in cards}) == 1
    before = {card.pk: len(sent_at(fake_provider, card.operation)) for card in cards}
    decided = timezone.now()
    result = decide_bulk(
        sign_in=signed_in_now(),
        group_id=cards[0].group_id,
        user=alice,
        option_id="extend:15m:4",
        members=[Member(card.pk, reload(card).version) for card in cards],
        comment="vendor says the backlog clears in 15 min",
        confirmed_count=3,
    )
    assert len(result.applied) == 3
    drive_all([card.operation for card in cards], clock=clock, rng=rng)

    for card in cards:
        op = reload(card.operation)
        sent = sent_at(fake_provider, op)[before[card.pk] :]
        assert op.deadline_at == decided + timedelta(minutes=15)
        assert len(sent) == 4 and sent[0] == decided
        assert [int((moment - decided) / timedelta(seconds=225)) for moment in sent] == [0, 1, 2, 3]
        assert open_card(op).opened_at == sent[-1] >= op.deadline_at - timedelta(seconds=112.5)


def test_a_card_granted_before_its_old_deadline_is_not_woken_at_the_old_deadline(
    make_operation, alice, clock, drive, fake_provider
):
    # Issue 25, third row: the budget card came 26 min before the deadline; the extension runs 15 min
    # past the old deadline. No wake-up of the window is capped at the old deadline.
    op = make_operation(
        job_id("never_finishes"), deadline_at=timezone.now() + timedelta(minutes=30), max_status_requests=4
    )
    drive(op)
    esc = open_card(op)
    assert esc.reason == Reason.REQUEST_BUDGET_EXHAUSTED
    old_deadline = reload(op).deadline_at
    last_before = StatusCheck.objects.filter(operation=op).latest("pk").pk
    decide(esc, alice, "extend:15m:4")
    op = reload(op)
    assert op.deadline_at == old_deadline + timedelta(minutes=15)
    drive(op)

    checks = list(StatusCheck.objects.filter(operation=op, pk__gt=last_before).order_by("sent_at"))
    assert len(checks) == 4
    assert not any("capped at the deadline" in " ".join(check.warnings or []) for check in checks)
    assert not any(check.next_poll_at == old_deadline for check in checks)
    assert checks[-1].sent_at >= op.deadline_at - timedelta(seconds=op.check_spacing_s)
    assert open_card(op).opened_at == checks[-1].sent_at


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
