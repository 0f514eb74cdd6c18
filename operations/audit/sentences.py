"""The sentences of an operation's story: one renderer per audit entry type, and the helpers they
share (operations/audit/story.py turns an entry body into a line with them).

Each renderer reads the entry's data (the hashed body, never the rows it describes) and returns one
sentence. Times are UTC and say so ("10:46:15 UTC"); a time on another day than its entry carries its
date. Outcomes and option names are the words of operations.cards.words, as on every page and export.
A person is always named with their kind ("user:alice"), so no username can pass for the system.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from operations.audit.story_format import quoted, reason_text, time_text, user_name
from operations.cards.options import human_duration
from operations.cards.words import cancel_words, option_title, outcome_words

_PRESET = re.compile(r"^(extend|treat_as_pending|retry_after_rotation):([0-9]+)m:([0-9]+)$")
_DELAY_SOURCES = {
    "provider_retry_after": "from provider guidance",
    "provider_poll_hint": "from the provider's poll hint",
    "local_backoff": "by local backoff",
    "manual_extension": "after the extension",
}
_TERMINAL_WORDS = {
    "succeeded": "the job succeeded",
    "partially_succeeded": "the job partially succeeded",
    "failed": "the job failed (provider error kept)",
    "cancelled": "the job was cancelled at the provider",
    "expired": "the job expired at the provider",
    "closed": "closed",
}


# --- renderers, one per entry type ---------------------------------------------------------------------


def _registered(data: Mapping[str, object], actor: str, at: datetime) -> str:
    parts = [f"registered by {data.get('registered_by') or actor}: {data['provider']} job {data['provider_job_id']}"]
    if data.get("deadline"):
        parts.append(f"deadline {time_text(data['deadline'], at)}")
    if data.get("max_requests") is not None:
        parts.append(f"up to {data['max_requests']} requests")
    if data.get("business_deadline"):
        parts.append(f"business deadline {time_text(data['business_deadline'], at)}")
    text = ", ".join(parts)
    if data.get("purpose"):
        text += f" - {quoted(data['purpose'])}"
    return text


def _controller(data: Mapping[str, object], actor: str, at: datetime) -> str:
    decision = str(data.get("decision") or "")
    received = _received(data)
    budget = _budget(data)
    if decision == "wait":
        parts = [received]
        if data.get("retry_after"):
            parts.append(f"Retry-After {data['retry_after']}")
        next_poll = f"next poll {time_text(data['next_poll_at'], at)}" if data.get("next_poll_at") else "waiting"
        source = _DELAY_SOURCES.get(str(data.get("delay_source") or ""))
        parts.append(f"{next_poll} {source}" if source else next_poll)
        return ", ".join(parts) + budget
    if decision == "escalate":
        why = reason_text(data.get("reason"))
        if data.get("http_status") is None and data.get("interpreted_state") is None:
            return f"stopped without a request: {why}{budget}"
        return f"{received}; stopped polling: {why}{budget}"
    if decision in _TERMINAL_WORDS:
        return f"{received}: {_TERMINAL_WORDS[decision]}{budget}"
    if decision == "defer":
        until = time_text(data["next_poll_at"], at) if data.get("next_poll_at") else "later"
        return f"poll deferred to {until}: {reason_text(data.get('reason'))}"
    if decision == "ignored_after_terminal":
        return f"{received} after the operation was already {data.get('state')}: kept as a warning, status unchanged"
    return f"{received}: {decision or 'decision'} ({reason_text(data.get('reason'))}){budget}"


def _received(data: Mapping[str, object]) -> str:
    status = data.get("http_status")
    if status is None:
        what = str(data.get("interpreted_state") or "no answer").replace("_", " ")
        return f"no answer ({what})"
    text = f"received {status}"
    if data.get("provider_state"):
        text += f" {quoted(data['provider_state'], limit=60)}"
    return text


def _budget(data: Mapping[str, object]) -> str:
    count, limit = data.get("request_count"), data.get("max_requests")
    if count is None or limit is None:
        return ""
    return f" (request {count} of {limit})"


def _escalated(data: Mapping[str, object], actor: str, at: datetime) -> str:
    reason = str(data.get("reason") or "unknown reason").replace("_", " ")
    text = f"escalated: {reason}"
    if data.get("request_count") is not None and data.get("max_requests") is not None:
        text += f" ({data['request_count']} of {data['max_requests']} requests)"
    return text


def _human_decision(data: Mapping[str, object], actor: str, at: datetime) -> str:
    option = str(data.get("option") or "")
    outcome = str(data.get("outcome") or "")
    new_deadline = f"new deadline {time_text(data['new_deadline'], at)}" if data.get("new_deadline") else ""
    preset = _PRESET.match(option)
    if preset and preset.group(1) == "extend":
        text = f"{actor} extended by {preset.group(2)} min / {preset.group(3)} checks"
    elif preset and preset.group(1) == "treat_as_pending":
        state = quoted(data["pending_state"], limit=60) if data.get("pending_state") else "the state"
        text = f"{actor} treated {state} as pending for {preset.group(2)} min / {preset.group(3)} checks"
    elif option.startswith("retry_after_rotation"):
        text = f"{actor} retried after the credential was rotated"
    elif option == "close":
        text = f"{actor} closed the operation: pollerdash stopped watching"
    elif option == "cancel_at_provider":
        text = f"{actor} asked the provider to cancel the job"
    elif option == "accept_output" and outcome == "awaiting_second":
        text = f"{actor} accepted the output; a second responder must confirm"
    elif option == "accept_output":
        text = f"{actor} confirmed the output as accepted: the operation succeeded"
    elif option == "approve_one_check":
        text = f"{actor} approved one status check"
    elif option == "keep_waiting":
        text = f"{actor} chose to keep waiting past the business deadline, within the operation's own bounds"
    else:
        text = f"{actor} chose “{option_title(option)}”: {outcome_words(outcome=outcome or 'recorded').label}"
    spacing_ms = data.get("check_spacing_ms")
    if isinstance(spacing_ms, int) and preset:
        pace = f"a check about every {human_duration(timedelta(milliseconds=spacing_ms))}"
        new_deadline = f"{pace}, {new_deadline}" if new_deadline else pace
    if new_deadline:
        text += f" ({new_deadline})"
    if data.get("comment"):
        text += f" - {quoted(data['comment'])}"
    return text


def _business_near(data: Mapping[str, object], actor: str, at: datetime) -> str:
    when = time_text(data["business_deadline"], at) if data.get("business_deadline") else "soon"
    return f"business deadline {when} is near and the job is still running: on-call warned"


def _human_inspect(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"{actor} inspected the job at the provider console"


def _human_refused(data: Mapping[str, object], actor: str, at: datetime) -> str:
    reason = str(data.get("reason") or "")
    label = outcome_words(outcome="refused", refusal_reason=reason).label
    if label == "refused" and reason:
        label += f": {quoted(reason, limit=120)}"
    return f"{actor} tried “{option_title(str(data.get('option') or ''))}”: {label}"


def _cancel_answer(data: Mapping[str, object]) -> str:
    """The provider's answer to a cancel in the words of every page: "sent — provider refused (HTTP 405)"."""
    status = data.get("http_status")
    answered = f"HTTP {status}" if status is not None else "no answer"
    return f"{cancel_words(str(data.get('cancel_state') or '')).label} ({answered})"


