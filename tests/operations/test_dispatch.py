"""The dispatcher's steps, one at a time, against the real fake provider and django-q2's ORM queue.

A test plays the worker by running the queued task payloads exactly as django-q2 would (the
function path and arguments from the signed package). Requests are counted from the provider's
log; time is the injected clock. Concurrency between dispatchers is in the PostgreSQL-only tests
at the end; real processes are in tests/integration/.
"""

from __future__ import annotations

import pydoc
import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from operations.limits import pacing
from operations.models import AuditEntry, Escalation, Operation, ProcessHeartbeat, ProviderAccount, StatusCheck
from operations.polls import dispatch, heartbeat
from operations.polls.controller import PollResult
from operations.providers import http
from operations.vocabulary import Reason, Status
from tests.support import T0, job_id

OWNER = "dispatcher@test:1"


@pytest.fixture(autouse=True)
def _frozen_clock(clock):  # every test here starts at T0
    return clock


def reload(op: Operation) -> Operation:
    return Operation.objects.get(pk=op.pk)


def _claims_of(task: dict) -> list[tuple[str, int]]:
    """The (operation_id, fence) pairs a poll task carries: one, or a batch under load."""
    if task["func"] == dispatch.POLLS_TASK:
        return [(op_id, fence) for op_id, fence in task["args"][0]]
    return [tuple(task["args"])]


def queued() -> list[tuple[str, int]]:
    """(operation_id, fence) of every poll waiting in django-q2's queue, oldest first."""
    return [
        claim
        for payload in OrmQ.objects.order_by("id").values_list("payload", flat=True)
        for claim in _claims_of(SignedPackage.loads(payload))
    ]


def work(*, only: set[str] | None = None) -> dict[str, str]:
    """Be a django-q2 worker: run queued tasks (all, or those of some operations) and ack them."""
    results = {}
    for row in list(OrmQ.objects.order_by("id")):
        task = SignedPackage.loads(row.payload)
        claims = _claims_of(task)
        if only is not None and not any(op_id in only for op_id, _ in claims):
            continue
        row.delete()
        outcome = str(pydoc.locate(task["func"])(*task["args"], **task["kwargs"]))
        results.update(zip((op_id for op_id, _ in claims), outcome.split(","), strict=True))
    return results


def status_requests(fake_provider, op: Operation) -> list[dict]:
    return [r for r in fake_provider.requests(job_id=op.provider_job_id) if r["kind"] == "status"]


def claim(**kwargs: object) -> list[dispatch.Claim]:
    return dispatch.claim_due(owner=OWNER, **kwargs)


# --- claiming ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_claims_due_operations_and_enqueues_one_poll_task_each(make_operation, settings):
    ops = [make_operation(job_id("slow_success")) for _ in range(3)]
    claims = claim(now=T0 + timedelta(seconds=0.2))
    assert sorted(c.operation_id for c in claims) == sorted(op.pk for op in ops)
    assert sorted(queued()) == sorted((op.pk, 1) for op in ops)
    for op in ops:
        op = reload(op)
        assert (op.fence, op.lease_owner) == (1, OWNER)
        assert op.lease_expires_at == T0 + timedelta(seconds=0.2 + settings.POLL_LEASE_S)
        assert op.claimed_at == T0 + timedelta(seconds=0.2)
        assert op.claim_due_at == T0  # the due time it serves: dispatch lag is measured from it


@pytest.mark.django_db
def test_it_leaves_future_leased_and_finished_operations_alone(make_operation, clock):
    future = make_operation(job_id("slow_success"))
    Operation.objects.filter(pk=future.pk).update(next_poll_at=T0 + timedelta(seconds=5))
    leased = make_operation(job_id("slow_success"))
    Operation.objects.filter(pk=leased.pk).update(lease_owner="w:1", lease_expires_at=T0 + timedelta(seconds=30))
    finished = make_operation(job_id("slow_success"))
    Operation.objects.filter(pk=finished.pk).update(status=Status.SUCCEEDED)
    with_human = make_operation(job_id("slow_success"))
    Operation.objects.filter(pk=with_human.pk).update(status=Status.NEEDS_ATTENTION)
    assert claim(now=T0) == []
    assert OrmQ.objects.count() == 0


@pytest.mark.django_db
def test_a_second_pass_does_not_claim_an_operation_twice(make_operation):
    op = make_operation(job_id("slow_success"))
    assert len(claim(now=T0)) == 1
    assert claim(now=T0 + timedelta(seconds=1)) == []
    assert queued() == [(op.pk, 1)]


@pytest.mark.django_db
def test_a_claim_and_its_task_commit_together_or_not_at_all(make_operation, monkeypatch):
    ops = [make_operation(job_id("slow_success")) for _ in range(3)]
    real_async_task = dispatch.async_task
    calls = []

    def enqueue_then_fail(*args: object, **kwargs: object) -> str:
        calls.append(args)
        if len(calls) == 2:
            raise ConnectionError("broker write failed")
        return real_async_task(*args, **kwargs)

    monkeypatch.setattr(dispatch, "async_task", enqueue_then_fail)
    with pytest.raises(ConnectionError):
        claim(now=T0)
    assert OrmQ.objects.count() == 0
    assert [reload(op).fence for op in ops] == [0, 0, 0]
    assert all(reload(op).lease_owner == "" for op in ops)


