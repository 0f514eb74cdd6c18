"""Real `qcluster` and `dispatch_polls` processes on the test database, against the fake provider.

Every count is taken from the fake provider's own request log; the processes are real (forked
django-q2 clusters, the dispatcher loop), and faults are real signals (SIGKILL, SIGSTOP).
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone

from operations.agents.registration import operation_register
from operations.models import AuditEntry, Escalation, Operation, ProcessHeartbeat, ProviderAccount, StatusCheck
from operations.vocabulary import TERMINAL_STATUSES, Status
from tests.integration.support import FAST_ENV, max_in_any_window, wait_until
from tests.support import job_id

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LEASE_S = float(FAST_ENV["POLL_LEASE_S"])


@dataclass(frozen=True)
class Kind:
    """A fake-provider scenario and what must become of it."""

    scenario: str
    params: dict
    budget: int
    status: str
    reason: str | None
    requests: int


SUCCEEDS = Kind("slow_success", {"polls": 1}, 12, Status.SUCCEEDED, None, 2)
SUCCEEDS_AT_ONCE = Kind("slow_success", {"polls": 0}, 12, Status.SUCCEEDED, None, 1)
FAILS = Kind("late_failure", {"polls": 1}, 12, Status.FAILED, None, 2)
BUDGET = Kind("never_finishes", {}, 3, Status.NEEDS_ATTENTION, "request_budget_exhausted", 3)
UNKNOWN = Kind("unknown_state", {}, 12, Status.NEEDS_ATTENTION, "unknown_state", 1)


def fast_profile(make_profile, **overrides: object):
    fields: dict[str, object] = {"base_delay_s": 0.05, "max_delay_s": 0.5, "jitter_floor": 0.5}
    fields.update(overrides)
    return make_profile(**fields)


def register(profile, kind: Kind) -> Operation:
    return operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id(kind.scenario, **kind.params),
        registered_by="operator:integration",
        max_status_requests=kind.budget,
    )


def finished(ops: list[Operation]) -> bool:
    pks = [op.pk for op in ops]
    return (
        not Operation.objects.filter(pk__in=pks)
        .exclude(status__in=sorted(TERMINAL_STATUSES))
        .exclude(status=Status.NEEDS_ATTENTION)
        .exists()
    )


def provider_log(fake_provider, ops: list[Operation]) -> dict[str, list[dict]]:
    wanted = {op.provider_job_id: op.pk for op in ops}
    by_op: dict[str, list[dict]] = {op.pk: [] for op in ops}
    for entry in fake_provider.requests():
        if entry["kind"] == "status" and entry["job_id"] in wanted:
            by_op[wanted[entry["job_id"]]].append(entry)
    return by_op


def assert_outcomes(expected: dict[str, Kind], fake_provider) -> dict[str, list[dict]]:
    """Each operation ended as its scenario says, with exactly the requests it needed."""
    ops = {op.pk: op for op in Operation.objects.filter(pk__in=list(expected))}
    log = provider_log(fake_provider, list(ops.values()))
    open_escalations = Escalation.objects.filter(operation__in=list(ops), state="open")
    open_reasons = dict(open_escalations.values_list("operation", "reason"))
    for pk, kind in expected.items():
        op = ops[pk]
        sent = len(log[pk])
        checks = StatusCheck.objects.filter(operation_id=pk).count()
        assert (op.status, open_reasons.get(pk)) == (kind.status, kind.reason), op.provider_job_id
        assert sent == op.status_requests_used == checks == kind.requests, op.provider_job_id
        assert sent <= op.max_status_requests
    return log


# --- one host: the embedded default (runs on SQLite and on PostgreSQL) ----------------------------------


def test_one_dispatcher_and_one_worker_run_operations_to_completion(processes, make_profile, fake_provider):
    profile = fast_profile(make_profile)
    expected = {}
    for kind in (SUCCEEDS, FAILS, BUDGET, UNKNOWN):
        for _ in range(5):
            expected[register(profile, kind).pk] = kind
    worker = processes.start("qcluster", Q_WORKERS=2)
    dispatcher = processes.start("dispatcher")
    ops = list(Operation.objects.filter(pk__in=list(expected)))
    wait_until(lambda: finished(ops), timeout=60, what="every operation to finish", processes=processes)
    assert_outcomes(expected, fake_provider)
    assert ProcessHeartbeat.objects.filter(kind="dispatcher").count() == 1
    # SIGTERM: both finish what they hold and exit 0; the dispatcher removes its heartbeat.
    assert dispatcher.stop() == 0
    assert not ProcessHeartbeat.objects.filter(kind="dispatcher").exists()
    assert worker.stop() == 0
    assert "Traceback" not in dispatcher.log() + worker.log()


def test_a_deadline_passing_while_no_poll_is_due_is_escalated_within_seconds(
    processes, make_profile, fake_provider, settings
):
    """Two ways a deadline passes with no poll to catch it, both swept by the dispatcher within
    seconds and without a status request: a job whose provider asked for an hour (its next poll is
    capped at its deadline), and a job whose whole account was paused past its deadline by a
    sibling's 503 (its next poll is after its deadline)."""
    settings.OPERATION_MIN_DEADLINE_S = 1
    own_account = fast_profile(make_profile)
    shared_account = fast_profile(make_profile, base_delay_s=1.0, max_delay_s=2.0)
    processes.start("qcluster", Q_WORKERS=2)
    processes.start("dispatcher")
    warm_up = register(own_account, SUCCEEDS)
    wait_until(lambda: finished([warm_up]), timeout=30, what="both processes to be up", processes=processes)
    deadline = timezone.now() + timedelta(seconds=4)

    def watch(profile, scenario: str, **kwargs: object) -> Operation:
        return operation_register(
            provider_slug=profile.slug,
            provider_job_id=job_id(scenario, **kwargs),
            registered_by="operator:integration",
            deadline_at=deadline,
        )

    asked_for_an_hour = watch(own_account, "retry_after_seconds", value=3600)
    paused_past_deadline = watch(shared_account, "never_finishes")
    wait_until(
        lambda: provider_log(fake_provider, [paused_past_deadline])[paused_past_deadline.pk],
        timeout=10,
        what="the sibling's first poll",
        processes=processes,
    )
    pauser = operation_register(
        provider_slug=shared_account.slug,
        provider_job_id=job_id("retry_after_seconds", value=3600),
        registered_by="operator:integration",
    )
    wait_until(
        lambda: Operation.objects.filter(pk=paused_past_deadline.pk, next_poll_at__gt=deadline).exists(),
        timeout=10,
        what="the account pause to move the sibling's next poll past its deadline",
        processes=processes,
    )
    for op in (asked_for_an_hour, paused_past_deadline):
        escalation = wait_until(
            lambda op=op: Escalation.objects.filter(operation=op).first(),
            timeout=15,
            what="the escalation",
            processes=processes,
        )
        assert escalation.reason == "deadline_exceeded"
        assert "no request was sent" in escalation.detail  # the sweep's words, not a worker's
        assert timedelta(0) <= escalation.opened_at - deadline <= timedelta(seconds=5)
        sent = provider_log(fake_provider, [op])[op.pk]
        assert sent and all(r["at"] < deadline.timestamp() for r in sent)
        assert len(sent) == Operation.objects.get(pk=op.pk).status_requests_used
    assert len(provider_log(fake_provider, [asked_for_an_hour])[asked_for_an_hour.pk]) == 1
    assert Operation.objects.get(pk=pauser.pk).status == Status.RUNNING  # its own deadline is far


