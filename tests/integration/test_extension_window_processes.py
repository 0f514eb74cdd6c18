"""An extension lasts the window its button promised, with real processes: a `qcluster` and a
`dispatch_polls` against the fake provider in its own process, on the real clock. Every request is
counted from the provider's own log; the button's words, the chart's planned marks and the
Authorization's recorded spacing are held against what happened (issue 25).

The processes read the real clock, so the window is the shortest a profile may offer: 1 minute,
3 checks (one slot of 20 s each).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from operations.agents.registration import operation_register
from operations.decisions.services import escalation_decide
from operations.models import Authorization, Escalation, Operation, StatusCheck
from operations.vocabulary import Reason
from tests.integration.support import wait_until
from tests.support import job_id, signed_in_now

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# The dispatcher's pass, the queue and a worker's pick-up: how late a real check may be on this
# machine (2 cores shared by many test runs) against the moment it was planned for. The last check
# is planned this far (20 % of the 20 s spacing) before the deadline, so it is still sent.
LAG = timedelta(seconds=4)
PLANNED = re.compile(r"planned check \d+ of \d+ \(request \d+\) · by about (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC")


def status_times(fake_provider, op: Operation) -> list[datetime]:
    return [
        datetime.fromtimestamp(r["at"], tz=UTC)
        for r in fake_provider.requests(job_id=op.provider_job_id)
        if r["kind"] == "status"
    ]


def test_extend_1_min_3_checks_sends_exactly_3_requests_the_last_in_the_final_fifth(
    processes, make_profile, fake_provider, settings
):
    settings.OPERATION_MIN_DEADLINE_S = 1
    profile = make_profile(extension_options=[{"minutes": 1, "checks": 3}], jitter_floor=0.5, base_delay_s=1)
    alice = get_user_model().objects.create_user(username="alice", password="pw-alice")
    alice.groups.add(Group.objects.get_or_create(name="responder")[0])
    processes.start("qcluster", Q_WORKERS=2)
    processes.start("dispatcher")
    # A few polls, then the (short) deadline passes: the card opens, and its window starts now.
    op = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("never_finishes"),
        registered_by="operator:integration",
        deadline_at=timezone.now() + timedelta(seconds=3),
        max_status_requests=100,
    )
    card = wait_until(
        lambda: Escalation.objects.filter(operation=op, state="open").first(),
        timeout=60,
        what="the deadline card",
        processes=processes,
    )
    assert card.reason == Reason.DEADLINE_EXCEEDED

    # The words on the button, as the operation page shows them.
    client = Client()
    client.force_login(alice)
    page = client.get(f"/operations/{op.pk}/").content.decode()
    words = re.search(r"\+3 requests: 3 checks, about every (\d+) s, until \d\d:\d\d UTC", page)
    assert words is not None and int(words[1]) == 20

    before = len(status_times(fake_provider, op))
    result = escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=card.pk,
        user=alice,
        option_id="extend:1m:3",
        card_version=card.version,
        comment="vendor says a minute",
    )
    assert result.outcome == "applied"
    op = Operation.objects.get(pk=op.pk)
    decided, ends = result.decision.decided_at, op.deadline_at
    assert ends == decided + timedelta(minutes=1)
    assert Authorization.objects.get(operation=op, number=2).check_spacing_s == 20.0

    # After the first check, the chart plans the other two: each at the latest moment it may come.
    wait_until(
        lambda: StatusCheck.objects.filter(operation=op, sent_at__gte=decided, next_poll_at__isnull=False).exists(),
        timeout=15,
        what="the window's first check",
        processes=processes,
    )
    planned = [
        datetime.fromisoformat(moment).replace(tzinfo=UTC)
        for moment in PLANNED.findall(client.get(f"/operations/{op.pk}/").content.decode())
    ]
    assert len(planned) == 2

    # The card comes back when the third check spends the window's budget.
    again = wait_until(
        lambda: Escalation.objects.filter(operation=op, state="open").exclude(pk=card.pk).first(),
        timeout=90,
        what="the card after the window",
        processes=processes,
    )
    sent = status_times(fake_provider, op)[before:]
    assert len(sent) == 3, sent
    assert sent[0] - decided < LAG
    # The last check in the window's final fifth (and before its end); the card no earlier than it.
    assert ends - timedelta(seconds=12) <= sent[-1] < ends
    assert again.reason == Reason.REQUEST_BUDGET_EXHAUSTED and again.opened_at >= sent[-1]
    # One check in each 20 s slot, at or before its planned mark (less the machine's lag).
    assert [int((moment - decided) / timedelta(seconds=20)) for moment in sent] == [0, 1, 2]
    for actual, mark in zip(sent[1:], planned, strict=True):
        assert mark - timedelta(seconds=10) - LAG <= actual <= mark + LAG
    for proc in processes.started:
        assert "Traceback" not in proc.log(), proc.log_path.name