@pytest.mark.django_db
def test_the_worker_polls_the_claim_and_records_the_dispatch_lag(make_operation, clock, fake_provider):
    op = make_operation(job_id("slow_success", polls=1))
    claim(now=T0 + timedelta(seconds=0.1))
    clock.move_to(T0 + timedelta(seconds=0.4), tick=False)
    assert work() == {op.pk: PollResult.POLLED}
    check = StatusCheck.objects.get(operation=op)
    assert check.due_at == T0 and check.dispatch_lag_s == pytest.approx(0.4)
    op = reload(op)
    assert op.status == Status.RUNNING and op.lease_owner == "" and op.next_poll_at > T0
    assert len(status_requests(fake_provider, op)) == 1


@pytest.mark.django_db
def test_a_redelivered_task_is_a_no_op(make_operation, fake_provider):
    op = make_operation(job_id("slow_success", polls=1))
    claim(now=T0)
    payload = OrmQ.objects.get().payload
    work()
    # django-q2 is at-least-once: the same package again (after `retry`, or a crash) does nothing.
    OrmQ.objects.create(key="pollerdash", payload=payload, lock=T0)
    assert work() == {op.pk: PollResult.STALE}
    assert len(status_requests(fake_provider, op)) == 1 == reload(op).status_requests_used


@pytest.mark.django_db
def test_back_pressure_holds_claims_while_the_queue_is_full(make_operation, settings):
    settings.DISPATCH_MAX_QUEUED = 2
    for _ in range(5):
        make_operation(job_id("slow_success"))
    assert len(claim(now=T0)) == 2
    assert claim(now=T0) == []  # two tasks wait: nothing more until workers take them
    work()
    assert len(claim(now=T0 + timedelta(seconds=0.1))) == 2


@pytest.mark.django_db
def test_the_command_runs_one_pass(make_operation):
    op = make_operation(job_id("slow_success"))
    out = StringIO()
    call_command("dispatch_polls", "--once", stdout=out)
    assert "claimed 1" in out.getvalue()
    assert queued() == [(op.pk, 1)]


# --- provider-account pacing ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_claims_per_account_never_exceed_the_rate_allowance(make_profile, make_operation, clock, fake_provider):
    slow = make_profile(rate_limit_per_s=2)
    fast = make_profile()
    throttled = [make_operation(job_id("never_finishes"), provider=slow) for _ in range(5)]
    free = [make_operation(job_id("never_finishes"), provider=fast) for _ in range(3)]
    first = claim(now=T0)
    assert sum(c.operation_id in {op.pk for op in throttled} for c in first) == 2
    assert {op.pk for op in free} <= {c.operation_id for c in first}
    # Claimed but not yet sent counts against the window, as does sent.
    assert claim(now=T0 + timedelta(seconds=0.1)) == []
    work()
    assert claim(now=T0 + timedelta(seconds=0.2)) == []
    window = T0 + timedelta(seconds=1.2)
    clock.move_to(window, tick=False)
    assert len(claim(now=window)) == 2
    work()
    sent = sorted(StatusCheck.objects.filter(account=slow.account).values_list("sent_at", flat=True))
    assert len(sent) == 4
    assert sent[2] - sent[0] > timedelta(seconds=1)


@pytest.mark.django_db
def test_a_paused_account_gets_no_claims_until_the_pause_ends(make_profile, make_operation):
    paused = make_profile()
    other = make_profile()
    held = make_operation(job_id("slow_success"), provider=paused)
    free = make_operation(job_id("slow_success"), provider=other)
    ProviderAccount.objects.filter(name=paused.account).update(paused_until=T0 + timedelta(seconds=30))
    assert [c.operation_id for c in claim(now=T0)] == [free.pk]
    assert claim(now=T0 + timedelta(seconds=29)) == []
    assert [c.operation_id for c in claim(now=T0 + timedelta(seconds=30))] == [held.pk]


@pytest.mark.django_db
@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_after_on_one_operation_pauses_every_operation_of_the_account(
    make_profile, make_operation, clock, fake_provider, status
):
    shared = make_profile()
    elsewhere = make_profile()
    throttled = make_operation(job_id("retry_after_seconds", value=30, status=status), provider=shared)
    siblings = [make_operation(job_id("slow_success", polls=0), provider=shared) for _ in range(2)]
    unrelated = make_operation(job_id("slow_success", polls=0), provider=elsewhere)
    assert len(claim(now=T0)) == 4
    assert work(only={throttled.pk}) == {throttled.pk: PollResult.POLLED}
    # The siblings were already claimed: the pause moved them to its end, so their workers
    # give the claims back without sending anything.
    results = work()
    assert results[unrelated.pk] == PollResult.POLLED
    for sibling in siblings:
        assert results[sibling.pk] != PollResult.POLLED and status_requests(fake_provider, sibling) == []
        assert reload(sibling).next_poll_at == T0 + timedelta(seconds=30)
    for moment in (T0 + timedelta(seconds=1), T0 + timedelta(seconds=29)):
        clock.move_to(moment, tick=False)
        assert claim(now=moment) == []
    resume = T0 + timedelta(seconds=30)
    clock.move_to(resume, tick=False)
    assert {c.operation_id for c in claim(now=resume)} == {throttled.pk, *(s.pk for s in siblings)}
    work()
    assert len(status_requests(fake_provider, throttled)) == 2
    for sibling in siblings:
        assert reload(sibling).status == Status.SUCCEEDED
    first_sibling_send = StatusCheck.objects.filter(operation__in=siblings).order_by("sent_at").first().sent_at
    assert first_sibling_send >= resume