def test_a_worker_started_without_the_credential_binding_sends_nothing_and_says_why(
    processes, make_profile, fake_provider
):
    """An upgrade that left PROVIDER_CREDENTIAL_ORIGINS out of the workers' environment: the worker
    names the profile at start-up, sends nothing and charges nothing, and the card says why."""
    profile = fast_profile(make_profile)
    op = register(profile, SUCCEEDS)
    worker = processes.start("qcluster", Q_WORKERS=1, PROVIDER_CREDENTIAL_ORIGINS="")
    processes.start("dispatcher")
    escalation = wait_until(
        lambda: Escalation.objects.filter(operation=op).first(), timeout=30, what="the card", processes=processes
    )
    assert escalation.reason == "destination_not_allowed"
    assert escalation.detail == (
        "not sent — destination not allowed: PROVIDER_FAKE_TOKEN has no entry in PROVIDER_CREDENTIAL_ORIGINS, "
        "so it is sent to no provider"
    )
    assert provider_log(fake_provider, [op])[op.pk] == []
    assert Operation.objects.get(pk=op.pk).status_requests_used == 0
    assert not StatusCheck.objects.filter(operation=op).exists()
    assert f"profile {profile.slug}: credential_env: PROVIDER_FAKE_TOKEN has no entry" in worker.log()
    assert "Traceback" not in worker.log()


