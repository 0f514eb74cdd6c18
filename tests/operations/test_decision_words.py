"""The one vocabulary of outcomes and option names (operations.cards.words): plain unit tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operations.cards.options import Capabilities, Facts, Kind, Preset, bounded_options
from operations.cards.words import (
    MAY_STILL_RUN,
    Tone,
    activity_words,
    cancel_answer_words,
    cancel_words,
    decision_words,
    fresh_sign_in_needed,
    option_title,
    outcome_words,
)
from operations.decisions.check import COMMENT_REQUIRED, NOT_OFFERED, SAME_RESPONDER, STALE
from operations.vocabulary import CancelState, Reason


@pytest.mark.parametrize(
    ("outcome", "refusal_reason", "cancel_answer", "label", "tone"),
    [
        ("applied", "", None, "applied", Tone.OK),
        ("recorded", "", None, "recorded", Tone.NEUTRAL),
        ("awaiting_second", "", None, "accepted — needs a second responder", Tone.WARN),
        ("refused", STALE, None, "refused — state changed", Tone.REFUSED),
        ("refused", f"{NOT_OFFERED}: extend:9m:9", None, "refused — option not offered", Tone.REFUSED),
        ("refused", COMMENT_REQUIRED, None, "refused — comment required", Tone.REFUSED),
        ("refused", SAME_RESPONDER, None, "refused — needs a different responder", Tone.REFUSED),
        ("refused", "a reason nobody named yet", None, "refused", Tone.REFUSED),
        ("applied", "", "confirmed", "applied — provider confirmed", Tone.OK),
        ("applied", "", "forwarded", "sent — not confirmed", Tone.WARN),
        ("applied", "", "not_supported", "sent — provider refused", Tone.WARN),
        ("applied", "", "failed_to_forward", "sent — failed", Tone.WARN),
        ("applied", "", "sending", "sent — no answer recorded", Tone.WARN),
        ("applied", "", "not_forwarded", "not sent — another watch on this job", Tone.WARN),
        ("applied", "", "not_documented", "not sent — no documented cancel", Tone.WARN),
        ("applied", "", "some_new_state", "sent — some new state", Tone.WARN),
    ],
)
def test_each_outcome_has_one_name(outcome, refusal_reason, cancel_answer, label, tone) -> None:
    words = outcome_words(outcome=outcome, refusal_reason=refusal_reason, cancel_answer=cancel_answer)
    assert (words.label, words.tone) == (label, tone)


def test_every_cancel_state_has_words_of_its_own() -> None:
    labels = {state: cancel_words(state).label for state in CancelState}
    assert len(set(labels.values())) == len(labels)
    assert all("_" not in label for label in labels.values())


def decision(**fields: object) -> SimpleNamespace:
    base = {"option": "extend:15m:4", "outcome": "applied", "refusal_reason": "", "provider_response": None}
    return SimpleNamespace(**{**base, **fields})


def test_a_decision_row_is_named_from_its_outcome_reason_and_the_providers_answer() -> None:
    refused_cancel = decision(
        option="cancel_at_provider", provider_response={"state": "not_supported", "http_status": 405}
    )
    assert decision_words(refused_cancel).label == "sent — provider refused"
    # Claimed and sent, the answer lost: never "applied" as if it had worked.
    assert decision_words(decision(option="cancel_at_provider")).label == "sent — no answer recorded"
    # A provider_response on any other option is not a cancel answer.
    assert decision_words(decision(provider_response={"state": "forwarded"})).label == "applied"
    waiting = decision(option="accept_output", outcome="awaiting_second")
    assert decision_words(waiting).label == "accepted — needs a second responder"
    confirmed = decision(option="accept_output", outcome="awaiting_second", confirmed_by=object())
    assert decision_words(confirmed).label == "accepted — confirmed by a second responder"
    assert decision_words(decision(outcome="refused", refusal_reason=STALE)).label == "refused — state changed"


REFUSAL_LABELS = {
    "refused",
    "refused — state changed",
    "refused — option not offered",
    "refused — comment required",
    "refused — needs a different responder",
}


@given(
    outcome=st.sampled_from(["applied", "refused", "awaiting_second", "recorded", "some_future_outcome"]),
    reason=st.text(max_size=80),
    answer=st.one_of(
        st.none(), st.sampled_from([str(s) for s in CancelState]), st.from_regex(r"[a-z_]{1,20}", fullmatch=True)
    ),
)
def test_an_outcome_always_reads_as_words(outcome: str, reason: str, answer: str | None) -> None:
    words = outcome_words(outcome=outcome, refusal_reason=reason, cancel_answer=answer)
    assert words.label and "_" not in words.label
    if outcome == "refused":
        # One of a few fixed labels, whatever reason text was recorded: the reason is shown apart.
        assert words.tone is Tone.REFUSED and words.label in REFUSAL_LABELS


@pytest.mark.parametrize(
    ("option_id", "title"),
    [
        ("extend:15m:4", "Extend 15 min / 4 checks"),
        ("extend:60m:8", "Extend 1 h / 8 checks"),
        ("extend:2880m:1", "Extend 2 days / 1 check"),
        ("treat_as_pending:15m:4", "Treat the state as pending: 15 min / 4 checks"),
        ("cancel_at_provider", "Cancel the job at the provider"),
        ("close", "Close — stop watching"),
        ("inspect", "Inspect at the provider"),
        ("retry_after_rotation", "Retry with the new credential"),
        ("accept_output", "Accept the output as it is"),
        ("approve_one_check", "Approve one status check"),
        ("keep_waiting", "Keep waiting until the technical deadline"),
        ("", "(no option)"),
        ("rm -rf", "unknown option “rm -rf”"),
        ("x" * 100, "unknown option “" + "x" * 39 + "…”"),
    ],
)
def test_an_option_id_has_a_title(option_id: str, title: str) -> None:
    assert option_title(option_id) == title


@pytest.mark.parametrize("kind", list(Kind))
def test_every_option_kind_has_a_title_of_its_own(kind: Kind) -> None:
    option_id = f"{kind.value}:15m:4" if kind in (Kind.EXTEND, Kind.TREAT_AS_PENDING) else kind.value
    assert "unknown" not in option_title(option_id) and "_" not in option_title(option_id)


def test_titles_match_the_labels_the_card_shows() -> None:
    now = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    caps = Capabilities(
        presets=(Preset(15, 4),), max_extensions=3, has_cancel=True, console_url="https://console.test/{job_id}"
    )
    shown = {}
    for reason in (Reason.DEADLINE_EXCEEDED, Reason.INTEGRATION_FAILURE, Reason.PER_CALL_APPROVAL):
        facts = Facts(reason=reason, now=now, deadline_at=now - timedelta(minutes=1), requests_used=3, max_requests=3)
        shown.update({option.id: option.label for option in bounded_options(facts=facts, caps=caps)})
    business = Facts(
        reason=Reason.BUSINESS_DEADLINE_PASSED,
        now=now,
        deadline_at=now + timedelta(minutes=10),
        requests_used=3,
        max_requests=5,
    )
    shown.update({option.id: option.label for option in bounded_options(facts=business, caps=caps)})
    fixed = {"cancel_at_provider", "close", "inspect", "accept_output", "approve_one_check", "keep_waiting"}
    assert fixed <= set(shown)
    assert {option_id: option_title(option_id) for option_id in fixed} == {
        option_id: shown[option_id] for option_id in fixed
    }


@pytest.mark.parametrize(
    ("state", "tone", "verb", "sentence", "may_still_run"),
    [
        ("confirmed", Tone.OK, "sent", "", ""),
        ("not_supported", Tone.WARN, "sent", "", MAY_STILL_RUN),
        ("forwarded", Tone.WARN, "sent", "", MAY_STILL_RUN),
        ("failed_to_forward", Tone.WARN, "sent", "", MAY_STILL_RUN),
        ("sending", Tone.WARN, "sent", "No answer recorded (the answer was lost or is still on its way);", ""),
        ("not_forwarded", Tone.WARN, "asked for", "Nothing was sent to the provider: another live operation", ""),
        (
            "not_allowed",
            Tone.WARN,
            "asked for",
            "Nothing was sent to the provider: not sent — destination not allowed",
            "",
        ),
        ("", Tone.WARN, "sent", "", MAY_STILL_RUN),
    ],
)
def test_a_cards_cancel_is_told_in_the_words_of_its_answer(state, tone, verb, sentence, may_still_run) -> None:
    detail = "not sent — destination not allowed: the provider URL has no plain scheme://host[:port]"
    words = cancel_answer_words(state=state, detail=detail)
    assert (words.label, words.tone) == (cancel_words(state).label, tone)  # the label every page uses
    assert (words.verb, words.may_still_run) == (verb, may_still_run)
    assert words.sentence.startswith(sentence) and bool(words.sentence) == bool(sentence)
    if state == "not_allowed":
        assert words.sentence == f"Nothing was sent to the provider: {detail}."


def test_the_fresh_sign_in_rule_is_one_sentence() -> None:
    assert fresh_sign_in_needed(minutes=15) == (
        "This cannot be undone, so it needs a sign-in within the last 15 minutes."
    )


@pytest.mark.parametrize(
    ("kind", "to", "previous", "said"),
    [
        ("acknowledged", "", "", "acknowledged the card (on it)"),
        ("acknowledged", "", "bob", "took the card over from bob"),
        ("unacknowledged", "", "", "gave the card back"),
        ("reassigned", "carol", "", "handed the card to carol"),
        ("reassigned", "carol", "bob", "handed the card to carol (held by bob before)"),
        ("reassigned", "carol", "alice", "handed the card to carol"),  # alice handed her own card on
        ("noted", "", "", ""),
    ],
)
def test_what_an_act_on_a_card_did_in_words(kind, to, previous, said) -> None:
    assert activity_words(kind=kind, username="alice", to_username=to, previous_username=previous) == said
