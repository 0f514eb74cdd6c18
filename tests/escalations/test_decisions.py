"""Decision services against real escalations opened by the controller and the real fake provider."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.db import connection
from django.utils import timezone

from operations.decisions.check import COMMENT_REQUIRED, NOT_OFFERED, SAME_RESPONDER, STALE
from operations.decisions.services import escalation_decide
from operations.lifecycle.cards import supersede_card
from operations.models import (
    AuditEntry,
    Authorization,
    CallbackDelivery,
    Decision,
    Escalation,
    Operation,
    ProviderAccount,
    StatusCheck,
)
from operations.polls.controller import PollResult, poll_once
from operations.providers.credentials import credentials_publish_all
from operations.vocabulary import DelaySource, Reason, Status
from tests.support import T0, signed_in_now

pytestmark = pytest.mark.django_db


def reload(obj):
    return type(obj).objects.get(pk=obj.pk)


def audit_types(op: Operation) -> list[str]:
    return list(AuditEntry.objects.filter(operation_id=op.pk).order_by("pk").values_list("type", flat=True))


def audit_data(op: Operation, entry_type: str) -> list[dict]:
    bodies = (
        AuditEntry.objects.filter(operation_id=op.pk, type=entry_type).order_by("pk").values_list("body", flat=True)
    )
    return [json.loads(bytes(body))["data"] for body in bodies]


def status_requests(fake_provider, op: Operation) -> list[dict]:
    return [r for r in fake_provider.requests(job_id=op.provider_job_id) if r["kind"] == "status"]


def decide(esc: Escalation, user: object, option: str, *, version: object = None, comment: str = ""):
    return escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=user,
        option_id=option,
        card_version=reload(esc).version if version is None else version,
        comment=comment,
    )


def test_an_extension_grants_new_chained_bounds_and_the_next_poll_happens_with_manual_extension(
    stopped, alice, clock, rng, fake_provider
):
    esc = stopped("never_finishes")
    op = reload(esc.operation)
    assert esc.reason == Reason.DEADLINE_EXCEEDED and op.status == Status.NEEDS_ATTENTION
    sent_before = len(status_requests(fake_provider, op))
    used, attempt = op.status_requests_used, op.backoff_attempt
    decided_at = T0 + timedelta(minutes=5)
    clock.move_to(decided_at, tick=False)

    result = decide(esc, alice, "extend:15m:4", comment="customer waiting on it")

    assert result.outcome == Decision.Outcome.APPLIED
    op = reload(op)
    assert op.status == Status.RUNNING
    assert op.deadline_at == decided_at + timedelta(minutes=15)
    # Exactly the 4 checks from now, paced across the 15 minutes; backoff is not restarted.
    assert op.max_status_requests == used + 4
    assert op.next_poll_at == decided_at and op.delay_source == DelaySource.MANUAL_EXTENSION
    assert op.backoff_attempt == attempt and op.check_spacing_s == 225.0
    chain = list(Authorization.objects.filter(operation=op).order_by("number"))
    assert [(a.number, a.kind) for a in chain] == [(1, "initial"), (2, "extension")]
    assert chain[1].previous_id == chain[0].pk and chain[1].granted_by == alice
    assert chain[1].escalation_id == esc.pk and chain[1].comment == "customer waiting on it"
    assert chain[1].check_spacing_s == 225.0 and chain[1].max_status_requests == used + 4
    decision = result.decision
    assert decision.user == alice and decision.option == "extend:15m:4"
    assert decision.new_deadline_at == op.deadline_at and decision.new_max_status_requests == used + 4
    assert decision.card_snapshot["operation"]["status"] == "needs_attention"
    assert decision.card_snapshot["options"][0]["id"] == "extend:15m:4"
    assert decision.card_version == esc.version
    assert reload(esc).state == Escalation.State.DECIDED and reload(esc).version == esc.version + 1
    [entry] = audit_data(op, "human.decision")
    assert entry["option"] == "extend:15m:4" and entry["new_max_requests"] == used + 4
    assert entry["check_spacing_ms"] == 225_000
    assert entry["authorization_number"] == 2 and entry["decision_id"] == decision.pk
    assert reload(decision).audit_entry_id is not None

    # The next poll goes to the real provider at once.
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.POLLED
    assert len(status_requests(fake_provider, op)) == sent_before + 1
    check = StatusCheck.objects.filter(operation=op).latest("sent_at")
    assert check.due_at == decided_at and check.sent_at == decided_at
    op = reload(op)
    assert op.status == Status.RUNNING
    # The next check is paced by the window, not by backoff: in the second of its four 225 s slots,
    # at least floor x spacing into it, and a margin (5 s) before its end.
    assert op.delay_source == DelaySource.MANUAL_EXTENSION
    assert timedelta(seconds=225 + 112.5) <= op.next_poll_at - decided_at <= timedelta(seconds=450 - 5)


def test_a_rate_limited_extension_waits_for_the_providers_pause(stopped, alice, clock):
    esc = stopped("never_finishes")
    op = esc.operation
    ProviderAccount.objects.filter(name=op.account).update(paused_until=timezone.now() + timedelta(minutes=3))
    Escalation.objects.filter(pk=esc.pk).update(reason=Reason.RATE_LIMITED)
    result = decide(esc, alice, "extend:15m:4")
    op = reload(op)
    assert result.outcome == "applied"
    assert op.next_poll_at == timezone.now() + timedelta(minutes=3)
    assert op.deadline_at == timezone.now() + timedelta(minutes=18)


def test_a_stale_or_decided_card_is_refused_and_the_refusal_recorded(stopped, alice, bob):
    esc = stopped()
    version = esc.version
    assert decide(esc, alice, "extend:15m:4", version=version).outcome == "applied"
    refused = decide(esc, bob, "close", version=version)
    assert refused.refused and refused.message == STALE == "state changed — review again"
    assert refused.decision.user == bob and refused.decision.option == "close"
    assert refused.decision.card_version == version
    assert reload(esc.operation).status == Status.RUNNING
    [entry] = audit_data(esc.operation, "human.refused")
    assert entry == {
        "escalation_id": esc.pk,
        "decision_id": refused.decision.pk,
        "option": "close",
        "card_version": version,
        "reason": STALE,
        "authentication": refused.decision.authentication,
        "channel": "web",
        "channel_identity": None,
    }
    assert refused.decision.authentication["method"] == "password"


@pytest.mark.parametrize(
    "forged",
    ["extend:600m:100", "extend:15m:40", "retry_after_rotation", "accept_output", "continue", "extend:15m:4;close"],
)
def test_a_forged_option_is_refused_recorded_and_changes_nothing(stopped, alice, forged):
    esc = stopped()
    op_before = reload(esc.operation)
    result = decide(esc, alice, forged)
    assert result.refused and result.decision.refusal_reason == NOT_OFFERED
    op = reload(op_before)
    assert (op.status, op.deadline_at, op.max_status_requests) == (
        Status.NEEDS_ATTENTION,
        op_before.deadline_at,
        op_before.max_status_requests,
    )
    assert Authorization.objects.filter(operation=op).count() == 1
    assert reload(esc).state == Escalation.State.OPEN and reload(esc).version == esc.version
    assert audit_types(op)[-1] == "human.refused"


def test_a_garbage_version_is_refused_as_stale(stopped, alice):
    esc = stopped()
    assert decide(esc, alice, "close", version="1; drop table").message == STALE


def test_accept_output_needs_a_comment_and_a_second_different_responder(stopped, alice, bob, fake_provider):
    esc = stopped("succeeded_no_result", callback_url="https://agent.example/cb")
    assert esc.reason == Reason.INTEGRATION_FAILURE
    assert decide(esc, alice, "accept_output").message == COMMENT_REQUIRED

    first = decide(esc, alice, "accept_output", comment="the file is in the bucket, checked by hand")
    assert first.outcome == Decision.Outcome.AWAITING_SECOND
    assert reload(esc.operation).status == Status.NEEDS_ATTENTION

    again = decide(esc, alice, "accept_output", comment="really")
    assert again.refused and again.message == SAME_RESPONDER

    second = decide(esc, bob, "accept_output", comment="confirmed")
    assert second.outcome == Decision.Outcome.APPLIED and second.decision.confirms_id == first.decision.pk
    op = reload(esc.operation)
    assert op.status == Status.SUCCEEDED and op.completed_at is not None and op.error is None
    assert op.result["accepted"]["by"] == ["alice", "bob"]
    assert CallbackDelivery.objects.filter(operation=op, event_type="operation.completed").count() == 1
    outcomes = [d["outcome"] for d in audit_data(op, "human.decision")]
    assert outcomes == ["awaiting_second", "applied"]


def test_close_ends_the_operation_with_the_reason_and_a_completion_event(stopped, alice):
    esc = stopped(callback_url="https://agent.example/cb")
    result = decide(esc, alice, "close", comment="job no longer needed")
    op = reload(esc.operation)
    assert result.outcome == "applied" and op.status == Status.CLOSED
    assert op.error["code"] == "closed_by_human"
    assert "Deadline exceeded" in op.error["message"] and "job no longer needed" in op.error["message"]
    assert op.next_poll_at is None and op.completed_at is not None
    assert CallbackDelivery.objects.filter(operation=op, event_type="operation.completed").exists()
    assert audit_types(op)[-1] == "human.decision"


def test_cancel_at_provider_confirmed_ends_the_operation_cancelled(stopped, alice, fake_provider):
    esc = stopped("cancel_ok")
    result = decide(esc, alice, "cancel_at_provider", comment="customer withdrew the order")
    op = reload(esc.operation)
    assert op.status == Status.CANCELLED and op.cancel_state == "confirmed"
    assert op.error["code"] == "cancelled_at_provider"
    # What is true now: the provider's last word on the job is the cancel's answer, not "running".
    assert op.last_provider_state == "cancelled" != esc.operation.last_provider_state
    cancels = [r for r in fake_provider.requests(job_id=op.provider_job_id) if r["kind"] == "cancel"]
    assert len(cancels) == 1 and cancels[0]["method"] == "POST"
    decision = reload(result.decision)
    assert decision.provider_response["state"] == "confirmed" and decision.provider_response["http_status"] == 200
    assert reload(esc).state == Escalation.State.DECIDED
    assert audit_types(op)[-2:] == ["human.decision", "provider.cancel_response"]


def test_the_dashboard_does_not_send_a_cancel_while_another_live_operation_watches_the_job(
    stopped, make_operation, fake_provider, alice
):
    esc = stopped("cancel_ok")
    job = esc.operation.provider_job_id
    make_operation(job)  # the operator's `watch --again`
    result = decide(esc, alice, "cancel_at_provider")
    assert result.decision.provider_response["state"] == "not_forwarded"
    assert "not sent" in result.message
    assert not [r for r in fake_provider.requests(job_id=job) if r["kind"] == "cancel"]
    esc.refresh_from_db()
    assert esc.state == Escalation.State.OPEN and esc.operation.status == "needs_attention"


def test_an_unconfirmed_cancel_keeps_the_card_open_with_the_answer_and_is_never_sent_twice(
    stopped, alice, bob, fake_provider
):
    esc = stopped("cancel_unsupported")
    version = esc.version
    result = decide(esc, alice, "cancel_at_provider")
    assert result.outcome == "applied" and "not supported" in result.message
    esc = reload(esc)
    op = reload(esc.operation)
    assert op.status == Status.NEEDS_ATTENTION and op.cancel_state == "not_supported"
    assert esc.state == Escalation.State.OPEN and esc.version == version + 2
    assert esc.cancel_response["http_status"] == 405
    again = decide(esc, bob, "cancel_at_provider")
    assert again.refused and again.decision.refusal_reason == NOT_OFFERED
    cancels = [r for r in fake_provider.requests(job_id=op.provider_job_id) if r["kind"] == "cancel"]
    assert len(cancels) == 1
    # The card still offers the rest, against its new version.
    assert decide(esc, bob, "close").outcome == "applied"


def test_treat_as_pending_adds_that_state_for_this_operation_and_extends(stopped, alice, rng, clock):
    esc = stopped("unknown_state", params={"value": "needs_payment"})
    assert esc.reason == Reason.UNKNOWN_STATE
    result = decide(esc, alice, "treat_as_pending:15m:4")
    op = reload(esc.operation)
    assert result.outcome == "applied"
    assert op.extra_pending_states == ["needs_payment"] and op.status == Status.RUNNING
    assert result.decision.authorization.kind == "treat_as_pending"
    assert result.decision.authorization.extra_pending_states == ["needs_payment"]
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.POLLED
    op = reload(op)
    assert op.status == Status.RUNNING and op.last_provider_state == "needs_payment"


def test_retry_after_rotation_appears_only_once_the_credential_changed(stopped, alice, monkeypatch, rng, fake_provider):
    esc = stopped("auth_revoked", params={"accept": "rotated42"})
    assert esc.reason == Reason.AUTHORIZATION_DENIED
    assert decide(esc, alice, "retry_after_rotation").decision.refusal_reason == NOT_OFFERED
    monkeypatch.setenv("PROVIDER_FAKE_TOKEN", "new-token-rotated42")
    # Rotated in the workers' environment; it counts once the workers have published it.
    assert decide(esc, alice, "retry_after_rotation").decision.refusal_reason == NOT_OFFERED
    credentials_publish_all()
    result = decide(esc, alice, "retry_after_rotation")
    assert result.outcome == "applied"
    op = reload(esc.operation)
    assert op.status == Status.RUNNING and result.decision.authorization.kind == "retry_after_rotation"
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.POLLED
    assert reload(op).last_http_status == 200


def test_approve_one_check_allows_exactly_one_status_request(make_profile, stopped, alice, rng, clock, fake_provider):
    gated = make_profile(approval_mode="per_call", cancel_method="", cancel_url="")
    esc = stopped("slow_success", provider=gated, params={"polls": 5})
    assert esc.reason == Reason.PER_CALL_APPROVAL
    op = reload(esc.operation)
    assert status_requests(fake_provider, op) == []
    assert decide(esc, alice, "approve_one_check").outcome == "applied"
    op = reload(op)
    assert op.approved_checks == 1
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.POLLED
    op = reload(op)
    assert len(status_requests(fake_provider, op)) == 1
    # The next due poll needs a new approval: a new card, and no request without it.
    clock.move_to(op.next_poll_at, tick=False)
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.ESCALATED
    assert len(status_requests(fake_provider, op)) == 1
    assert Escalation.objects.get(operation=op, state="open").reason == Reason.PER_CALL_APPROVAL


def test_an_approval_after_the_deadline_gets_a_short_window_so_its_one_request_is_sent(
    make_profile, stopped, alice, rng, clock, fake_provider
):
    from escalations.selectors.cards import card_by_id
    from operations.cards.options import ONE_REQUEST_WINDOW

    gated = make_profile(approval_mode="per_call", cancel_method="", cancel_url="")
    esc = stopped("slow_success", provider=gated, params={"polls": 5})
    op = reload(esc.operation)
    clock.move_to(op.deadline_at + timedelta(minutes=3), tick=False)
    approve = next(
        o for o in card_by_id(escalation_id=esc.pk, now=timezone.now()).card.options if o.id == "approve_one_check"
    )
    assert "the deadline moves to" in approve.effect
    assert decide(esc, alice, "approve_one_check").outcome == "applied"
    op = reload(op)
    assert op.deadline_at == timezone.now() + ONE_REQUEST_WINDOW and op.approved_checks == 1
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.POLLED
    assert len(status_requests(fake_provider, op)) == 1


def test_an_unused_approval_does_not_outlive_the_next_decision(make_profile, stopped, alice, rng, clock, fake_provider):
    gated = make_profile(approval_mode="per_call", cancel_method="", cancel_url="")
    esc = stopped("slow_success", provider=gated, params={"polls": 5})
    assert decide(esc, alice, "approve_one_check").outcome == "applied"
    op = reload(esc.operation)
    # The approved check never went out: the deadline passed first.
    clock.move_to(op.deadline_at, tick=False)
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.ESCALATED
    deadline_card = Escalation.objects.get(operation=op, state="open")
    assert deadline_card.reason == Reason.DEADLINE_EXCEEDED
    assert decide(deadline_card, alice, "extend:15m:4").outcome == "applied"
    op = reload(op)
    assert op.approved_checks == 0
    # More time is not an approval: the next check asks a human again and sends nothing.
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.ESCALATED
    assert Escalation.objects.get(operation=op, state="open").reason == Reason.PER_CALL_APPROVAL
    assert status_requests(fake_provider, op) == []


def test_inspect_is_recorded_and_changes_nothing_else(stopped, alice):
    esc = stopped()
    result = decide(esc, alice, "inspect")
    assert result.outcome == Decision.Outcome.RECORDED
    assert result.redirect_url.endswith(f"/console/{quote(esc.operation.provider_job_id, safe='')}")
    assert reload(esc).state == Escalation.State.OPEN and reload(esc).version == esc.version
    assert audit_types(esc.operation)[-1] == "human.inspect"


def test_a_superseded_card_refuses_decisions(stopped, alice):
    esc = stopped()
    from django.db import transaction

    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=esc.operation_id)
        superseded = supersede_card(operation=op, reason="agent cancelled the watch")
    assert superseded.state == Escalation.State.SUPERSEDED and superseded.version == esc.version + 1
    assert decide(esc, alice, "close", version=esc.version).message == STALE


def test_nothing_is_decided_by_time_passing(stopped, clock, rng):
    esc = stopped()
    clock.move_to(T0 + timedelta(days=30), tick=False)
    op = reload(esc.operation)
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.STOPPED
    assert reload(esc).state == Escalation.State.OPEN and reload(op).status == Status.NEEDS_ATTENTION


@pytest.mark.django_db(transaction=True)
def test_two_responders_deciding_the_same_card_at_once_apply_exactly_one(stopped, alice, bob):
    esc = stopped()
    version = esc.version
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}
    errors: list[BaseException] = []

    def run(user: object, option: str) -> None:
        try:
            barrier.wait(timeout=10)
            results[user.username] = escalation_decide(
                sign_in=signed_in_now(),
                escalation_id=esc.pk,
                user=user,
                option_id=option,
                card_version=version,
            )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=run, args=(alice, "extend:15m:4")),
        threading.Thread(target=run, args=(bob, "extend:60m:8")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    outcomes = sorted(r.outcome for r in results.values())
    assert outcomes == ["applied", "refused"]
    refused = next(r for r in results.values() if r.refused)
    assert refused.message == STALE
    assert Decision.objects.filter(escalation=esc, outcome="applied").count() == 1
    assert Decision.objects.filter(escalation=esc, outcome="refused").count() == 1
    assert Authorization.objects.filter(operation=esc.operation, kind="extension").count() == 1
    assert audit_types(esc.operation)[-2:] == ["human.decision", "human.refused"]


def test_a_web_process_without_the_credential_never_sees_a_rotation(stopped, alice, monkeypatch):
    esc = stopped("auth_revoked")
    # The dashboard runs where no provider credential is set; the workers still hold the old one.
    monkeypatch.delenv("PROVIDER_FAKE_TOKEN")
    assert decide(esc, alice, "retry_after_rotation").decision.refusal_reason == NOT_OFFERED