# --- many processes on PostgreSQL ---------------------------------------------------------------------


@pytest.mark.postgres
def test_two_clusters_and_two_dispatchers_on_300_operations(processes, make_profile, fake_provider):
    """Pacing per account, budgets, one poll per due time, and a 429 pausing a whole account."""
    accounts = [fast_profile(make_profile, rate_limit_per_s=40) for _ in range(2)]
    throttled_account = fast_profile(make_profile, rate_limit_per_s=10)
    expected: dict[str, Kind] = {}
    # Registered first, so it is among the first claims: a 429 asking for 2 s on this account.
    throttled = operation_register(
        provider_slug=throttled_account.slug,
        provider_job_id=job_id("retry_after_seconds", value=2, status=429),
        registered_by="operator:integration",
    )
    expected[throttled.pk] = Kind("retry_after_seconds", {}, 12, Status.SUCCEEDED, None, 3)
    siblings = Kind("slow_success", {"polls": 2}, 12, Status.SUCCEEDED, None, 3)
    for _ in range(19):
        expected[register(throttled_account, siblings).pk] = siblings
    mix = [SUCCEEDS_AT_ONCE] * 55 + [SUCCEEDS] * 40 + [FAILS] * 20 + [BUDGET] * 15 + [UNKNOWN] * 10
    for profile in accounts:
        for kind in mix:
            expected[register(profile, kind).pk] = kind
    assert len(expected) == 300
    for _ in range(2):
        processes.start("qcluster", Q_WORKERS=3)
        processes.start("dispatcher")
    ops = list(Operation.objects.filter(pk__in=list(expected)))
    wait_until(lambda: finished(ops), timeout=120, what="all 300 operations to finish", processes=processes)
    log = assert_outcomes(expected, fake_provider)

    # No operation was polled twice for the same due time: every request the provider saw is one
    # StatusCheck (checked above), and no two StatusChecks of an operation served the same due time.
    due_times = list(StatusCheck.objects.filter(operation_id__in=list(expected)).values_list("operation_id", "due_at"))
    assert len(due_times) == len(set(due_times)) == sum(len(v) for v in log.values())
    # ...and the provider never saw two requests of one job closer than the smallest delay.
    for entries in log.values():
        arrivals = sorted(e["at"] for e in entries)
        assert all(b - a >= 0.02 for a, b in zip(arrivals, arrivals[1:], strict=False))
    # Exactly one final decision per operation in the audit chain (never a second completion).
    finals: dict[str, int] = {}
    for body in AuditEntry.objects.filter(operation_id__in=list(expected), type="controller.decision").values_list(
        "body", flat=True
    ):
        entry = json.loads(bytes(body))
        if entry["data"]["decision"] not in {"wait", "defer"}:
            finals[entry["operation_id"]] = finals.get(entry["operation_id"], 0) + 1
    assert finals == {pk: 1 for pk in expected}

    # The rate limit of each account held in every one-second window, as the provider saw it.
    for profile in (*accounts, throttled_account):
        pks = {op.pk for op in ops if op.account == profile.account}
        arrivals = [e["at"] for pk in pks for e in log[pk]]
        assert max_in_any_window(arrivals) <= profile.rate_limit_per_s, profile.account

    # The 429 paused the whole account: once the pause was recorded, no request to the account
    # was charged (or sent) until it ended. Requests charged just before it may land after it.
    paused = AuditEntry.objects.get(type="provider.paused", operation_id=throttled.pk)
    paused_until = ProviderAccount.objects.get(name=throttled_account.account).paused_until
    check = StatusCheck.objects.get(operation=throttled, http_status=429)
    assert paused_until == check.received_at + timedelta(seconds=2)
    on_account = [op for op in ops if op.account == throttled_account.account]
    charged = StatusCheck.objects.filter(operation__in=on_account, sent_at__gt=paused.at, sent_at__lt=paused_until)
    assert not charged.exists()
    for op in on_account:
        checks = StatusCheck.objects.filter(operation=op).order_by("sent_at")
        for arrival, sent in zip(sorted(e["at"] for e in log[op.pk]), checks, strict=True):
            if paused.at.timestamp() < arrival < paused_until.timestamp():
                assert sent.sent_at <= paused.at, "a request charged during the pause reached the provider"
    for proc in processes.started:
        assert "Traceback" not in proc.log(), proc.log_path.name


