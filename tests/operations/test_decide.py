"""Every row of docs/DESIGN.md section 5, as pure decisions (no I/O, clock or randomness of their own)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from operations.polling.decide import decide
from operations.polling.model import Action, Bounds, Observation, Policy
from operations.polling.states import StateTable
from operations.vocabulary import DelaySource, Reason, Status

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
POLICY = Policy(
    profile_slug="acme-export",
    state_field="state",
    table=StateTable(
        pending=frozenset({"queued", "running"}),
        success=frozenset({"succeeded"}),
        failure=frozenset({"failed"}),
        cancelled=frozenset({"cancelled"}),
        expired=frozenset({"expired"}),
    ),
    required_result_fields=("result.output_url",),
    expiry_field="expires_at",
    progress_field="progress_percent",
    counts_fields={"total": "summary.processed", "succeeded": "summary.succeeded", "failed": "summary.failed"},
    poll_hint_seconds_field="poll_after_seconds",
    poll_hint_time_field="next_check_at",
    not_found_grace_s=60,
)


def bounds(**overrides: object) -> Bounds:
    values: dict[str, object] = {
        "registered_at": NOW - timedelta(minutes=5),
        "deadline_at": NOW + timedelta(hours=1),
        "requests_used": 3,
        "max_requests": 12,
        "transport_failures_used": 0,
        "max_transport_failures": 3,
        "backoff_attempt": 1,
    }
    values.update(overrides)
    return Bounds(**values)


def ok(body: object, *, status: int = 200, headers: dict[str, tuple[str, ...]] | None = None) -> Observation:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Observation(received_at=NOW, http_status=status, headers=headers or {}, body=raw)


def run(observation: Observation, **bound_overrides: object):
    return decide(policy=POLICY, bounds=bounds(**bound_overrides), observation=observation, rng=random.Random(3))


def test_success_with_required_fields_succeeds_with_the_result() -> None:
    d = run(ok({"state": "succeeded", "result": {"output_url": "https://x/y.csv"}}))
    assert (d.action, d.status) == (Action.COMPLETE, Status.SUCCEEDED)
    assert d.result == {"values": {"result.output_url": "https://x/y.csv"}, "counts": None}
    assert d.error is None and d.next_poll_at is None and not d.charge_transport


def test_success_with_failed_counts_is_partial() -> None:
    body = {
        "state": "succeeded",
        "result": {"output_url": "u"},
        "summary": {"processed": 100, "succeeded": 97, "failed": 3},
    }
    d = run(ok(body))
    assert d.status is Status.PARTIALLY_SUCCEEDED
    assert d.result["counts"] == {"total": 100, "succeeded": 97, "failed": 3}


def test_success_where_every_item_failed_is_still_partial_with_its_counts() -> None:
    body = {
        "state": "succeeded",
        "result": {"output_url": "u"},
        "summary": {"processed": 9, "succeeded": 0, "failed": 9},
    }
    d = run(ok(body))
    assert d.status is Status.PARTIALLY_SUCCEEDED and d.error is None
    assert d.result["counts"] == {"total": 9, "succeeded": 0, "failed": 9}


@pytest.mark.parametrize("result", [{}, {"output_url": None}, {"output_url": ""}, None])
def test_success_without_its_result_is_a_contradiction(result: object) -> None:
    d = run(ok({"state": "succeeded", "result": result}))
    assert (d.action, d.reason) == (Action.ESCALATE, Reason.INTEGRATION_FAILURE)
    assert "result.output_url" in d.explanation


def test_pending_waits_with_local_backoff() -> None:
    d = run(ok({"state": "running", "progress_percent": 40}))
    assert (d.action, d.status, d.delay_source) == (Action.WAIT, Status.RUNNING, DelaySource.LOCAL_BACKOFF)
    assert timedelta(seconds=5) <= d.next_poll_at - NOW <= timedelta(seconds=10)
    assert d.progress_percent == 40 and d.backoff_attempt == 2


def test_pending_with_a_poll_hint_follows_the_hint() -> None:
    d = run(ok({"state": "running", "poll_after_seconds": 42}))
    assert d.delay_source is DelaySource.PROVIDER_POLL_HINT and d.next_poll_at == NOW + timedelta(seconds=42)


def test_pending_past_the_jobs_own_expiry_is_a_contradiction() -> None:
    d = run(ok({"state": "running", "expires_at": "2000-01-01T00:00:00Z"}))
    assert (d.action, d.reason) == (Action.ESCALATE, Reason.INTEGRATION_FAILURE)
    assert "expiry" in d.explanation


def test_pending_before_its_own_expiry_waits() -> None:
    d = run(ok({"state": "running", "expires_at": "2099-01-01T00:00:00Z"}))
    assert d.action is Action.WAIT


def test_failure_keeps_the_providers_error_verbatim() -> None:
    error = {"code": "export_failed", "message": "Disk quota exceeded", "detail": {"worker": 7}}
    d = run(ok({"state": "failed", "error": error}))
    assert d.status is Status.FAILED
    assert d.error == {"code": "provider_failed", "message": "Disk quota exceeded", "provider_error": error}


def test_a_huge_provider_error_is_capped() -> None:
    d = run(ok({"state": "failed", "error": {"message": "x" * 20_000}}))
    assert d.error["provider_error"]["truncated"] is True
    assert len(d.error["provider_error"]["excerpt"]) <= POLICY.error_cap_bytes


@pytest.mark.parametrize(("state", "status"), [("cancelled", Status.CANCELLED), ("expired", Status.EXPIRED)])
def test_cancelled_and_expired_are_terminal(state: str, status: Status) -> None:
    d = run(ok({"state": state}))
    assert (d.action, d.status) == (Action.COMPLETE, status)


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ({"state": "needs_payment"}, "'needs_payment'"),
        ({"state": "aborted"}, "'aborted'"),
        ({"state": "Succeeded"}, "'Succeeded'"),
        ({"state": "succeeded "}, "'succeeded '"),
        ({"state": None}, "<null>"),
        ({}, "<missing>"),
        ({"state": 42}, "<int: 42>"),
        ([1, 2], "<missing>"),
    ],
)
def test_a_state_outside_the_table_stops_for_a_human(body: object, shown: str) -> None:
    d = run(ok(body))
    assert (d.action, d.reason, d.status) == (Action.ESCALATE, Reason.UNKNOWN_STATE, Status.NEEDS_ATTENTION)
    assert shown in d.explanation


def test_treat_as_pending_applies_only_to_the_named_state() -> None:
    assert run(ok({"state": "needs_payment"}), extra_pending=frozenset({"needs_payment"})).action is Action.WAIT
    assert run(ok({"state": "aborted"}), extra_pending=frozenset({"needs_payment"})).action is Action.ESCALATE


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b'{"state":"runn',
        b"<html>502 Bad Gateway</html>",
        b'{"state":NaN}',
        b'{"state":"running","state":"succeeded"}',
    ],
)
def test_a_body_that_is_not_json_is_a_transport_failure(body: bytes) -> None:
    d = run(ok(body))
    assert d.action is Action.WAIT and d.charge_transport and d.interpreted_state == "invalid_body"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"[" * 5000, id="nested past the recursion limit"),
        pytest.param(b'{"state":"running","pad":' + b"[" * 65 + b"]" * 65 + b"}", id="nested past the depth cap"),
        pytest.param(b'{"state":"failed","error":"\\ud800"}', id="lone surrogate escape"),
        pytest.param(b'{"state":"failed","error":"\xed\xa0\x80"}', id="lone surrogate bytes"),
        pytest.param(b'{"state":"running","\\udc00":1}', id="lone surrogate in a key"),
        pytest.param(b'{"state":"failed","error":{"m":"\\u0000"}}', id="NUL escape"),
        pytest.param(b'["\\u0000"]', id="NUL in an array"),
        pytest.param(b'{"state":"succeeded","result":{"output_url":1e400}}', id="infinite number"),
        pytest.param(b'{"state":"running","progress_percent":-1e400}', id="minus infinite number"),
    ],
)
def test_a_hostile_body_is_an_invalid_body(body: bytes) -> None:
    # Each breaks something after a naive parse: the parser's recursion, encoding the text as
    # UTF-8, or PostgreSQL's jsonb (no NUL, no infinities).
    d = run(ok(body))
    assert d.action is Action.WAIT and d.charge_transport and d.interpreted_state == "invalid_body"
    assert "not valid JSON" in d.explanation


def test_a_body_nested_too_deeply_says_so_in_words_a_card_can_show() -> None:
    d = run(ok(b"[" * 5000))
    assert "body is not valid JSON (nested deeper than 64 levels)" in d.explanation
    assert "recursion" not in d.explanation


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"state":"failed","error":"\\ud83d\\ude00 \\u00e9"}', id="a surrogate pair"),
        pytest.param(b'{"state":"failed","error":"\\\\u0000"}', id="an escaped backslash before u0000"),
        pytest.param(b'{"state":"failed","error":' + b"[" * 60 + b"]" * 60 + b"}", id="nested within the cap"),
    ],
)
def test_bodies_near_the_hostile_ones_are_read(body: bytes) -> None:
    d = run(ok(body))
    assert (d.action, d.status) == (Action.COMPLETE, Status.FAILED)
    json.dumps(d.error).encode()  # storable as UTF-8


def test_an_unknown_state_of_any_length_stops_for_a_human() -> None:
    d = run(ok({"state": "x" * 300}))
    assert (d.action, d.reason) == (Action.ESCALATE, Reason.UNKNOWN_STATE)


def test_bad_bodies_escalate_as_integration_failure_when_the_transport_budget_is_spent() -> None:
    d = run(ok(b"<html>"), transport_failures_used=2)
    assert (d.action, d.reason, d.charge_transport) == (Action.ESCALATE, Reason.INTEGRATION_FAILURE, True)


def test_a_body_over_the_cap_is_a_transport_failure() -> None:
    obs = Observation(received_at=NOW, http_status=200, transport_error="body_too_large")
    d = run(obs)
    assert d.charge_transport and d.action is Action.WAIT and d.interpreted_state == "invalid_body"


def test_bodies_over_the_cap_escalate_as_integration_failure_when_the_transport_budget_is_spent() -> None:
    obs = Observation(received_at=NOW, http_status=200, transport_error="body_too_large")
    d = run(obs, transport_failures_used=2)
    assert (d.action, d.reason, d.charge_transport) == (Action.ESCALATE, Reason.INTEGRATION_FAILURE, True)


def test_an_error_response_with_a_huge_body_is_judged_by_its_status() -> None:
    obs = Observation(received_at=NOW, http_status=503, transport_error="body_too_large")
    d = run(obs, transport_failures_used=2)
    assert (d.action, d.reason, d.interpreted_state) == (Action.ESCALATE, Reason.PROVIDER_FAILURE, "server_error")


@pytest.mark.parametrize("code", [401, 403])
def test_a_denied_credential_escalates_at_once(code: int) -> None:
    d = run(ok({"error": "revoked"}, status=code), transport_failures_used=0)
    assert (d.action, d.reason) == (Action.ESCALATE, Reason.AUTHORIZATION_DENIED)
    assert not d.charge_transport


def test_not_found_within_the_grace_window_waits_and_charges_transport() -> None:
    d = run(ok({}, status=404), registered_at=NOW - timedelta(seconds=20))
    assert (d.action, d.interpreted_state, d.charge_transport) == (Action.WAIT, "not_found", True)


def test_not_found_after_the_grace_window_is_an_integration_failure() -> None:
    d = run(ok({}, status=404), registered_at=NOW - timedelta(seconds=61))
    assert (d.action, d.reason, d.charge_transport) == (Action.ESCALATE, Reason.INTEGRATION_FAILURE, False)


def test_429_with_retry_after_waits_at_least_that_long_and_pauses_the_account() -> None:
    d = run(ok({}, status=429, headers={"retry-after": ("90",)}))
    assert (d.action, d.delay_source) == (Action.WAIT, DelaySource.PROVIDER_RETRY_AFTER)
    assert d.next_poll_at == NOW + timedelta(seconds=90) == d.account_pause_until
    assert d.charge_transport


def test_429_without_retry_after_takes_a_much_longer_local_delay() -> None:
    d = run(ok({}, status=429), backoff_attempt=0)
    assert d.delay_source is DelaySource.LOCAL_BACKOFF
    assert d.next_poll_at - NOW >= timedelta(seconds=15)
    assert d.account_pause_until is None


def test_429s_that_spend_the_transport_budget_escalate_rate_limited() -> None:
    d = run(ok({}, status=429, headers={"retry-after": ("30",)}), transport_failures_used=2)
    assert (d.action, d.reason) == (Action.ESCALATE, Reason.RATE_LIMITED)
    assert d.account_pause_until == NOW + timedelta(seconds=30)


@pytest.mark.parametrize("code", [500, 502, 503, 504])
def test_server_errors_wait(code: int) -> None:
    d = run(ok({}, status=code))
    assert (d.action, d.interpreted_state, d.charge_transport) == (Action.WAIT, "server_error", True)


def test_503_with_retry_after_pauses_the_account() -> None:
    d = run(ok({}, status=503, headers={"retry-after": ("120",)}))
    assert d.account_pause_until == NOW + timedelta(seconds=120)


@pytest.mark.parametrize("error", ["timeout", "connect_error", "protocol_error"])
def test_transport_errors_spend_the_budget_then_escalate_provider_failure(error: str) -> None:
    obs = Observation(received_at=NOW, transport_error=error)
    assert run(obs, transport_failures_used=1).action is Action.WAIT
    d = run(obs, transport_failures_used=2)
    assert (d.action, d.reason) == (Action.ESCALATE, Reason.PROVIDER_FAILURE)


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_redirects_are_not_followed(code: int) -> None:
    d = run(ok({}, status=code, headers={"location": ("http://169.254.169.254/latest/meta-data/",)}))
    assert (d.action, d.reason, d.interpreted_state) == (Action.ESCALATE, Reason.INTEGRATION_FAILURE, "redirect")
    assert "169.254.169.254" in d.explanation


@pytest.mark.parametrize("code", [400, 405, 410, 422])
def test_other_client_errors_are_integration_failures(code: int) -> None:
    assert run(ok({}, status=code)).reason is Reason.INTEGRATION_FAILURE


def test_the_last_request_of_the_budget_escalates_instead_of_waiting() -> None:
    d = run(ok({"state": "running"}), requests_used=12, max_requests=12)
    assert (d.action, d.reason) == (Action.ESCALATE, Reason.REQUEST_BUDGET_EXHAUSTED)


def test_a_wait_past_the_deadline_wakes_at_the_deadline() -> None:
    deadline = NOW + timedelta(seconds=20)
    d = run(ok({"state": "running"}, headers={"retry-after": ("3600",)}), deadline_at=deadline)
    assert d.action is Action.WAIT and d.next_poll_at == deadline


def test_progress_is_clamped_and_nonsense_is_noted() -> None:
    assert run(ok({"state": "running", "progress_percent": 250})).progress_percent == 100
    d = run(ok({"state": "running", "progress_percent": "lots"}))
    assert d.progress_percent is None and any("progress" in w for w in d.warnings)


def test_the_same_inputs_give_the_same_decision() -> None:
    obs = ok({"state": "running"})
    assert run(obs) == run(obs)


def test_an_account_pause_lasts_as_long_as_the_provider_asked_not_just_this_operations_deadline() -> None:
    deadline = NOW + timedelta(seconds=20)
    d = run(ok({}, status=503, headers={"retry-after": ("3600",)}), deadline_at=deadline)
    assert d.next_poll_at == deadline
    assert d.account_pause_until == NOW + timedelta(seconds=3600)


def test_an_absurd_retry_after_pauses_the_account_at_most_as_long_as_any_operation_lives() -> None:
    d = run(ok({}, status=429, headers={"retry-after": ("9999999999999999999",)}))
    assert d.account_pause_until == NOW + timedelta(seconds=POLICY.hint_absurd_s)
