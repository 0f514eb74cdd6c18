"""The words for decisions, in one place: what an option is called and what became of a decision.

The dashboard's pages, the CSV exports, the printable reports and the audit story all name an
outcome through `outcome_words`, so one provider-refused cancel reads "sent — provider refused"
everywhere (docs/DESIGN.md section 7, "Outcomes in words"). Tables name an option by
`option_title`, never by its raw id (the CSV keeps the id in a column of its own).

Pure: no Django, no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from operations.cards.option_wording import minutes_text

# The card's own way of naming a preset's minutes ("15 min", "1 h", "2 days"), so titles match labels.
from operations.cards.options import Kind

# Why a posted decision was refused (operations.decisions.check); the words below key on them.
STALE = "state changed — review again"
NOT_OFFERED = "option not offered on this card"
COMMENT_REQUIRED = "a comment is required for this option"
SAME_RESPONDER = "a second, different responder must confirm; you already accepted this output"
SIGN_IN_AGAIN = "this cannot be undone: it needs a recent sign-in — sign in again"

CANCEL_OPTION = Kind.CANCEL_AT_PROVIDER.value

# Why pollerdash did not send a request to a provider (operations.providers.targets): a card's "why
# it stopped" (reason destination_not_allowed) and a cancel's answer (not_allowed) begin with these
# words, then say which rule refused it.
NOT_SENT_DESTINATION = "not sent — destination not allowed"


class Refusal(StrEnum):
    """Which destination rule refused a provider request (docs/DESIGN.md section 2)."""

    NO_ORIGIN = "no_origin"  # the URL has no plain scheme://host[:port]
    NO_BINDING = "no_binding"  # the credential variable has no PROVIDER_CREDENTIAL_ORIGINS entry
    NOT_BOUND = "not_bound"  # ... and this origin is not one of its entry's
    NOT_PUBLIC = "not_public"  # no credential: not a public https address, not in PROVIDER_ALLOWED_ORIGINS
    RESOLVES_PRIVATE = "resolves_private"  # no credential: the name resolved to a non-public address


def destination_words(*, refusal: Refusal, credential_env: str = "", origin: str = "") -> str:
    """The fixed sentence for a provider request pollerdash refused to send."""
    why = {
        Refusal.NO_ORIGIN: "the provider URL has no plain scheme://host[:port]",
        Refusal.NO_BINDING: (
            f"{credential_env} has no entry in PROVIDER_CREDENTIAL_ORIGINS, so it is sent to no provider"
        ),
        Refusal.NOT_BOUND: f"PROVIDER_CREDENTIAL_ORIGINS does not bind {credential_env} to {origin}",
        Refusal.NOT_PUBLIC: (
            f"{origin} is not a public https address (port 443 or 8443) and not in PROVIDER_ALLOWED_ORIGINS"
        ),
        Refusal.RESOLVES_PRIVATE: f"{origin} resolves to a non-public address",
    }[refusal]
    return f"{NOT_SENT_DESTINATION}: {why}"


class Tone(StrEnum):
    """How an outcome reads at a glance; the page colours it, the words carry the meaning."""

    OK = "ok"
    WARN = "warn"
    REFUSED = "refused"
    NEUTRAL = "neutral"


@dataclass(frozen=True)
class OutcomeWords:
    label: str
    tone: Tone


# The provider's answer to a cancel (vocabulary.CancelState, plus "sending": claimed, no answer kept).
_CANCEL_WORDS: dict[str, OutcomeWords] = {
    "confirmed": OutcomeWords("applied — provider confirmed", Tone.OK),
    "forwarded": OutcomeWords("sent — not confirmed", Tone.WARN),
    "not_supported": OutcomeWords("sent — provider refused", Tone.WARN),
    "failed_to_forward": OutcomeWords("sent — failed", Tone.WARN),
    "sending": OutcomeWords("sent — no answer recorded", Tone.WARN),
    "requested": OutcomeWords("requested — not sent yet", Tone.WARN),
    "forwarding": OutcomeWords("sending — no answer yet", Tone.WARN),
    "not_documented": OutcomeWords("not sent — no documented cancel", Tone.WARN),
    "not_forwarded": OutcomeWords("not sent — another watch on this job", Tone.WARN),
    "not_allowed": OutcomeWords(NOT_SENT_DESTINATION, Tone.WARN),
}

_REFUSALS = (
    (STALE, "refused — state changed"),
    (NOT_OFFERED, "refused — option not offered"),
    (COMMENT_REQUIRED, "refused — comment required"),
    (SAME_RESPONDER, "refused — needs a different responder"),
    (SIGN_IN_AGAIN, "refused — needs a recent sign-in"),
)


def outcome_words(
    *, outcome: str, refusal_reason: str = "", cancel_answer: str | None = None, confirmed: bool = False
) -> OutcomeWords:
    """What became of a decision, in the words every page, export and the audit story use.

    `outcome` is Decision.outcome (applied, refused, awaiting_second, recorded); `refusal_reason`
    the recorded reason of a refusal; `cancel_answer` the state of the provider's answer to a
    cancel (None when the decision sent no cancel; "sending" while no answer is kept);
    `confirmed` whether a second responder confirmed an acceptance waiting for one.
    """
    if outcome == "refused":
        reason = refusal_reason or ""
        for known, label in _REFUSALS:
            if reason.startswith(known):
                return OutcomeWords(label, Tone.REFUSED)
        return OutcomeWords("refused", Tone.REFUSED)
    if outcome == "awaiting_second":
        if confirmed:
            return OutcomeWords("accepted — confirmed by a second responder", Tone.OK)
        return OutcomeWords("accepted — needs a second responder", Tone.WARN)
    if outcome == "recorded":
        return OutcomeWords("recorded", Tone.NEUTRAL)
    if outcome == "applied" and cancel_answer is not None:
        cancel_words = _CANCEL_WORDS.get(cancel_answer)
        return cancel_words or OutcomeWords(f"sent — {cancel_answer.replace('_', ' ')}", Tone.WARN)
    if outcome == "applied":
        return OutcomeWords("applied", Tone.OK)
    return OutcomeWords(outcome.replace("_", " ") or "—", Tone.NEUTRAL)


def decision_words(decision: object) -> OutcomeWords:
    """`outcome_words` for a Decision row (any object with its attributes).

    A confirmation of an acceptance is read from `confirmed_by` (the reverse link): load it with the
    row (select_related) or it costs a query.
    """
    response = getattr(decision, "provider_response", None) or {}
    cancel_answer = None
    if getattr(decision, "option", "") == CANCEL_OPTION:
        cancel_answer = str(response.get("state") or "sending") if isinstance(response, dict) else "sending"
    return outcome_words(
        outcome=str(getattr(decision, "outcome", "")),
        refusal_reason=str(getattr(decision, "refusal_reason", "") or ""),
        cancel_answer=cancel_answer,
        # A missing reverse one-to-one raises a subclass of AttributeError: getattr's default covers it.
        confirmed=getattr(decision, "confirmed_by", None) is not None,
    )


def cancel_words(cancel_state: str) -> OutcomeWords:
    """An operation's cancel_state (an agent's cancel or a card's) in the same words."""
    return outcome_words(outcome="applied", cancel_answer=cancel_state or "requested")