@pytest.mark.postgres
def test_a_killed_worker_is_taken_over_after_its_lease_and_stays_charged(processes, make_profile, fake_provider):
    profile = fast_profile(make_profile)
    for _ in range(2):
        processes.start("qcluster", Q_WORKERS=2)
    processes.start("dispatcher")
    op = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("held", hold_ms=1500),
        registered_by="operator:integration",
        max_status_requests=2,
    )
    in_flight = wait_until(
        lambda: _held_by_a_worker(op, fake_provider), timeout=30, what="the poll in flight", processes=processes
    )
    victim = processes.owner_of(in_flight)
    victim.kill_group()  # kill -9 the whole qcluster: sentinel, pusher, monitor and the busy worker
    done = wait_until(
        lambda: Operation.objects.filter(pk=op.pk, status=Status.SUCCEEDED).first(),
        timeout=30,
        what="the takeover",
        processes=processes,
    )
    first, second = StatusCheck.objects.filter(operation=op).order_by("sent_at")
    sent = provider_log(fake_provider, [op])[op.pk]
    assert len(sent) == 2 == done.status_requests_used == done.max_status_requests
    assert first.received_at is None and first.decision == ""  # in flight when killed: charged, nothing else
    assert second.decision == "succeeded" and second.due_at == first.due_at
    # Taken over only after the lease ran out, never while the first request could still answer.
    assert sent[1]["at"] >= (first.sent_at + timedelta(seconds=LEASE_S)).timestamp() - 0.05
    assert AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").count() == 1


@pytest.mark.postgres
def test_a_late_original_returning_after_the_takeover_writes_nothing(processes, make_profile, fake_provider):
    profile = fast_profile(make_profile)
    cluster = processes.start("qcluster", Q_WORKERS=2)
    processes.start("dispatcher")
    op = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("held", hold_ms=1000),
        registered_by="operator:integration",
        max_status_requests=2,
    )
    worker_pid = wait_until(
        lambda: _held_by_a_worker(op, fake_provider), timeout=30, what="the poll in flight", processes=processes
    )
    os.kill(worker_pid, signal.SIGSTOP)  # frozen mid-request, past its lease
    try:
        done = wait_until(
            lambda: Operation.objects.filter(pk=op.pk, status=Status.SUCCEEDED).first(),
            timeout=30,
            what="the takeover by the other worker",
            processes=processes,
        )
    finally:
        os.kill(worker_pid, signal.SIGCONT)
    wait_until(
        lambda: f"late result for {op.pk}" in cluster.log(),
        timeout=30,
        what="the original to come back",
        processes=processes,
    )
    after = Operation.objects.get(pk=op.pk)
    assert (after.status, after.completed_at, after.sequence, after.result) == (
        done.status,
        done.completed_at,
        done.sequence,
        done.result,
    )
    assert after.status_requests_used == 2 == len(provider_log(fake_provider, [op])[op.pk])
    late = StatusCheck.objects.filter(operation=op).order_by("sent_at").first()
    assert late.received_at is None and late.decision == ""
    assert AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").count() == 1


def _held_by_a_worker(op: Operation, fake_provider) -> int | None:
    """The pid of the worker whose request the provider is holding, once it is in flight."""
    if not provider_log(fake_provider, [op])[op.pk]:
        return None
    owner = Operation.objects.filter(pk=op.pk).values_list("lease_owner", flat=True).first() or ""
    if not owner or owner.startswith("dispatcher@"):
        return None
    return int(owner.rsplit(":", 1)[1])