@pytest.mark.django_db
def test_an_admitted_claim_still_meets_the_exact_limit_at_send_time(make_profile, make_operation, fake_provider):
    slow = make_profile(rate_limit_per_s=0.25)  # one request per 4.2 s window
    op = make_operation(job_id("slow_success"), provider=slow)
    assert len(claim(now=T0)) == 1
    # Meanwhile something else spent the window (a direct poll, another host with a skewed clock).
    other = make_operation(job_id("slow_success"), provider=slow)
    StatusCheck.objects.create(operation=other, account=slow.account, fence=1, started_at=T0, sent_at=T0)
    assert work() == {op.pk: PollResult.DEFERRED}
    assert status_requests(fake_provider, op) == []
    assert reload(op).next_poll_at > T0 + timedelta(seconds=4)


@pytest.mark.django_db
def test_a_claim_whose_lease_ran_out_before_the_requeue_is_charged_against_the_window(make_operation, clock, settings):
    op = make_operation(job_id("slow_success"))
    claim(now=T0)
    late = T0 + timedelta(seconds=settings.POLL_LEASE_S + 1)
    clock.move_to(late, tick=False)
    # Its slot reservation lapsed with the lease; the exclusive path decides, and there is room.
    assert work() == {op.pk: PollResult.POLLED}
    assert StatusCheck.objects.get(operation=op).sent_at == late


# --- deadline sweep ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_deadline_that_passes_while_no_poll_is_due_is_escalated_without_a_request(
    make_operation, clock, fake_provider
):
    deadline = T0 + timedelta(seconds=20)
    op = make_operation(job_id("retry_after_seconds", value=3600), deadline_at=deadline)
    claim(now=T0)
    work()
    assert reload(op).next_poll_at == deadline  # the provider's hour is capped at the deadline
    before = len(status_requests(fake_provider, op))
    clock.move_to(deadline - timedelta(seconds=1), tick=False)
    assert dispatch.sweep_deadlines(now=deadline - timedelta(seconds=1)) == 0
    clock.move_to(deadline, tick=False)
    result = dispatch.run_pass(owner=OWNER, now=deadline)
    assert (result.swept, result.claimed) == (1, 0)
    op = reload(op)
    assert op.status == Status.NEEDS_ATTENTION and op.next_poll_at is None
    escalation = Escalation.objects.get(operation=op, state="open")
    assert escalation.reason == Reason.DEADLINE_EXCEEDED
    assert "no request was sent" in escalation.detail
    assert len(status_requests(fake_provider, op)) == before == op.status_requests_used
    assert AuditEntry.objects.filter(operation_id=op.pk, type="escalation.opened").exists()


@pytest.mark.django_db
def test_an_operation_whose_next_poll_is_after_its_deadline_is_swept_at_the_deadline(
    make_operation, clock, fake_provider
):
    deadline = T0 + timedelta(seconds=20)
    op = make_operation(job_id("slow_success"), deadline_at=deadline)
    # As a sibling's 429 does: the account pause moved this poll an hour away.
    Operation.objects.filter(pk=op.pk).update(next_poll_at=T0 + timedelta(hours=1))
    assert dispatch.run_pass(owner=OWNER, now=deadline - timedelta(seconds=0.1)).did_work is False
    clock.move_to(deadline, tick=False)
    assert dispatch.run_pass(owner=OWNER, now=deadline).swept == 1
    assert Escalation.objects.get(operation=op).reason == Reason.DEADLINE_EXCEEDED
    assert status_requests(fake_provider, op) == []


@pytest.mark.django_db
def test_a_claims_only_pass_claims_due_polls_and_leaves_the_sweep_to_the_next_full_pass(make_operation, clock):
    deadline = T0 + timedelta(seconds=20)
    passed = make_operation(job_id("slow_success"), deadline_at=deadline)
    Operation.objects.filter(pk=passed.pk).update(next_poll_at=T0 + timedelta(hours=1))
    due = make_operation(job_id("slow_success"))
    clock.move_to(deadline, tick=False)
    light = dispatch.run_pass(owner=OWNER, now=deadline, claims_only=True)
    assert (light.swept, light.claimed) == (0, 1)
    assert reload(due).claimed_at is not None
    assert reload(passed).status == Status.PENDING  # not yet escalated: no sweep in this pass
    full = dispatch.run_pass(owner=OWNER, now=deadline)
    assert (full.swept, full.claimed) == (1, 0)
    assert Escalation.objects.get(operation=passed).reason == Reason.DEADLINE_EXCEEDED


@pytest.mark.django_db
def test_the_sweep_leaves_an_operation_to_the_worker_holding_its_lease(make_operation, clock, fake_provider):
    deadline = T0 + timedelta(seconds=15)
    op = make_operation(job_id("slow_success"), deadline_at=deadline)
    Operation.objects.filter(pk=op.pk).update(next_poll_at=deadline - timedelta(seconds=1))
    moment = deadline - timedelta(seconds=1)
    clock.move_to(moment, tick=False)
    assert len(claim(now=moment)) == 1
    clock.move_to(deadline, tick=False)
    assert dispatch.sweep_deadlines(now=deadline) == 0  # a live lease holds it
    assert work() == {op.pk: PollResult.ESCALATED}  # its worker's gate escalates, before sending
    assert Escalation.objects.get(operation=op).reason == Reason.DEADLINE_EXCEEDED
    assert status_requests(fake_provider, op) == []