# What a card says about its cancel at the provider (templates/escalations/_card.html), by the state of
# the answer: nothing left pollerdash (not_forwarded, not_allowed), or no answer is kept (sending).
_NOTHING_SENT = {
    "not_forwarded": (
        "Nothing was sent to the provider: another live operation watches this job, "
        "and the cancel would end its job too."
    ),
    "not_allowed": "Nothing was sent to the provider: {detail}.",
}
_NO_ANSWER = "No answer recorded (the answer was lost or is still on its way); it is not sent again."
MAY_STILL_RUN = "The job may still run at the provider."


@dataclass(frozen=True)
class CancelAnswerWords:
    """A cancel at the provider as a card tells it: "<label> — <verb> by bob at 10:15. <sentence>"."""

    label: str  # the outcome, as every page names it ("sent — provider refused")
    tone: Tone
    verb: str  # "sent", or "asked for" when nothing left pollerdash
    sentence: str  # what became of it; "" when the provider answered (the card lists its answer)
    may_still_run: str  # MAY_STILL_RUN after an answer that did not confirm the cancel, else ""


def cancel_answer_words(*, state: str, detail: str = "") -> CancelAnswerWords:
    """The card's words for a cancel whose answer is in `state` (Escalation.cancel_response["state"])."""
    words = cancel_words(state)
    if state in _NOTHING_SENT:
        return CancelAnswerWords(words.label, words.tone, "asked for", _NOTHING_SENT[state].format(detail=detail), "")
    if state == "sending":
        return CancelAnswerWords(words.label, words.tone, "sent", _NO_ANSWER, "")
    return CancelAnswerWords(words.label, words.tone, "sent", "", "" if state == "confirmed" else MAY_STILL_RUN)


def snoozed_words(*, by: str, until: str) -> str:
    """ "snoozed by bob until 19:20 UTC": on the card while a snooze holds."""
    return f"Reminders snoozed by {by} until {until}; they resume then."


def fresh_sign_in_needed(*, minutes: int) -> str:
    """Why an option that cannot be undone asks for a recent sign-in, on its card and in its refusal."""
    return f"This cannot be undone, so it needs a sign-in within the last {minutes} minutes."


CHANNEL_LABELS = {"web": "the dashboard", "slack": "Slack", "pagerduty": "PagerDuty", "api": "the API"}


def channel_label(channel: str) -> str:
    """A channel by name ("PagerDuty"); "" for none recorded (acts from before 2.5)."""
    return CHANNEL_LABELS.get(channel, channel)


