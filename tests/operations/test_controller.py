"""The polling controller against the real fake provider over real HTTP.

Requests are counted from the provider's own log; time is the injected clock.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from operations.models import AuditEntry, Escalation, Operation, ProviderAccount, StatusCheck
from operations.polls.controller import PollResult, poll_once
from operations.providers import http
from operations.vocabulary import DelaySource, Reason, Status
from tests.support import T0, job_id

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _frozen_clock(clock):  # every test here starts at T0
    return clock


def reload(op: Operation) -> Operation:
    return Operation.objects.get(pk=op.pk)


def status_requests(fake_provider, op: Operation) -> list[dict]:
    return [r for r in fake_provider.requests(job_id=op.provider_job_id) if r["kind"] == "status"]


def open_reason(op: Operation) -> str:
    return Escalation.objects.get(operation=op, state="open").reason


# --- the four slow-path scenarios of the seed ---------------------------------------------------------


def test_slow_success_is_polled_with_growing_jittered_delays_and_succeeds(make_operation, drive, fake_provider):
    op = make_operation(job_id("slow_success", polls=4))
    drive(op)
    op = reload(op)
    assert op.status == Status.SUCCEEDED
    assert op.result["values"]["result.output_url"].endswith(".csv")
    assert op.error is None and op.completed_at is not None
    requests = status_requests(fake_provider, op)
    assert len(requests) == 5 == op.status_requests_used
    assert all(r["auth"] == "present" for r in requests)
    waits = list(StatusCheck.objects.filter(operation=op, decision="wait").order_by("sent_at"))
    assert [c.delay_source for c in waits] == [DelaySource.LOCAL_BACKOFF] * 4
    for attempt, check in enumerate(waits):
        raw_ms = min(120, 5 * 2**attempt) * 1000
        assert raw_ms * 0.5 <= check.delay_ms <= raw_ms
    gaps = [(b["at"] - a["at"]) for a, b in zip(requests, requests[1:], strict=False)]
    assert gaps[-1] > gaps[0]


def test_a_profiles_backoff_multiplier_paces_the_real_requests(make_operation, drive, fake_provider, profile):
    profile.backoff_multiplier = 1.5
    profile.save()
    op = make_operation(job_id("slow_success", polls=4))
    drive(op)
    waits = list(StatusCheck.objects.filter(operation=op, decision="wait").order_by("sent_at"))
    for attempt, check in enumerate(waits):
        raw_ms = min(120, 5 * 1.5**attempt) * 1000
        assert raw_ms * 0.5 <= check.delay_ms <= raw_ms
    requests = status_requests(fake_provider, op)
    # Four waits at 1.5x end well before four doublings would have (5 + 10 + 20 + 40 s at most).
    assert requests[-1]["at"] - requests[0]["at"] <= 5 + 7.5 + 11.25 + 16.875 + 1


def test_late_failure_keeps_the_providers_error_verbatim(make_operation, drive):
    op = make_operation(job_id("late_failure", polls=2))
    drive(op)
    op = reload(op)
    assert op.status == Status.FAILED and op.result is None
    assert op.error["provider_error"] == {
        "code": "export_failed",
        "message": "Disk quota exceeded on export worker 7",
        "detail": {"worker": 7},
    }
    assert op.error["message"] == "Disk quota exceeded on export worker 7"


def test_never_finishing_ends_with_a_human_at_the_deadline_and_no_request_after_it(
    make_operation, drive, fake_provider
):
    deadline = T0 + timedelta(seconds=90)
    op = make_operation(job_id("never_finishes"), deadline_at=deadline, max_status_requests=100)
    drive(op)
    op = reload(op)
    assert op.status == Status.NEEDS_ATTENTION
    assert open_reason(op) == Reason.DEADLINE_EXCEEDED
    assert op.provider_job_id.startswith("never_finishes__")
    sent = status_requests(fake_provider, op)
    assert sent and all(r["at"] < deadline.timestamp() for r in sent)
    assert len(sent) == op.status_requests_used


def test_duplicate_completion_makes_exactly_one_terminal_transition(make_operation, drive, rng, fake_provider):
    op = make_operation(job_id("duplicate_completion", polls=1))
    drive(op)
    op = reload(op)
    assert op.status == Status.SUCCEEDED
    completed_at, fence = op.completed_at, op.fence
    # django-q2 delivers at least once: the same task again, and a stale one, change nothing.
    assert poll_once(operation_id=op.pk, fence=fence - 1, rng=rng) == PollResult.STALE
    assert poll_once(operation_id=op.pk, fence=fence, rng=rng) == PollResult.STOPPED
    op = reload(op)
    assert (op.status, op.completed_at) == (Status.SUCCEEDED, completed_at)
    assert len(status_requests(fake_provider, op)) == 2
    completions = [
        json.loads(bytes(b))
        for b in AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").values_list(
            "body", flat=True
        )
    ]
    assert [c["data"]["decision"] for c in completions].count("succeeded") == 1


# --- bounds, counted from the provider's log ------------------------------------------------------------


def test_no_operation_gets_more_requests_than_its_budget(make_operation, drive, fake_provider):
    op = make_operation(job_id("never_finishes"), max_status_requests=4)
    drive(op)
    op = reload(op)
    assert len(status_requests(fake_provider, op)) == 4 == op.status_requests_used
    assert open_reason(op) == Reason.REQUEST_BUDGET_EXHAUSTED


def test_after_a_long_pause_exactly_one_request_is_sent(make_operation, clock, rng, fake_provider):
    op = make_operation(job_id("never_finishes"), deadline_at=T0 + timedelta(days=6))
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.POLLED
    op = reload(op)
    clock.move_to(op.next_poll_at + timedelta(days=2), tick=False)
    results = [poll_once(operation_id=reload(op).pk, fence=reload(op).fence, rng=rng) for _ in range(5)]
    assert results == [PollResult.POLLED] + [PollResult.NOT_DUE] * 4
    assert len(status_requests(fake_provider, op)) == 2


def test_the_request_is_charged_before_it_is_sent(make_operation, monkeypatch, rng, fake_provider):
    op = make_operation(job_id("slow_success"))

    def crash(**kwargs: object) -> None:
        raise RuntimeError("worker died between the charge and the send")

    monkeypatch.setattr(http, "send", crash)
    with pytest.raises(RuntimeError):
        poll_once(operation_id=op.pk, fence=op.fence, rng=rng)
    op = reload(op)
    assert op.status_requests_used == 1
    check = StatusCheck.objects.get(operation=op)
    assert check.sent_at is not None and check.received_at is None
    assert status_requests(fake_provider, op) == []


def test_a_poll_with_a_stale_fence_changes_nothing(make_operation, rng, fake_provider):
    op = make_operation(job_id("slow_success"))
    before = reload(op)
    assert poll_once(operation_id=op.pk, fence=op.fence + 7, rng=rng) == PollResult.STALE
    after = reload(op)
    assert (after.fence, after.status_requests_used, after.sequence) == (before.fence, 0, before.sequence)
    assert status_requests(fake_provider, op) == []


def test_a_late_answer_after_the_claim_moved_writes_nothing(make_operation, monkeypatch, rng):
    op = make_operation(job_id("slow_success"))
    real_send = http.send

    def send_then_lose_the_lease(**kwargs: object) -> http.RawResponse:
        response = real_send(**kwargs)
        # Meanwhile the lease expired and the dispatcher gave the poll to another worker.
        Operation.objects.filter(pk=op.pk).update(fence=999)
        return response

    monkeypatch.setattr(http, "send", send_then_lose_the_lease)
    assert poll_once(operation_id=op.pk, fence=op.fence, rng=rng) == PollResult.STALE
    after = reload(op)
    assert after.status == Status.RUNNING and after.last_polled_at is None
    assert after.status_requests_used == 1  # the request really was sent: it stays charged
    assert not AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").exists()


def test_every_decision_is_recorded_in_the_audit_chain(make_operation, drive):
    op = make_operation(job_id("slow_success", polls=1))
    drive(op)
    entries = [
        json.loads(bytes(b)) for b in AuditEntry.objects.filter(operation_id=op.pk).values_list("body", flat=True)
    ]
    assert [e["type"] for e in entries] == ["operation.registered", "controller.decision", "controller.decision"]
    first = entries[1]["data"]
    assert first["decision"] == "wait" and first["http_status"] == 200 and first["request_count"] == 1
    assert first["delay_source"] == "local_backoff" and first["interpreted_state"] == "pending"
    assert first["provider_request_id"].startswith("req_")


# --- every scenario: status, escalation reason, delay source and next poll time ----------------------------


def poll(op: Operation, rng) -> Operation:
    poll_once(operation_id=op.pk, fence=reload(op).fence, rng=rng)
    return reload(op)


def last_check(op: Operation) -> StatusCheck:
    return StatusCheck.objects.filter(operation=op).latest("sent_at")


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_seconds_is_honoured_and_pauses_the_account(make_operation, clock, rng, status):
    op = make_operation(job_id("retry_after_seconds", value=120, status=status))
    sibling = make_operation(job_id("never_finishes"))
    op = poll(op, rng)
    assert op.status == Status.RUNNING and op.delay_source == DelaySource.PROVIDER_RETRY_AFTER
    assert op.next_poll_at == T0 + timedelta(seconds=120)
    assert op.transport_failures_used == 1
    account = ProviderAccount.objects.get(name=op.account)
    assert account.paused_until == T0 + timedelta(seconds=120)
    assert reload(sibling).next_poll_at == T0 + timedelta(seconds=120)


@pytest.mark.parametrize("form", ["imf", "rfc850", "asctime"])
def test_retry_after_dates_in_every_form(make_operation, rng, form):
    op = poll(make_operation(job_id("retry_after_date", form=form, offset=30)), rng)
    assert op.delay_source == DelaySource.PROVIDER_RETRY_AFTER
    assert op.next_poll_at == T0 + timedelta(seconds=30)


def test_a_retry_after_date_in_the_past_waits_the_floor(make_operation, rng):
    op = poll(make_operation(job_id("retry_after_date", offset=-30)), rng)
    assert op.delay_source == DelaySource.PROVIDER_RETRY_AFTER
    assert op.next_poll_at == T0 + timedelta(seconds=1)


def test_a_far_future_retry_after_date_wakes_at_the_deadline(make_operation, rng):
    deadline = T0 + timedelta(minutes=30)
    op = poll(make_operation(job_id("retry_after_date", offset=86400), deadline_at=deadline), rng)
    assert op.next_poll_at == deadline


def test_a_retry_after_date_is_read_against_the_providers_clock(make_operation, rng):
    op = poll(make_operation(job_id("retry_after_date", offset=30, date_skew=-600)), rng)
    # The provider's Date says 10 minutes earlier; its Retry-After date is 630 s after its own now.
    assert op.next_poll_at == T0 + timedelta(seconds=630)


def test_rate_limited_without_hint_backs_off_long_then_escalates_rate_limited(make_operation, drive, rng):
    op = poll(make_operation(job_id("rate_limited_no_hint")), rng)
    assert op.delay_source == DelaySource.LOCAL_BACKOFF
    assert op.next_poll_at - T0 >= timedelta(seconds=15)
    assert ProviderAccount.objects.get(name=op.account).paused_until is None
    drive(op)
    op = reload(op)
    assert open_reason(op) == Reason.RATE_LIMITED and op.transport_failures_used == 3


def test_not_found_then_ok_waits_through_the_grace_window(make_operation, drive):
    op = make_operation(job_id("not_found_then_ok", polls=2))
    drive(op)
    op = reload(op)
    assert op.status == Status.SUCCEEDED and op.transport_failures_used == 2
    first = StatusCheck.objects.filter(operation=op).order_by("sent_at").first()
    assert first.http_status == 404 and first.decision == "wait"


def test_a_job_gone_after_the_grace_window_is_an_integration_failure(make_operation, drive, clock, rng):
    op = poll(make_operation(job_id("ok_then_gone", polls=1)), rng)
    clock.move_to(T0 + timedelta(seconds=61), tick=False)
    op = poll(op, rng)
    assert open_reason(op) == Reason.INTEGRATION_FAILURE
    assert last_check(op).http_status == 404


@pytest.mark.parametrize(
    ("scenario", "params", "reason"),
    [
        ("succeeded_no_result", {}, Reason.INTEGRATION_FAILURE),
        ("past_own_expiry", {}, Reason.INTEGRATION_FAILURE),
        ("unknown_state", {"value": "needs_payment"}, Reason.UNKNOWN_STATE),
        ("unknown_state", {"value": "aborted"}, Reason.UNKNOWN_STATE),
        ("unknown_state", {"value": "SUCCEEDED"}, Reason.UNKNOWN_STATE),
        ("unknown_state", {"value": "null"}, Reason.UNKNOWN_STATE),
        ("unknown_state", {"value": "missing"}, Reason.UNKNOWN_STATE),
        ("auth_revoked", {}, Reason.AUTHORIZATION_DENIED),
        ("redirect", {}, Reason.INTEGRATION_FAILURE),
    ],
)
def test_stops_for_a_human_at_once(make_operation, rng, fake_provider, scenario, params, reason):
    op = poll(make_operation(job_id(scenario, **params)), rng)
    assert op.status == Status.NEEDS_ATTENTION and op.next_poll_at is None
    assert open_reason(op) == reason
    assert len(status_requests(fake_provider, op)) == 1


def test_unknown_state_records_the_raw_state(make_operation, rng):
    op = poll(make_operation(job_id("unknown_state", value="needs_payment")), rng)
    assert op.last_provider_state == "needs_payment"
    assert "needs_payment" in Escalation.objects.get(operation=op).detail


def test_partial_success_keeps_counts(make_operation, drive):
    op = make_operation(job_id("partial", total=100, failed=3))
    drive(op)
    op = reload(op)
    assert op.status == Status.PARTIALLY_SUCCEEDED and op.error is None
    assert op.result["counts"] == {"total": 100, "succeeded": 97, "failed": 3}


@pytest.mark.parametrize(
    ("value", "source", "delay_s"),
    [
        ("-1", DelaySource.LOCAL_BACKOFF, None),
        ("1.5", DelaySource.LOCAL_BACKOFF, None),
        ("plus3", DelaySource.LOCAL_BACKOFF, None),
        ("comma", DelaySource.LOCAL_BACKOFF, None),
        ("two", DelaySource.LOCAL_BACKOFF, None),
        ("garbage", DelaySource.LOCAL_BACKOFF, None),
        ("0", DelaySource.PROVIDER_RETRY_AFTER, 1),
        ("space120", DelaySource.PROVIDER_RETRY_AFTER, 120),
    ],
)
def test_bad_retry_after_hints_are_ignored_or_floored(make_operation, rng, value, source, delay_s):
    op = poll(make_operation(job_id("bad_hint", value=value)), rng)
    assert op.status == Status.RUNNING and op.delay_source == source
    if delay_s is not None:
        assert op.next_poll_at == T0 + timedelta(seconds=delay_s)
    else:
        assert timedelta(seconds=2.5) <= op.next_poll_at - T0 <= timedelta(seconds=5)
        assert last_check(op).warnings


def test_a_huge_retry_after_wakes_at_the_deadline(make_operation, rng):
    deadline = T0 + timedelta(minutes=10)
    op = poll(make_operation(job_id("bad_hint", value="1e10"), deadline_at=deadline), rng)
    assert op.delay_source == DelaySource.PROVIDER_RETRY_AFTER and op.next_poll_at == deadline


@pytest.mark.parametrize(
    ("value", "source", "delay_s"),
    [
        ("30", DelaySource.PROVIDER_POLL_HINT, 30),
        ("0", DelaySource.PROVIDER_POLL_HINT, 1),
        ("1.5", DelaySource.PROVIDER_POLL_HINT, 1.5),
        ("-5", DelaySource.LOCAL_BACKOFF, None),
        ("86400000", DelaySource.LOCAL_BACKOFF, None),
        ("string", DelaySource.LOCAL_BACKOFF, None),
    ],
)
def test_body_poll_hints_are_validated(make_operation, rng, value, source, delay_s):
    op = poll(make_operation(job_id("poll_interval_hint", value=value)), rng)
    assert op.delay_source == source
    if delay_s is not None:
        assert op.next_poll_at == T0 + timedelta(seconds=delay_s)


def test_a_poll_hint_is_capped_at_the_deadline(make_operation, rng):
    deadline = T0 + timedelta(seconds=20)
    op = poll(make_operation(job_id("poll_interval_hint", value=30), deadline_at=deadline), rng)
    assert op.delay_source == DelaySource.PROVIDER_POLL_HINT and op.next_poll_at == deadline


def test_a_next_check_time_hint_is_followed(make_operation, rng):
    op = poll(make_operation(job_id("poll_time_hint", offset=45)), rng)
    assert op.delay_source == DelaySource.PROVIDER_POLL_HINT and op.next_poll_at == T0 + timedelta(seconds=45)


def test_a_body_over_the_cap_is_a_transport_failure_then_an_integration_failure(make_operation, rng, drive):
    op = poll(make_operation(job_id("huge_body")), rng)
    check = last_check(op)
    assert check.transport_error == "body_too_large" and op.transport_failures_used == 1
    assert op.status == Status.RUNNING and check.http_status == 200
    drive(op)
    op = reload(op)
    assert op.transport_failures_used == 3 and open_reason(op) == Reason.INTEGRATION_FAILURE


@pytest.mark.parametrize("kind", ["truncated", "html", "empty", "nan", "dupkeys"])
def test_invalid_json_is_a_transport_failure_then_an_integration_failure(make_operation, drive, kind):
    op = make_operation(job_id("invalid_json", kind=kind))
    drive(op)
    op = reload(op)
    assert op.transport_failures_used == 3 and open_reason(op) == Reason.INTEGRATION_FAILURE
    assert last_check(op).interpreted_state == "invalid_body"


@pytest.mark.parametrize("kind", ["deep", "surrogate", "surrogate_bytes", "nul", "infinity"])
def test_a_hostile_body_is_an_invalid_body_like_any_other(make_operation, drive, kind):
    op = make_operation(job_id("hostile_body", kind=kind))
    assert drive(op) == [PollResult.POLLED] * 3
    op = reload(op)
    assert op.status_requests_used == 3 and op.transport_failures_used == 3
    assert open_reason(op) == Reason.INTEGRATION_FAILURE
    checks = StatusCheck.objects.filter(operation=op).order_by("sent_at")
    assert [check.interpreted_state for check in checks] == ["invalid_body"] * 3
    assert AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").count() == 3


def test_an_unknown_state_longer_than_its_column_is_kept_cut(make_operation, rng):
    op = poll(make_operation(job_id("hostile_body", kind="long_state")), rng)
    assert op.status == Status.NEEDS_ATTENTION and open_reason(op) == Reason.UNKNOWN_STATE
    assert last_check(op).provider_state == "x" * 200 and op.last_provider_state == "x" * 200


def test_a_slowloris_body_is_cut_at_the_whole_request_limit(make_operation, rng, settings):
    settings.POLL_HTTP_TOTAL_TIMEOUT_S = 0.6
    started = time.perf_counter()  # the clock is frozen; elapsed real time needs a real timer
    op = poll(make_operation(job_id("slowloris", chunk_delay_ms=200)), rng)
    check = last_check(op)
    assert check.transport_error == "timeout" and op.transport_failures_used == 1
    assert time.perf_counter() - started < 3


def test_flaky_5xx_waits_through_server_errors(make_operation, drive):
    op = make_operation(job_id("flaky_5xx", pattern="500.200.502.200", polls=3), max_status_requests=20)
    drive(op)
    op = reload(op)
    assert op.status == Status.SUCCEEDED and op.transport_failures_used == 2


def test_5xx_that_spends_the_transport_budget_escalates_provider_failure(make_operation, drive):
    op = make_operation(job_id("flaky_5xx", pattern="500.502.504"))
    drive(op)
    assert open_reason(reload(op)) == Reason.PROVIDER_FAILURE


def test_a_terminal_status_never_changes_and_a_later_flip_is_a_warning(make_operation, monkeypatch, rng, drive):
    op = make_operation(job_id("terminal_flip", polls=1))
    drive(op)
    op = reload(op)
    assert op.status == Status.SUCCEEDED
    # The next answer (a flip to "failed") arrives for a poll that was in flight when a human
    # closed the operation: it is kept as evidence, and the status stays closed.
    op2 = make_operation(job_id("terminal_flip", polls=0))
    real_send = http.send

    def close_while_in_flight(**kwargs: object) -> http.RawResponse:
        response = real_send(**kwargs)
        Operation.objects.filter(pk=op2.pk).update(status=Status.CLOSED, error={"code": "closed_by_human"})
        return response

    monkeypatch.setattr(http, "send", close_while_in_flight)
    op2 = poll(op2, rng)
    assert op2.status == Status.CLOSED
    assert any("after the operation was already closed" in w for w in op2.warnings)
    assert last_check(op2).decision == "ignored_after_terminal"


def test_an_unset_credential_sends_no_authorization(make_operation, make_profile, rng, fake_provider):
    bare = make_profile(credential_env="")
    op = poll(make_operation(job_id("slow_success"), provider=bare), rng)
    assert status_requests(fake_provider, op)[0]["auth"] == "absent"


def test_trickled_headers_are_cut_at_the_whole_request_limit(make_operation, rng, settings):
    # Each byte arrives well within the read timeout, so only the whole-request limit can stop it.
    settings.POLL_HTTP_TOTAL_TIMEOUT_S = 0.6
    started = time.perf_counter()
    op = poll(make_operation(job_id("slowloris", mode="headers", chunk_delay_ms=100)), rng)
    check = last_check(op)
    assert check.transport_error == "timeout" and "whole request" in check.reason
    assert op.transport_failures_used == 1 and op.status == Status.RUNNING
    assert time.perf_counter() - started < 3


def test_every_change_an_agent_can_see_moves_the_sequence(make_operation, monkeypatch, rng):
    op = make_operation(job_id("slow_success", polls=1))
    seen = [reload(op).sequence]
    real_send = http.send

    def look_while_in_flight(**kwargs: object) -> http.RawResponse:
        # Charged and running, request count up: an agent reading now must see a new sequence.
        seen.append(reload(op).sequence)
        return real_send(**kwargs)

    monkeypatch.setattr(http, "send", look_while_in_flight)
    op = poll(op, rng)
    seen.append(op.sequence)
    assert seen == sorted(set(seen)), seen
    assert len(seen) == 3


def test_an_outcome_whose_status_check_is_gone_is_written_whole_on_either_database(make_operation, rng):
    # The fenced UPDATE of the operation decides whether the outcome is written; what the
    # statement reports must be that UPDATE's rows, not the status check's, or the operation would
    # change without its audit entry.
    from operations.lifecycle.claims import charge
    from operations.lifecycle.polls import record_outcome
    from operations.polls.controller import interpret
    from operations.polls.poll_inputs import load_for_polls

    op = make_operation(job_id("slow_success"))
    fence = reload(op).fence
    charged = charge(op=load_for_polls([op.pk])[op.pk], fence=fence, worker="w", started_at=T0, now=T0, reserved=False)
    assert charged is not None
    loaded, check = charged
    StatusCheck.objects.filter(pk=check.pk).delete()
    raw = http.RawResponse(http_status=200, body=b'{"state":"running"}', body_bytes=19)
    decision, answer = interpret(op=loaded, raw=raw, received_at=T0, rng=rng)
    assert record_outcome(op=loaded, check=check, decision=decision, answer=answer) is True
    written = reload(op)
    assert written.fence == fence + 2 and written.lease_owner == "" and written.next_poll_at > T0
    assert AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").count() == 1
    assert not StatusCheck.objects.filter(pk=check.pk).exists()