# --- expired leases ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_claim_whose_worker_died_is_requeued_and_the_charged_request_stays_charged(
    make_operation, clock, monkeypatch, settings, fake_provider
):
    op = make_operation(job_id("slow_success", polls=0))
    claim(now=T0)
    original_fence = queued()[0][1]

    def die(**kwargs: object) -> None:
        raise SystemExit("worker killed between the charge and the send")

    monkeypatch.setattr(http, "send", die)
    with pytest.raises(SystemExit):
        work()
    monkeypatch.undo()
    assert reload(op).status_requests_used == 1
    clock.move_to(T0 + timedelta(seconds=settings.POLL_LEASE_S - 1), tick=False)
    assert dispatch.run_pass(owner=OWNER).did_work is False  # the lease still holds
    expiry = T0 + timedelta(seconds=settings.POLL_LEASE_S + 0.1)
    clock.move_to(expiry, tick=False)
    result = dispatch.run_pass(owner=OWNER, now=expiry)
    assert (result.requeued, result.claimed) == (1, 1)
    (task,) = queued()
    assert task[1] > original_fence + 1
    work()
    op = reload(op)
    assert op.status == Status.SUCCEEDED and op.status_requests_used == 2
    assert len(status_requests(fake_provider, op)) == 1  # the dead worker never reached the provider
    # The served due time is the original one: the takeover shows up as dispatch lag.
    check = StatusCheck.objects.get(operation=op, received_at__isnull=False)
    assert check.due_at == T0 and check.dispatch_lag_s >= settings.POLL_LEASE_S


@pytest.mark.django_db
def test_a_late_original_after_a_takeover_writes_nothing(make_operation, clock, monkeypatch, settings, fake_provider):
    op = make_operation(job_id("slow_success", polls=0), max_status_requests=2)
    claim(now=T0)
    real_send = http.send
    takeover = {}

    def hang_past_the_lease(**kwargs: object) -> http.RawResponse:
        response = real_send(**kwargs)
        # While this answer is "in flight", the lease runs out and another worker takes over.
        monkeypatch.setattr(http, "send", real_send)
        later = T0 + timedelta(seconds=settings.POLL_LEASE_S + 1)
        clock.move_to(later, tick=False)
        takeover["pass"] = dispatch.run_pass(owner=OWNER, now=later)
        takeover["work"] = work()
        return response

    monkeypatch.setattr(http, "send", hang_past_the_lease)
    assert work() == {op.pk: PollResult.STALE}
    assert takeover["pass"].requeued == 1 and takeover["work"] == {op.pk: PollResult.POLLED}
    op = reload(op)
    assert op.status == Status.SUCCEEDED and op.status_requests_used == 2 == op.max_status_requests
    assert len(status_requests(fake_provider, op)) == 2
    late, winner = StatusCheck.objects.filter(operation=op).order_by("sent_at")
    assert late.received_at is None and late.decision == ""  # charged, and nothing else written
    assert winner.decision == "succeeded"
    decisions = AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").count()
    assert decisions == 1


