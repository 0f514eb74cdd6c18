"""The reason -> bounded options table of docs/DESIGN.md section 7, over every profile capability."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from operations.cards.options import (
    Capabilities,
    Confirm,
    Facts,
    Kind,
    ParsedOption,
    Preset,
    bounded_options,
    capabilities_of,
    parse_option_id,
    presets_from,
    unavailable_notes,
)
from operations.vocabulary import Reason

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
PRESETS = (Preset(15, 4), Preset(60, 8))
EXTENDS = ["extend:15m:4", "extend:60m:8"]
PENDING = ["treat_as_pending:15m:4", "treat_as_pending:60m:8"]


def facts(reason: Reason, **overrides: object) -> Facts:
    values: dict[str, object] = {
        "reason": reason,
        "now": NOW,
        "deadline_at": NOW - timedelta(minutes=1),
        "requests_used": 9,
        "max_requests": 12,
        "transport_failures_used": 0,
        "max_transport_failures": 3,
        "provider_state": "needs_payment",
    }
    values.update(overrides)
    return Facts(**values)


def caps(**overrides: object) -> Capabilities:
    values: dict[str, object] = {
        "presets": PRESETS,
        "max_extensions": 3,
        "has_cancel": True,
        "console_url": "https://console.test/{job_id}",
    }
    values.update(overrides)
    return Capabilities(**values)


def expected(reason: Reason, *, cancel: bool, extensions_left: bool, rotated: bool, text_state: bool) -> list[str]:
    """docs/DESIGN.md section 7, written out independently of the implementation."""
    extend = EXTENDS if extensions_left else []
    cancel_ = ["cancel_at_provider"] if cancel else []
    if reason in (
        Reason.DEADLINE_EXCEEDED,
        Reason.REQUEST_BUDGET_EXHAUSTED,
        Reason.PROVIDER_FAILURE,
        Reason.RATE_LIMITED,
    ):
        return [*extend, *cancel_, "inspect", "close"]
    if reason is Reason.BUSINESS_DEADLINE_PASSED:
        # These facts have the technical deadline passed too: "keep waiting" needs bounds left.
        return [*extend, *cancel_, "inspect", "close"]
    if reason is Reason.UNKNOWN_STATE:
        pending = PENDING if extensions_left and text_state else []
        return [*pending, "inspect", *cancel_, "close"]
    if reason is Reason.AUTHORIZATION_DENIED:
        return [*(["retry_after_rotation"] if rotated else []), "inspect", "close"]
    if reason is Reason.INTEGRATION_FAILURE:
        return ["inspect", "accept_output", "close"]
    if reason is Reason.DESTINATION_NOT_ALLOWED:
        # Nothing was sent, and nothing would be until the configuration changes: look, or stop.
        return ["inspect", "close"]
    assert reason is Reason.PER_CALL_APPROVAL
    return ["approve_one_check", "close"]


@pytest.mark.parametrize(
    ("reason", "has_cancel", "extensions_used", "rotated", "state"),
    list(
        itertools.product(
            list(Reason), [True, False], [0, 2, 3], [True, False], ["needs_payment", "<null>", "<missing>", "<int: 3>"]
        )
    ),
)
def test_every_reason_and_capability_offers_exactly_the_designed_options(
    reason: Reason, has_cancel: bool, extensions_used: int, rotated: bool, state: str
) -> None:
    options = bounded_options(
        facts=facts(reason, extensions_used=extensions_used, credential_changed=rotated, provider_state=state),
        caps=caps(has_cancel=has_cancel),
    )
    assert [o.id for o in options] == expected(
        reason,
        cancel=has_cancel,
        extensions_left=extensions_used < 3,
        rotated=rotated,
        text_state=not state.startswith("<"),
    )
    assert "continue" not in " ".join(o.label.lower() for o in options)


def test_authorization_denied_never_offers_an_extension_or_an_identical_retry() -> None:
    for rotated in (False, True):
        ids = [
            o.id
            for o in bounded_options(facts=facts(Reason.AUTHORIZATION_DENIED, credential_changed=rotated), caps=caps())
        ]
        assert not any(i.startswith(("extend", "treat_as_pending")) for i in ids)
        assert ("retry_after_rotation" in ids) is rotated


def test_no_cancel_where_the_profile_documents_none_and_never_twice() -> None:
    assert "cancel_at_provider" not in [
        o.id for o in bounded_options(facts=facts(Reason.DEADLINE_EXCEEDED), caps=caps(has_cancel=False))
    ]
    assert "cancel_at_provider" not in [
        o.id for o in bounded_options(facts=facts(Reason.DEADLINE_EXCEEDED, cancel_sent=True), caps=caps())
    ]


def test_no_extension_past_max_extensions_and_the_card_says_why() -> None:
    spent = facts(Reason.REQUEST_BUDGET_EXHAUSTED, extensions_used=3)
    assert [o.id for o in bounded_options(facts=spent, caps=caps())] == ["cancel_at_provider", "inspect", "close"]
    assert any("3 extensions" in note for note in unavailable_notes(facts=spent, caps=caps()))
    assert [o.id for o in bounded_options(facts=facts(Reason.DEADLINE_EXCEEDED), caps=caps(max_extensions=0))][0] == (
        "cancel_at_provider"
    )


def test_an_extension_states_its_cost_and_effect_against_the_business_deadline() -> None:
    f = facts(
        Reason.DEADLINE_EXCEEDED,
        deadline_at=NOW - timedelta(minutes=5),
        business_deadline_at=NOW - timedelta(minutes=5) + timedelta(minutes=0),
    )
    first = bounded_options(facts=f, caps=caps())[0]
    assert first.label == "Extend 15 min / 4 checks"
    assert first.new_deadline_at == NOW + timedelta(minutes=15)
    # Exactly the 4 checks from now (9 used), not 4 on top of the 3 left.
    assert first.new_max_requests == 13 and first.extra_requests == 4
    assert first.check_spacing_s == 225.0 and first.next_poll_at == NOW
    assert (
        first.effect == "+4 requests: 4 checks, about every 4 min, until 10:15 UTC — 20 min after the business deadline"
    )
    assert first.confirm is Confirm.TWO_STEP

    before = facts(Reason.DEADLINE_EXCEEDED, business_deadline_at=NOW + timedelta(hours=2))
    assert bounded_options(facts=before, caps=caps())[1].effect == (
        "+8 requests: 8 checks, about every 8 min, until 11:00 UTC — 1 h before the business deadline"
    )


def test_an_extension_spends_its_checks_across_the_whole_window() -> None:
    # The budget ran out 30 min before the deadline: 15 more minutes make a 45-minute window.
    f = facts(
        Reason.REQUEST_BUDGET_EXHAUSTED,
        deadline_at=NOW + timedelta(minutes=30),
        requests_used=12,
        business_deadline_at=NOW + timedelta(hours=1),
    )
    option = bounded_options(facts=f, caps=caps())[0]
    assert option.check_spacing_s == 45 * 60 / 4
    assert option.effect == (
        "+4 requests: 4 checks, about every 11 min, until 10:45 UTC — 15 min before the business deadline"
    )
    assert option.as_dict()["check_spacing_ms"] == 675_000


def test_an_extension_past_a_binding_business_deadline_says_polling_stops_there() -> None:
    f = facts(Reason.REQUEST_BUDGET_EXHAUSTED, deadline_at=NOW + timedelta(minutes=30), requests_used=12)
    business = NOW + timedelta(minutes=20)
    effect = bounded_options(facts=replace(f, business_deadline_at=business), caps=caps())[0].effect
    assert effect.endswith("; polling stops at the business deadline 10:20 UTC for a person to decide")
    # Once a person chose to poll past it, it stops nothing and the option does not say it does.
    waived = replace(f, business_deadline_at=business, business_deadline_waived=True)
    assert "polling stops" not in bounded_options(facts=waived, caps=caps())[0].effect


def test_a_single_check_extension_has_no_pace_to_state() -> None:
    option = bounded_options(facts=facts(Reason.DEADLINE_EXCEEDED), caps=caps(presets=(Preset(10, 1),)))[0]
    assert option.effect == "+1 request: 1 check, until 10:10 UTC"
    assert option.check_spacing_s == 600.0


def test_business_deadline_passed_offers_keep_waiting_within_the_operations_own_bounds() -> None:
    f = facts(
        Reason.BUSINESS_DEADLINE_PASSED,
        deadline_at=NOW + timedelta(minutes=20),
        business_deadline_at=NOW - timedelta(seconds=5),
        requests_used=4,
    )
    options = bounded_options(facts=f, caps=caps())
    assert [o.id for o in options] == ["keep_waiting", *EXTENDS, "cancel_at_provider", "inspect", "close"]
    keep = options[0]
    assert keep.kind is Kind.KEEP_WAITING and keep.label == "Keep waiting until the technical deadline"
    # No new authority: the bounds stay as they are.
    assert (keep.new_deadline_at, keep.new_max_requests, keep.extra_requests) == (f.deadline_at, 12, 0)
    assert keep.next_poll_at == NOW and keep.confirm is Confirm.TWO_STEP
    assert keep.effect == (
        "no new requests or time: polling resumes now within the operation's own bounds (8 requests left, "
        "deadline 10:20 UTC); you are not asked about the business deadline again"
    )
    # The provider's own wait is honoured.
    asked = replace(f, provider_wait_until=NOW + timedelta(minutes=2))
    assert bounded_options(facts=asked, caps=caps())[0].next_poll_at == NOW + timedelta(minutes=2)


@pytest.mark.parametrize(
    "spent", [{"deadline_at": NOW}, {"deadline_at": NOW + timedelta(minutes=5), "requests_used": 12}]
)
def test_keep_waiting_is_not_offered_when_the_operations_own_bounds_are_spent(spent: dict) -> None:
    f = facts(Reason.BUSINESS_DEADLINE_PASSED, business_deadline_at=NOW - timedelta(minutes=1), **spent)
    assert "keep_waiting" not in [o.id for o in bounded_options(facts=f, caps=caps())]
    assert any("keep waiting" in note for note in unavailable_notes(facts=f, caps=caps()))


def test_a_budget_extension_adds_to_a_deadline_that_has_not_passed() -> None:
    f = facts(Reason.REQUEST_BUDGET_EXHAUSTED, deadline_at=NOW + timedelta(minutes=30), requests_used=12)
    option = bounded_options(facts=f, caps=caps())[0]
    assert option.new_deadline_at == NOW + timedelta(minutes=45)
    assert option.new_max_requests == 16
    assert option.next_poll_at == NOW


def test_an_extension_waits_for_what_the_provider_asked_on_its_last_answer() -> None:
    asked = NOW + timedelta(seconds=90)
    option = bounded_options(facts=facts(Reason.REQUEST_BUDGET_EXHAUSTED, provider_wait_until=asked), caps=caps())[0]
    assert option.next_poll_at == asked
    assert option.new_deadline_at == asked + timedelta(minutes=15)
    assert option.check_spacing_s == 225.0


def test_rate_limited_extension_never_polls_before_the_provider_asked() -> None:
    paused = NOW + timedelta(minutes=2)
    option = bounded_options(facts=facts(Reason.RATE_LIMITED, paused_until=paused), caps=caps())[0]
    assert option.next_poll_at == paused
    assert option.new_deadline_at == paused + timedelta(minutes=15)
    assert option.effect.startswith("first check not before 10:02 UTC (the provider asked to wait); +4 requests")
    # A pause that already ended does not delay anything.
    past = bounded_options(facts=facts(Reason.RATE_LIMITED, paused_until=NOW - timedelta(seconds=1)), caps=caps())[0]
    assert past.next_poll_at == NOW


def test_provider_failure_extension_leaves_room_for_some_transport_failures() -> None:
    f = facts(Reason.PROVIDER_FAILURE, transport_failures_used=3, max_transport_failures=3)
    option = bounded_options(facts=f, caps=caps())[0]
    assert option.new_max_transport_failures == 6


def test_irreversible_options_need_explicit_confirmation_and_accept_output_a_comment() -> None:
    by_id = {o.id: o for o in bounded_options(facts=facts(Reason.INTEGRATION_FAILURE), caps=caps())}
    assert by_id["accept_output"].confirm is Confirm.EXPLICIT and by_id["accept_output"].needs_comment
    assert by_id["close"].confirm is Confirm.EXPLICIT
    assert by_id["inspect"].confirm is Confirm.NONE
    cancel = bounded_options(facts=facts(Reason.DEADLINE_EXCEEDED), caps=caps())[2]
    assert cancel.id == "cancel_at_provider" and cancel.confirm is Confirm.EXPLICIT
    second = bounded_options(facts=facts(Reason.INTEGRATION_FAILURE, accepted_by="alice"), caps=caps())[1]
    assert "second responder after alice" in second.label


def test_option_ids_parse_strictly() -> None:
    assert parse_option_id("extend:15m:4").kind is Kind.EXTEND
    assert parse_option_id("treat_as_pending:60m:8") == ParsedOption(Kind.TREAT_AS_PENDING)
    assert parse_option_id("close").kind is Kind.CLOSE
    for forged in ("extend", "extend:0m:4", "extend:15m:-1", "extend:15m:4 ", "continue", "", None, 7, "x" * 200):
        assert parse_option_id(forged) is None


def test_presets_from_a_profile_skip_malformed_entries() -> None:
    raw = [{"minutes": 15, "checks": 4}, {"minutes": "15", "checks": 4}, {"minutes": 0, "checks": 1}, "x", {}]
    assert presets_from(raw) == (Preset(15, 4),)

    class Profile:
        extension_options = [{"minutes": 30, "checks": 2}]
        max_extensions = 2
        cancel_method = "POST"
        cancel_url = ""
        console_url = ""
        default_max_transport_failures = 3

    caps_ = capabilities_of(Profile())
    assert caps_.presets == (Preset(30, 2),) and not caps_.has_cancel and caps_.max_extensions == 2