def _human_acknowledged(data: Mapping[str, object], actor: str, at: datetime) -> str:
    if data.get("previous_holder"):
        return f"{actor} took over the card from {user_name(data['previous_holder'])} and is on it"
    return f"{actor} acknowledged the card: on it (no more reminders)"


def _human_unacknowledged(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"{actor} gave the card back: nobody holds it (reminders resume)"


def _human_reassigned(data: Mapping[str, object], actor: str, at: datetime) -> str:
    if data.get("takeover") and data.get("previous_holder"):
        previous, to = user_name(data["previous_holder"]), user_name(data.get("to"))
        return f"{actor} took the card over from {previous} and handed it to {to}"
    text = f"{actor} handed the card to {user_name(data.get('to'))}"
    if data.get("previous_holder") and user_name(data["previous_holder"]) != actor:
        text += f" (held by {user_name(data['previous_holder'])} before)"
    return text


def _human_note(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"{actor} noted: {quoted(data.get('text') or '')}"


def _oncall_notice(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"{actor}: {quoted(data.get('text') or '', limit=300)} - nothing changed on the card"


def _human_snoozed(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"{actor} snoozed the card's reminders until {time_text(data.get('until'), at)}"


def _ack_expired(data: Mapping[str, object], actor: str, at: datetime) -> str:
    minutes = int(str(data.get("ack_timeout_s") or 0)) // 60
    return (
        f"still undecided {minutes} min after {user_name(data.get('acknowledged_by'))} acknowledged: "
        "the acknowledgement timed out and the escalation policy started again"
    )


def _human_bulk_decision(data: Mapping[str, object], actor: str, at: datetime) -> str:
    refused = data.get("refused") or []
    count = len(refused) if isinstance(refused, list) else 0
    option = option_title(str(data.get("option") or ""))
    if not data.get("applied"):
        return f"{actor}'s bulk “{option}” over {data.get('requested')} cards applied to none ({count} refused)"
    return (
        f"{actor} applied “{option}” to {data.get('applied')} of {data.get('requested')} cards of group "
        f"{data.get('group_id')} ({count} refused)"
    )


def _cancel_response(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"provider answered the cancel: {_cancel_answer(data)}"


def _paused(data: Mapping[str, object], actor: str, at: datetime) -> str:
    until = time_text(data["paused_until"], at) if data.get("paused_until") else "further notice"
    status = f" after {data['http_status']} with Retry-After" if data.get("http_status") is not None else ""
    return f"provider account {data.get('account')} paused until {until}{status}: every operation waits"


def _cancelled(data: Mapping[str, object], actor: str, at: datetime) -> str:
    text = f"{actor} stopped watching ({data.get('state')})"
    if data.get("reason"):
        text += f": {quoted(data['reason'])}"
    if data.get("cancel_state"):
        text += f"; cancel at the provider: {cancel_words(str(data['cancel_state'])).label}"
    return text


def _cancel_forwarded(data: Mapping[str, object], actor: str, at: datetime) -> str:
    text = f"cancel forwarded to the provider: {_cancel_answer(data)}"
    if data.get("detail"):
        text += f" - {quoted(data['detail'])}"
    return text


def _acknowledged(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"{actor} acknowledged the result ({data.get('state')})"


def _callback_failed(data: Mapping[str, object], actor: str, at: datetime) -> str:
    status = f", last HTTP {data['http_status']}" if data.get("http_status") is not None else ""
    return (
        f"callback {data.get('event_type')} gave up after {data.get('attempts')} attempts{status}: "
        f"{data.get('reason') or 'no reason recorded'}"
    )


def _profile_changed(data: Mapping[str, object], actor: str, at: datetime) -> str:
    fields = data.get("fields") or []
    named = ", ".join(str(name) for name in fields) if isinstance(fields, list) else ""
    return f"{actor} {data.get('change')} provider profile {data.get('slug')}" + (f" ({named})" if named else "")


def _policy_changed(data: Mapping[str, object], actor: str, at: datetime) -> str:
    policy = data.get("policy")
    levels = policy.get("levels") if isinstance(policy, Mapping) else None
    shape = f" ({len(levels)} level{'s' if len(levels) != 1 else ''})" if isinstance(levels, list) else ""
    default = ", the default" if data.get("is_default") else ""
    return f"{actor} {data.get('change')} escalation policy {data.get('name')}{shape}{default}"


def _roles(roles: Mapping[str, object]) -> str:
    # Typing: roles come from our own user.* entries: groups is a list.
    named = [str(group) for group in roles.get("groups") or []]  # type: ignore[attr-defined]
    named += [flag.replace("is_", "") for flag in ("is_staff", "is_superuser") if roles.get(flag)]
    return ", ".join(named) or "no role"


def _user_created(data: Mapping[str, object], actor: str, at: datetime) -> str:
    state = "" if data.get("is_active") else " (inactive)"
    return f"{actor} created the account {data.get('username')}{state}: {_roles(data)}"


def _user_renamed(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"{actor} renamed the account {data.get('old_username')} to {data.get('username')}"


def _user_roles_changed(data: Mapping[str, object], actor: str, at: datetime) -> str:
    before, after = data.get("before") or {}, data.get("after") or {}
    # Typing: before/after are our own user.* entries' role mappings.
    return f"{actor} changed the roles of {data.get('username')}: {_roles(before)} -> {_roles(after)}"  # type: ignore[arg-type]


def _user_deactivated(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"{actor} deactivated the account {data.get('username')}"


def _user_reactivated(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"{actor} reactivated the account {data.get('username')}"


def _user_deleted(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return f"{actor} deleted the account {data.get('username')} ({_roles(data)})"


def _signin_locked_out(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return (
        f"password sign-in for {data.get('username') or '?'} from {data.get('ip_address') or '?'} paused for "
        f"{data.get('locked_minutes')} min after {data.get('failures')} failed attempts"
    )


def _audit_archived(data: Mapping[str, object], actor: str, at: datetime) -> str:
    return (
        f"audit entries {data.get('first_seq')}-{data.get('last_seq')} archived to {data.get('name')} "
        "and removed from the database"
    )


def generic(data: Mapping[str, object], actor: str, at: datetime) -> str:
    shown = ", ".join(f"{key}={quoted(value, limit=60)}" for key, value in data.items() if value is not None)
    return f"{actor}: {shown}" if shown else actor


RENDERERS: dict[str, Callable[[Mapping[str, object], str, datetime], str]] = {
    "operation.registered": _registered,
    "controller.decision": _controller,
    "escalation.opened": _escalated,
    "human.decision": _human_decision,
    "human.inspect": _human_inspect,
    "human.refused": _human_refused,
    "human.acknowledged": _human_acknowledged,
    "human.unacknowledged": _human_unacknowledged,
    "human.reassigned": _human_reassigned,
    "human.note": _human_note,
    "human.snoozed": _human_snoozed,
    "escalation.ack_expired": _ack_expired,
    "human.bulk_decision": _human_bulk_decision,
    "oncall.notice": _oncall_notice,
    "provider.cancel_response": _cancel_response,
    "provider.paused": _paused,
    "operation.cancelled": _cancelled,
    "operation.cancel_forwarded": _cancel_forwarded,
    "operation.acknowledged": _acknowledged,
    "callback.failed": _callback_failed,
    "operation.business_deadline_near": _business_near,
    "profile.changed": _profile_changed,
    "policy.changed": _policy_changed,
    "user.created": _user_created,
    "user.renamed": _user_renamed,
    "user.roles_changed": _user_roles_changed,
    "user.deactivated": _user_deactivated,
    "user.reactivated": _user_reactivated,
    "user.deleted": _user_deleted,
    "signin.locked_out": _signin_locked_out,
    "audit.archived": _audit_archived,
}