@pytest.mark.django_db
def test_a_group_task_polls_together_and_a_claim_taken_over_mid_flight_writes_nothing(
    make_operation, settings, monkeypatch, fake_provider
):
    import json

    from operations.audit import integrate
    from operations.audit.verify import merkle
    from operations.lifecycle.claims import ExpiredLease, take_expired_lease
    from operations.polls import batch

    settings.DISPATCH_TASK_SPREAD, settings.DISPATCH_POLLS_PER_TASK = 1, 4
    ops = [make_operation(job_id("slow_success", polls=1), max_status_requests=3) for _ in range(4)]
    claim(now=T0)
    assert [SignedPackage.loads(p)["func"] for p in OrmQ.objects.values_list("payload", flat=True)] == [
        dispatch.POLLS_TASK
    ]
    victim = ops[1]
    real_interpret = batch.interpret

    def take_over_the_victim_first(**kwargs: object):
        if not hasattr(take_over_the_victim_first, "done"):
            # Every request of the group is charged and answered; before any outcome is written,
            # the victim's claim is taken away (its lease was judged expired), as the dispatcher does.
            take_over_the_victim_first.done = True
            row = Operation.objects.values("fence", "lease_owner", "lease_expires_at").get(pk=victim.pk)
            assert take_expired_lease(
                lease=ExpiredLease(victim.pk, row["lease_owner"], row["fence"], row["lease_expires_at"])
            )
        return real_interpret(**kwargs)

    monkeypatch.setattr(batch, "interpret", take_over_the_victim_first)
    assert work() == {op.pk: PollResult.STALE if op is victim else PollResult.POLLED for op in ops}
    for op in ops:
        assert len(status_requests(fake_provider, op)) == 1
        assert reload(op).status_requests_used == 1  # each request charged before it was sent
    late = StatusCheck.objects.get(operation=victim)
    assert late.received_at is None and late.decision == ""  # charged, and nothing else written
    assert not AuditEntry.objects.filter(operation_id=victim.pk, type="controller.decision").exists()
    assert reload(victim).lease_owner == "" and reload(victim).last_polled_at is None
    for op in ops:
        if op is not victim:
            written = reload(op)
            assert written.status == Status.RUNNING and written.lease_owner == "" and written.next_poll_at > T0
            assert StatusCheck.objects.get(operation=op).decision == "wait"
            assert AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").count() == 1
    # The group's single append: pending leaves whose bytes hash to their leaf hash, then numbered
    # in insertion order by the integrator.
    for entry in AuditEntry.objects.order_by("pk"):
        assert json.loads(bytes(entry.body))["v"] == 2
        assert merkle.leaf_hash(bytes(entry.body)).hex() == entry.entry_hash
    integrate.integrate_all()
    seqs = list(AuditEntry.objects.order_by("pk").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    # The victim is still due: the next pass hands it out again and it is polled once more.
    monkeypatch.setattr(batch, "interpret", real_interpret)
    assert [c.operation_id for c in claim(now=T0)] == [victim.pk]
    assert work() == {victim.pk: PollResult.POLLED}
    assert len(status_requests(fake_provider, victim)) == 2


HOSTILE_BODIES = ["deep", "surrogate", "surrogate_bytes", "nul", "infinity"]


@pytest.mark.django_db
@pytest.mark.parametrize("transport_budget", [1, 3], ids=["escalating", "waiting"])
def test_hostile_answers_in_a_group_cost_only_their_own_operations(
    make_operation, settings, fake_provider, transport_budget
):
    # PostgreSQL refuses what SQLite stores (NUL, infinities in jsonb; over-long varchar): this
    # matters most in the PostgreSQL pass. With a transport budget of 1 each hostile answer
    # escalates (the rare outcomes' path), with 3 it waits (the group's common transaction).
    settings.DISPATCH_TASK_SPREAD, settings.DISPATCH_POLLS_PER_TASK = 1, 8
    honest = [make_operation(job_id("slow_success", polls=n)) for n in (0, 1)]
    hostile = [make_operation(job_id("hostile_body", kind=kind)) for kind in HOSTILE_BODIES]
    long_state = make_operation(job_id("hostile_body", kind="long_state"))
    everyone = [*honest, *hostile, long_state]
    Operation.objects.filter(pk__in=[op.pk for op in hostile]).update(max_transport_failures=transport_budget)
    claim(now=T0)
    assert [SignedPackage.loads(p)["func"] for p in OrmQ.objects.values_list("payload", flat=True)] == [
        dispatch.POLLS_TASK
    ]
    assert work() == {op.pk: PollResult.POLLED for op in everyone}
    for op in everyone:
        written = reload(op)
        assert written.status_requests_used == 1 and len(status_requests(fake_provider, op)) == 1
        assert written.lease_owner == "" and written.last_polled_at == T0
        assert StatusCheck.objects.get(operation=op).received_at == T0
        assert AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").count() == 1
    assert reload(honest[0]).status == Status.SUCCEEDED
    assert reload(honest[1]).status == Status.RUNNING
    assert StatusCheck.objects.get(operation=honest[1]).decision == "wait"
    for op in hostile:
        written, check = reload(op), StatusCheck.objects.get(operation=op)
        assert check.interpreted_state == "invalid_body" and written.transport_failures_used == 1
        if transport_budget == 1:
            assert written.status == Status.NEEDS_ATTENTION and check.decision == "escalate"
            assert Escalation.objects.get(operation=op).reason == Reason.INTEGRATION_FAILURE
        else:
            assert written.status == Status.RUNNING and check.decision == "wait" and written.next_poll_at > T0
            assert not Escalation.objects.filter(operation=op).exists()
    assert reload(long_state).status == Status.NEEDS_ATTENTION
    assert Escalation.objects.get(operation=long_state).reason == Reason.UNKNOWN_STATE
    assert StatusCheck.objects.get(operation=long_state).provider_state == "x" * 200


@pytest.mark.django_db
def test_an_answer_that_cannot_be_interpreted_costs_only_its_own_operation(
    make_operation, settings, monkeypatch, fake_provider
):
    from operations.polls import controller

    settings.DISPATCH_TASK_SPREAD, settings.DISPATCH_POLLS_PER_TASK = 1, 4
    ops = [make_operation(job_id("slow_success", polls=0)) for _ in range(4)]
    victim = ops[2]
    real_decide = controller.decide

    def fail_on_the_victim(**kwargs):
        # A fault in interpreting one answer (a bug, an input nobody foresaw).
        if kwargs["observation"].body and victim.provider_job_id.encode() in kwargs["observation"].body:
            raise RuntimeError("unforeseen")
        return real_decide(**kwargs)

    monkeypatch.setattr(controller, "decide", fail_on_the_victim)
    claim(now=T0)
    assert work() == {op.pk: PollResult.POLLED for op in ops}
    for op in ops:
        assert reload(op).status_requests_used == 1
        assert AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").count() == 1
        if op is victim:
            check = StatusCheck.objects.get(operation=op)
            assert check.interpreted_state == "invalid_body" and check.decision == "wait"
            assert reload(op).transport_failures_used == 1 and reload(op).status == Status.RUNNING
        else:
            assert reload(op).status == Status.SUCCEEDED


@pytest.mark.postgres
@pytest.mark.django_db
def test_an_outcome_the_database_refuses_does_not_lose_the_groups_other_outcomes(
    make_operation, settings, monkeypatch, fake_provider
):
    import dataclasses

    from operations.polls import batch

    settings.DISPATCH_TASK_SPREAD, settings.DISPATCH_POLLS_PER_TASK = 1, 4
    ops = [make_operation(job_id("slow_success", polls=0)) for _ in range(4)]
    victim = ops[1]
    real_interpret = batch.interpret

    def unstorable_for_the_victim(**kwargs):
        # A value jsonb refuses that got past every check before the write.
        decision, answer = real_interpret(**kwargs)
        if kwargs["op"].pk == victim.pk:
            decision = dataclasses.replace(decision, result={"values": {"m": "\x00"}})
        return decision, answer

    monkeypatch.setattr(batch, "interpret", unstorable_for_the_victim)
    claim(now=T0)
    assert work() == {op.pk: PollResult.STALE if op is victim else PollResult.POLLED for op in ops}
    for op in ops:
        assert reload(op).status_requests_used == 1 and len(status_requests(fake_provider, op)) == 1
    for op in ops:
        if op is not victim:
            assert reload(op).status == Status.SUCCEEDED
            assert AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").count() == 1
    # The victim's write was refused as a whole: charged, nothing else, still leased to this worker.
    assert StatusCheck.objects.get(operation=victim).received_at is None
    assert not AuditEntry.objects.filter(operation_id=victim.pk, type="controller.decision").exists()
    assert reload(victim).last_polled_at is None and reload(victim).lease_owner != ""


@pytest.mark.django_db
def test_a_group_charges_together_only_where_the_account_has_ample_room(
    make_profile, make_operation, settings, monkeypatch, fake_provider
):
    from operations.polls import batch

    settings.DISPATCH_TASK_SPREAD, settings.DISPATCH_POLLS_PER_TASK = 1, 8
    low = make_profile(rate_limit_per_s=40)  # 40 per window: a group of 4 would be a tenth of it
    high = make_profile()
    ops = [make_operation(job_id("slow_success", polls=1), provider=p) for p in (low, low, high, high)]
    claim(now=T0)
    together = []
    real_charge = batch.charge_group

    def spy(*, claims, **kwargs):
        together.extend(op.pk for op, _ in claims)
        return real_charge(claims=claims, **kwargs)

    monkeypatch.setattr(batch, "charge_group", spy)
    assert set(work().values()) == {PollResult.POLLED}
    # The low-limit account's polls took the single poll's path, each charged right before its request.
    assert sorted(together) == sorted(op.pk for op in ops[2:])
    for op in ops:
        assert reload(op).status_requests_used == 1 and len(status_requests(fake_provider, op)) == 1


# --- the pass, idle sleep, heartbeat -------------------------------------------------------------------


@pytest.mark.django_db
def test_a_pass_reports_whether_it_did_work_and_calls_the_callback_step_once(make_operation, monkeypatch):
    calls = []
    real = dispatch.dispatch_callbacks

    def spy(*, limit: int) -> int:
        calls.append(limit)
        return real(limit=limit)

    monkeypatch.setattr(dispatch, "dispatch_callbacks", spy)
    assert dispatch.run_pass(owner=OWNER, now=T0).did_work is False
    make_operation(job_id("slow_success"))
    result = dispatch.run_pass(owner=OWNER, now=T0)
    assert result.claimed == 1 and result.did_work and not result.backlog
    assert len(calls) == 2


@pytest.mark.django_db
def test_a_full_batch_means_more_is_waiting_and_the_next_pass_comes_at_once(make_operation, settings):
    settings.DISPATCH_BATCH = 2
    for _ in range(3):
        make_operation(job_id("slow_success"))
    assert dispatch.run_pass(owner=OWNER, now=T0).backlog is True
    last = dispatch.run_pass(owner=OWNER, now=T0)
    assert (last.claimed, last.backlog) == (1, False)


@pytest.mark.django_db
def test_an_idle_dispatcher_sleeps_less_when_the_next_due_time_is_nearer(make_operation, settings):
    settings.DISPATCH_MIN_SLEEP_S = 0.05
    assert dispatch.idle_sleep_s(now=T0) == settings.DISPATCH_IDLE_SLEEP_S
    op = make_operation(job_id("slow_success"))
    Operation.objects.filter(pk=op.pk).update(next_poll_at=T0 + timedelta(seconds=0.1))
    assert dispatch.idle_sleep_s(now=T0) == pytest.approx(0.1)
    Operation.objects.filter(pk=op.pk).update(
        next_poll_at=T0 + timedelta(seconds=60), deadline_at=T0 + timedelta(seconds=0.08)
    )
    assert dispatch.idle_sleep_s(now=T0) == pytest.approx(0.08)
    # A poll due a millisecond from now is claimed with whatever else falls due meanwhile.
    Operation.objects.filter(pk=op.pk).update(next_poll_at=T0 + timedelta(seconds=0.001))
    assert dispatch.idle_sleep_s(now=T0) == settings.DISPATCH_MIN_SLEEP_S


@pytest.mark.django_db
def test_the_heartbeat_row_says_the_dispatcher_is_alive(clock):
    heartbeat.record_heartbeat(name=OWNER, started_at=T0, info={"claimed": 3})
    clock.move_to(T0 + timedelta(seconds=5), tick=False)
    heartbeat.record_heartbeat(name=OWNER, started_at=T0, info={"claimed": 7})
    beat = ProcessHeartbeat.objects.get(name=OWNER)
    assert (beat.kind, beat.last_seen_at, beat.info) == ("dispatcher", T0 + timedelta(seconds=5), {"claimed": 7})
    heartbeat.forget_heartbeat(name=OWNER)
    assert not ProcessHeartbeat.objects.exists()


@pytest.mark.django_db
def test_housekeeping_prunes_old_heartbeats_and_task_failures(clock):
    from django_q.models import Failure

    heartbeat.record_heartbeat(name="dispatcher@gone:1", started_at=T0, info={}, now=T0 - timedelta(days=2))
    heartbeat.record_heartbeat(name=OWNER, started_at=T0, info={}, now=T0)
    for days, name in ((8, "old"), (1, "recent")):
        Failure.objects.create(
            id=name,
            name=name,
            func="operations.tasks.run_poll",
            started=T0 - timedelta(days=days),
            stopped=T0 - timedelta(days=days),
            success=False,
        )
    assert heartbeat.housekeeping(now=T0) == 2
    assert list(ProcessHeartbeat.objects.values_list("name", flat=True)) == [OWNER]
    assert list(Failure.objects.values_list("name", flat=True)) == ["recent"]


# --- two dispatchers at once (PostgreSQL: row locks) ------------------------------------------------------


def _in_thread(target, *args: object) -> threading.Thread:
    def run() -> None:
        try:
            target(*args)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_dispatcher_skips_rows_another_transaction_holds(make_operation):
    ops = [make_operation(job_id("slow_success")) for _ in range(4)]
    held_ids = {ops[0].pk, ops[1].pk}
    locked, release = threading.Event(), threading.Event()

    def hold_two_rows() -> None:
        from django.db import transaction

        with transaction.atomic():
            list(Operation.objects.select_for_update().filter(pk__in=held_ids))
            locked.set()
            release.wait(10)

    holder = _in_thread(hold_two_rows)
    assert locked.wait(10)
    try:
        claims = claim(now=T0)  # does not wait for the held rows: SKIP LOCKED
    finally:
        release.set()
        holder.join(10)
    assert {c.operation_id for c in claims} == {ops[2].pk, ops[3].pk}
    assert {c.operation_id for c in claim(now=T0)} == held_ids


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_admitted_charges_of_one_account_do_not_queue_on_its_row(make_operation, fake_provider):
    op = make_operation(job_id("slow_success"))
    claim(now=T0)
    shared, release = threading.Event(), threading.Event()

    def another_charge_in_progress() -> None:
        from django.db import transaction

        with transaction.atomic():
            pacing.share_account(name=op.account)
            shared.set()
            release.wait(10)

    holder = _in_thread(another_charge_in_progress)
    assert shared.wait(10)
    try:
        assert work() == {op.pk: PollResult.POLLED}  # would block until release on an exclusive lock
    finally:
        release.set()
        holder.join(10)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_admitted_charge_waits_for_a_pause_being_recorded_and_honours_it(make_operation, fake_provider):
    op = make_operation(job_id("slow_success"))
    claim(now=T0)
    locked, results = threading.Event(), {}

    def record_a_pause() -> None:
        from django.db import transaction

        with transaction.atomic():
            pacing.lock_account(name=op.account)  # as controller._pause_account does
            locked.set()
            # The pause commits only once the worker's charge is waiting on the account row.
            waited = _wait_for_a_lock_waiter()
            results["waited"] = waited
            ProviderAccount.objects.filter(name=op.account).update(
                paused_until=T0 + timedelta(seconds=60), pause_reason="429 with Retry-After"
            )

    def worker() -> None:
        assert locked.wait(10)
        results.update(work())

    pauser = _in_thread(record_a_pause)
    charger = _in_thread(worker)
    pauser.join(10)
    charger.join(10)
    assert results == {"waited": True, op.pk: PollResult.DEFERRED}
    assert status_requests(fake_provider, op) == []
    assert reload(op).next_poll_at == T0 + timedelta(seconds=60)


def _wait_for_a_lock_waiter(timeout_s: float = 10) -> bool:
    """True once another session of this database waits on a row lock."""
    import time

    deadline = time.monotonic() + timeout_s
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            # Activity statistics are a snapshot per transaction unless cleared.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                return True
            time.sleep(0.01)
    return False


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_dispatchers_claim_each_due_operation_once(make_profile, make_operation):
    limited = make_profile(rate_limit_per_s=7)
    unlimited = make_profile()
    ops = [make_operation(job_id("slow_success"), provider=unlimited) for _ in range(60)]
    ops += [make_operation(job_id("slow_success"), provider=limited) for _ in range(20)]
    start = threading.Barrier(3)
    found: list[list[dispatch.Claim]] = []

    def dispatcher(name: str) -> None:
        start.wait(10)
        for _ in range(10):
            found.append(dispatch.claim_due(owner=name, now=T0, limit=7))

    threads = [_in_thread(dispatcher, f"dispatcher@t:{i}") for i in range(2)]
    start.wait(10)
    for thread in threads:
        thread.join(30)
    claimed = [c.operation_id for batch in found for c in batch]
    assert len(claimed) == len(set(claimed)) == len(queued())
    limited_ids = {op.pk for op in ops[60:]}
    # Both dispatchers together admitted no more than the account's allowance (7 per window).
    assert sum(pk in limited_ids for pk in claimed) == 7
    assert len(claimed) == 60 + 7
    assert connection.vendor == "postgresql"


# --- grouping polls into tasks under load ---------------------------------------------------------------


@pytest.mark.django_db
def test_a_light_pass_gets_one_task_per_poll(make_operation, settings):
    settings.DISPATCH_TASK_SPREAD = 4
    ops = [make_operation(job_id("slow_success")) for _ in range(3)]
    claim(now=T0)
    tasks = [SignedPackage.loads(p) for p in OrmQ.objects.values_list("payload", flat=True)]
    assert [task["func"] for task in tasks] == [dispatch.POLL_TASK] * 3
    assert sorted(op_id for op_id, _ in queued()) == sorted(op.pk for op in ops)


@pytest.mark.django_db
def test_under_load_polls_are_grouped_into_a_few_tasks_each_polled_once(make_operation, settings, fake_provider):
    settings.DISPATCH_TASK_SPREAD, settings.DISPATCH_POLLS_PER_TASK = 2, 3
    ops = [make_operation(job_id("slow_success", polls=0)) for _ in range(7)]
    claim(now=T0)
    tasks = [SignedPackage.loads(p) for p in OrmQ.objects.values_list("payload", flat=True)]
    assert [task["func"] for task in tasks] == [dispatch.POLLS_TASK] * 3
    assert all(len(task["args"][0]) <= 3 for task in tasks)
    assert sorted(op_id for op_id, _ in queued()) == sorted(op.pk for op in ops)
    assert set(work().values()) == {PollResult.POLLED}
    for op in ops:
        assert reload(op).status == "succeeded" and len(status_requests(fake_provider, op)) == 1


@pytest.mark.django_db
def test_a_batch_releases_the_polls_that_no_longer_fit_its_time_limit(make_operation, settings, fake_provider):
    from operations.polls.batch import poll_claims

    ops = [make_operation(job_id("slow_success", polls=0)) for _ in range(3)]
    claims = claim(now=T0)
    # A task time limit shorter than one request: only the first poll may start.
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 1}
    results = poll_claims(claims=[(c.operation_id, c.fence) for c in claims])
    assert results == [PollResult.POLLED, PollResult.STALE, PollResult.STALE]
    released = [reload(op) for op in ops if op.pk != claims[0].operation_id]
    for op in released:
        assert op.lease_owner == "" and op.status_requests_used == 0 and op.next_poll_at <= T0
        assert status_requests(fake_provider, op) == []
    # The next pass hands them out again at once.
    assert {c.operation_id for c in claim(now=T0)} == {op.pk for op in released}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_poll_held_at_its_charge_past_the_business_deadline_sends_nothing_and_opens_the_card(
    make_operation, fake_provider, clock
):
    """The gate runs when the poll starts; a lock wait at the charge can outlast the business
    deadline. No request may leave after it: the poll escalates at the charge instead."""
    business = T0 + timedelta(seconds=10)
    op = make_operation(job_id("never_finishes"), business_deadline_at=business, deadline_at=T0 + timedelta(minutes=10))
    claim(now=T0)
    locked, results = threading.Event(), {}

    def hold_the_account_past_the_deadline() -> None:
        from django.db import transaction

        with transaction.atomic():
            pacing.lock_account(name=op.account)  # as a pause being recorded does
            locked.set()
            results["waited"] = _wait_for_a_lock_waiter()
            clock.move_to(business + timedelta(seconds=2), tick=False)

    holder = _in_thread(hold_the_account_past_the_deadline)
    assert locked.wait(10)
    try:
        results.update(work())
    finally:
        holder.join(10)
    assert results == {"waited": True, op.pk: PollResult.ESCALATED}
    assert status_requests(fake_provider, op) == []
    card = Escalation.objects.get(operation_id=op.pk)
    assert card.reason == Reason.BUSINESS_DEADLINE_PASSED and reload(op).status_requests_used == 0