def channel_words(*, channel: str, identity: str = "") -> str:
    """Where an act came from, for history, reports and the story: "via Slack (slack:T1/U1)";
    "" for the dashboard or none recorded, the usual way, which the pages do not repeat on every line."""
    if not channel or channel == "web":
        return ""
    said = f"via {channel_label(channel)}"
    return f"{said} ({identity})" if identity else said


def pager_notice_words(*, event: str, by: str, why: str = "", holder: str = "") -> str:
    """What a pager reported on a card that changed nothing, as the card says it (a CardActivity
    notice). `event` is "acknowledged", "unacknowledged" or "resolved"; `by` the pager's name of who
    did it; `why` why pollerdash did not follow; `holder` who holds the card."""
    if event == "resolved":
        return f"resolved in PagerDuty by {by}; this card still needs a decision"
    if event == "unacknowledged":
        return f"unacknowledged in PagerDuty by {by}; {holder} acknowledged the card in pollerdash and still holds it"
    if holder:
        return f"acknowledged in PagerDuty by {by}; {holder} holds this card and keeps it (take it over on the card)"
    return f"acknowledged in PagerDuty by {by}, but nothing changed here: {why}"


def activity_words(
    *, kind: str, username: str = "", to_username: str = "", previous_username: str = "", until: str = ""
) -> str:
    """What an act on a card did (CardActivity), in the history's and the reports' words: "took the
    card over from bob". "" for a note: the page quotes its text. `until`: the snooze's end, or when
    an acknowledgement that timed out was given, as the page writes times."""
    if kind == "snoozed":
        return f"snoozed the card's reminders until {until}"
    if kind == "ack_expired":
        return f"acknowledged at {until}, but the card was still undecided: the acknowledgement timed out"
    if kind == "acknowledged":
        return f"took the card over from {previous_username}" if previous_username else "acknowledged the card (on it)"
    if kind == "unacknowledged":
        return "gave the card back"
    if kind == "reassigned":
        before = f" (held by {previous_username} before)" if previous_username and previous_username != username else ""
        return f"handed the card to {to_username}{before}"
    return ""


_PRESET = re.compile(r"^(extend|treat_as_pending):([0-9]{1,6})m:([0-9]{1,6})$")
_TITLES = {
    Kind.CANCEL_AT_PROVIDER.value: "Cancel the job at the provider",
    Kind.INSPECT.value: "Inspect at the provider",
    Kind.CLOSE.value: "Close — stop watching",
    Kind.RETRY_AFTER_ROTATION.value: "Retry with the new credential",
    Kind.ACCEPT_OUTPUT.value: "Accept the output as it is",
    Kind.APPROVE_ONE_CHECK.value: "Approve one status check",
    Kind.KEEP_WAITING.value: "Keep waiting until the technical deadline",
}
_TITLE_SHOWN = 40


def option_title(option_id: str) -> str:
    """An option's name for tables: "Extend 15 min / 4 checks" for `extend:15m:4`.

    Short and stable (it depends on the id alone), unlike the card's label, which names the
    deadline of the moment. An id no card offers (a refused post) is quoted as posted.
    """
    text = option_id or ""
    preset = _PRESET.match(text)
    if preset:
        kind, minutes, checks = preset.group(1), int(preset.group(2)), int(preset.group(3))
        amount = f"{minutes_text(minutes)} / {checks} check{'s' if checks != 1 else ''}"
        return f"Extend {amount}" if kind == "extend" else f"Treat the state as pending: {amount}"
    if text in _TITLES:
        return _TITLES[text]
    if not text:
        return "(no option)"
    shown = text if len(text) <= _TITLE_SHOWN else text[: _TITLE_SHOWN - 1] + "…"
    return f"unknown option “{shown}”"


# --- An agent's view of its job in words (the MCP task's statusMessage, docs/DESIGN.md section 9) ---


def waiting_for_decision_words(*, reason_label: str, card_id: int | None) -> str:
    """ "waiting for an on-call decision: request budget spent (card 42)": the card's reason as the
    dashboard names it (`reason_label`, "Request budget spent"), for a job a person now decides on."""
    reason = f"{reason_label[:1].lower()}{reason_label[1:]}"
    card = f" (card {card_id})" if card_id is not None else ""
    return f"waiting for an on-call decision: {reason}{card}"


def watching_words(*, checks_used: int, checks_max: int, next_check_utc: str | None) -> str:
    """ "watching: 3 of 20 status checks used, next check 12:03:04 UTC" (`next_check_utc` already in
    the dashboard's UTC form; None while a check is due or under way)."""
    when = f"next check {next_check_utc}" if next_check_utc else "a check is due now"
    return f"watching: {checks_used} of {checks_max} status checks used, {when}"


def finished_words(*, status: str, cancelled_by_agent: bool) -> str:
    """ "finished: succeeded"; an agent's own cancel reads "cancelled by the agent"."""
    if cancelled_by_agent:
        return "cancelled by the agent"
    return f"finished: {status.replace('_', ' ')}"
