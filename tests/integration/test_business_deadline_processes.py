"""The business deadline with real processes: a `qcluster` and a `dispatch_polls` against the fake provider
in its own process. No request reaches the provider after the business deadline until a person says
"keep waiting"; every count is taken from the provider's own log."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from operations.agents.registration import operation_register
from operations.decisions.services import escalation_decide
from operations.models import Escalation, Operation, ProcessHeartbeat
from operations.polls import dispatch
from operations.vocabulary import Reason, Status
from tests.integration.support import wait_until
from tests.support import job_id, signed_in_now

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def status_times(fake_provider, op: Operation) -> list[float]:
    return [r["at"] for r in fake_provider.requests(job_id=op.provider_job_id) if r["kind"] == "status"]


def test_no_request_after_the_business_deadline_until_a_person_keeps_waiting(processes, make_profile, fake_provider):
    # Fast polling, so the provider would see many requests after the business deadline if nothing stopped them.
    profile = make_profile(base_delay_s=0.1, max_delay_s=0.3, jitter_floor=0.5, business_deadline_warning_s=600)
    processes.start("qcluster", Q_WORKERS=2)
    processes.start("dispatcher")
    # A dispatcher that is up (its first heartbeat) has a warning pass within WARNINGS_EVERY_S; the
    # business deadline comes later than that, on however busy a machine.
    wait_until(
        lambda: ProcessHeartbeat.objects.filter(kind="dispatcher").exists(),
        timeout=60,
        what="the dispatcher's first heartbeat",
        processes=processes,
    )
    business = timezone.now() + timedelta(seconds=dispatch.WARNINGS_EVERY_S + 3)
    op = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("never_finishes"),
        registered_by="operator:integration",
        deadline_at=timezone.now() + timedelta(minutes=10),
        business_deadline_at=business,
        max_status_requests=1000,
    )

    # The early warning is recorded (once) while the job runs; the card comes at the business deadline.
    wait_until(
        lambda: Operation.objects.filter(pk=op.pk, business_deadline_warned_at__isnull=False).exists(),
        timeout=15,
        what="the business deadline warning",
        processes=processes,
    )
    card = wait_until(
        lambda: Escalation.objects.filter(operation=op, state="open").first(),
        timeout=20,
        what="the business deadline card",
        processes=processes,
    )
    assert card.reason == Reason.BUSINESS_DEADLINE_PASSED
    assert timedelta(0) <= card.opened_at - business <= timedelta(seconds=5)
    sent = status_times(fake_provider, op)
    assert sent, "the job was polled before its business deadline"
    assert all(moment < business.timestamp() for moment in sent)
    op = Operation.objects.get(pk=op.pk)
    assert op.status == Status.NEEDS_ATTENTION and len(sent) == op.status_requests_used < op.max_status_requests

    # Nothing more goes out while the card waits...
    user = get_user_model().objects.create_user(username="alice", password="pw-alice")
    assert status_times(fake_provider, op) == sent
    # ...until a person keeps waiting: polling resumes within the same bounds, and is not stopped again.
    result = escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=card.pk,
        user=user,
        option_id="keep_waiting",
        card_version=card.version,
        comment="still useful",
    )
    assert result.outcome == "applied"
    decided = timezone.now().timestamp()
    resumed = wait_until(
        lambda: [moment for moment in status_times(fake_provider, op) if moment >= decided][4:],
        timeout=20,
        what="polling to resume after keep waiting",
        processes=processes,
    )
    assert resumed
    op = Operation.objects.get(pk=op.pk)
    assert op.status == Status.RUNNING and op.max_status_requests == 1000
    assert list(Escalation.objects.filter(operation=op).values_list("reason", flat=True)) == [
        Reason.BUSINESS_DEADLINE_PASSED
    ]
    for proc in processes.started:
        assert "Traceback" not in proc.log(), proc.log_path.name