@pytest.mark.django_db
@pytest.mark.parametrize("which", ["business", "technical"])
def test_a_poll_due_just_before_a_deadline_sends_nothing_and_the_deadline_opens_the_card(
    make_operation, fake_provider, clock, which
):
    """A request charged half a second before a deadline leaves after the charge commits and could
    reach the provider after it: nothing is charged or sent, and the deadline opens the card."""
    stop = T0 + timedelta(seconds=20)
    if which == "business":
        op = make_operation(job_id("never_finishes"), business_deadline_at=stop, deadline_at=T0 + timedelta(minutes=10))
    else:
        op = make_operation(job_id("never_finishes"), deadline_at=stop)
    just_before = stop - timedelta(milliseconds=500)
    clock.move_to(just_before, tick=False)
    claim(now=just_before)
    assert work() == {op.pk: PollResult.DEFERRED}
    held = reload(op)
    assert held.next_poll_at == stop and held.status_requests_used == 0 and held.lease_owner == ""
    clock.move_to(stop, tick=False)
    claim(now=stop)
    work()
    assert status_requests(fake_provider, op) == []
    card = Escalation.objects.get(operation_id=op.pk)
    expected = Reason.BUSINESS_DEADLINE_PASSED if which == "business" else Reason.DEADLINE_EXCEEDED
    assert card.reason == expected and reload(op).status_requests_used == 0


@pytest.mark.django_db
def test_a_redelivered_group_task_is_a_no_op(make_operation, settings, fake_provider):
    settings.DISPATCH_TASK_SPREAD, settings.DISPATCH_POLLS_PER_TASK = 1, 8
    ops = [make_operation(job_id("slow_success", polls=1)) for _ in range(3)]
    claim(now=T0)
    (payload,) = OrmQ.objects.values_list("payload", flat=True)
    assert set(work().values()) == {PollResult.POLLED}
    # The same group task again (django-q2 is at-least-once): nothing is sent, charged or written.
    OrmQ.objects.create(key="pollerdash", payload=payload, lock=T0)
    assert set(work().values()) == {PollResult.STALE}
    for op in ops:
        assert len(status_requests(fake_provider, op)) == 1 == reload(op).status_requests_used


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("size", [2, 8])
def test_a_group_takes_the_same_statements_whatever_its_size(make_operation, settings, fake_provider, size):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from operations.polls.poll_inputs import load_for_polls

    settings.DISPATCH_TASK_SPREAD, settings.DISPATCH_POLLS_PER_TASK = 1, 8
    ops = [make_operation(job_id("slow_success", polls=3)) for _ in range(size)]
    load_for_polls([ops[0].pk])  # the per-process profile cache, warm as in a running worker
    with CaptureQueriesContext(connection) as captured:
        claim(now=T0)
        (row,) = OrmQ.objects.all()
        task = SignedPackage.loads(row.payload)
        outcome = str(pydoc.locate(task["func"])(*task["args"], **task["kwargs"]))
    assert outcome.split(",") == [PollResult.POLLED] * size
    statements = [
        q["sql"]
        for q in captured.captured_queries
        if "django_q_ormq" not in q["sql"] and q["sql"] not in ("BEGIN", "COMMIT")
    ]
    assert len(statements) == 14, "\n".join(statements)  # docs/DESIGN.md section 4
