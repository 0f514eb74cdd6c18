"""Template helpers for the dashboard: times, labels, the words for outcomes, gauges.

Every time is rendered server-side in UTC inside a <time datetime="..."> element ("in 12 min", or
"2026-12-01 10:15:00 UTC"), so pages read right without JavaScript; static/js/app.js keeps the
relative words fresh and shows absolute times in the viewer's time zone, with UTC on hover.
Sentences that name times ("new deadline 11:15 UTC") sit in elements marked `data-utc-text`, which
the same script converts. Printable reports and exports stay UTC (they use the `utc` filter).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django import template
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from operations.audit.story import StoryLine
from operations.cards.card import reason_label
from operations.cards.options import human_duration
from operations.cards.signin import OIDC, SignIn
from operations.cards.words import (
    CancelAnswerWords,
    activity_words,
    cancel_answer_words,
    cancel_words,
    channel_label,
    channel_words,
    decision_words,
    option_title,
)
from operations.models import Escalation
from operations.notify.rules import snooze_choices

register = template.Library()


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def relative(value: datetime, now: datetime) -> str:
    delta = value - now
    if abs(delta) < timedelta(seconds=5):
        return "just now"
    if delta > timedelta(0):
        return f"in {human_duration(delta)}"
    return f"{human_duration(-delta)} ago"


@register.simple_tag
def when(value: datetime | None, empty: str = "—") -> str:
    """<time> with relative words and the absolute UTC time on hover."""
    if value is None:
        return empty
    return format_html(
        '<time datetime="{}" title="{}" data-rel="ago">{}</time>',
        _iso(value),
        _utc(value),
        relative(value, timezone.now()),
    )


@register.simple_tag
def countdown(value: datetime | None, label: str, empty: str = "") -> str:
    """ "<label> in 12 min" / "<label> passed 3 min ago", coloured by urgency (always with words)."""
    if value is None:
        return empty
    now = timezone.now()
    delta = value - now
    if abs(delta) < timedelta(seconds=1):
        # Within the second it falls: "in 0 s" / "passed 0 s ago" read as a glitch.
        words, urgency = f"{label} now".strip(), "overdue" if delta <= timedelta(0) else "soon"
    elif delta <= timedelta(0):
        words, urgency = f"{label} passed {human_duration(-delta)} ago".strip(), "overdue"
    else:
        words = f"{label} in {human_duration(delta)}".strip()
        urgency = "soon" if delta <= timedelta(minutes=15) else "later"
    return format_html(
        '<time class="countdown urgency-{}" datetime="{}" title="{}" data-rel="countdown" data-label="{}">{}</time>',
        urgency,
        _iso(value),
        _utc(value),
        label,
        words,
    )


@register.simple_tag
def at(value: datetime | None, form: str = "datetime", empty: str = "—") -> str:
    """An absolute time: UTC text the browser shows in the viewer's zone (UTC stays on hover).

    `form` is "datetime" ("2026-12-01 10:15:00 UTC") or "time" ("10:15:00", for tables whose
    column says what day it is)."""
    if value is None:
        return empty
    text = _utc(value) if form == "datetime" else value.astimezone(UTC).strftime("%H:%M:%S")
    return format_html('<time datetime="{}" title="{}" data-local="{}">{}</time>', _iso(value), _utc(value), form, text)


@register.filter
def iso(value: datetime | None) -> str:
    """RFC 3339 UTC for attributes (data-utc-ref)."""
    return "" if value is None else _iso(value)


@register.simple_tag
def at_now(form: str = "datetime") -> str:
    return at(timezone.now(), form)


@register.filter
def utc(value: datetime | None) -> str:
    """Plain UTC text, for exports and printable reports (which stay UTC) and attributes."""
    return "—" if value is None else _utc(value)


@register.filter
def quoted(value: str) -> str:
    """“label”, or ‘label’ when the label quotes something itself (Treat “needs_payment” as …)."""
    text = str(value)
    return f"‘{text}’" if "“" in text else f"“{text}”"


@register.filter
def reason_name(value: str) -> str:
    return reason_label(value)


@register.filter
def check_reason(text: str) -> str:
    """A status check's recorded "<reason id>: explanation" with the reason in its words."""
    head, sep, rest = str(text or "").partition(": ")
    if sep and reason_label(head) != head:
        return f"{reason_label(head)}: {rest}"
    return str(text or "")


@register.filter
def option_name(option_id: str) -> str:
    """ "Extend 15 min / 4 checks" for `extend:15m:4`: tables name options, not ids."""
    return option_title(option_id)


@register.filter
def outcome_label(decision: object) -> str:
    """What became of a decision, in the words of every page, export and the audit story."""
    return decision_words(decision).label


@register.simple_tag
def outcome(decision: object) -> str:
    words = decision_words(decision)
    return format_html('<span class="outcome outcome-{}">{}</span>', words.tone, words.label)


@register.filter
def cancel_label(cancel_state: str) -> str:
    return cancel_words(cancel_state).label


@register.filter
def cancel_answer(response: dict) -> CancelAnswerWords:
    """A card's cancel at the provider (Escalation.cancel_response) in the card's words."""
    return cancel_answer_words(state=str(response.get("state") or ""), detail=str(response.get("detail") or ""))


@register.filter
def channel_name(channel: object) -> str:
    return channel_label(str(channel or ""))


@register.filter
def notice_said(activity: object) -> str:
    """A channel's notice on a card: "PagerDuty reported: “resolved in PagerDuty by …” — nothing changed"."""
    channel = channel_label(str(getattr(activity, "channel", "") or ""))
    return f"{channel} reported: “{getattr(activity, 'text', '')}” — nothing changed"


@register.filter
def via(act: object) -> str:
    """Where a Decision or CardActivity came from, when not the dashboard: "via Slack (slack:T1/U1)"."""
    return channel_words(
        channel=str(getattr(act, "channel", "") or ""), identity=str(getattr(act, "channel_identity", "") or "")
    )


@register.filter
def activity_said(activity: object) -> str:
    """What an act on a card did, in words ("" for a note, whose text the page quotes)."""
    return activity_words(
        kind=str(getattr(activity, "kind", "")),
        username=str(getattr(activity, "username", "")),
        to_username=str(getattr(activity, "to_username", "")),
        previous_username=str(getattr(activity, "previous_username", "")),
        until=utc(getattr(activity, "until", None)),
    )


@register.filter
def snoozed(esc: Escalation) -> bool:
    """Whether the card's reminders are snoozed now."""
    until = getattr(esc, "snoozed_until", None)
    return until is not None and until > timezone.now()


@register.filter
def snooze_options(esc: Escalation) -> list[tuple[int, str]]:
    """The snoozes the card offers now, as (minutes, "1 h"): those ending before the deadline."""
    choices = snooze_choices(deadline_at=esc.operation.deadline_at, now=timezone.now())
    return [(minutes, human_duration(timedelta(minutes=minutes))) for minutes in choices]


@register.filter
def who(person: AbstractBaseUser | str | None, viewer: AbstractBaseUser | AnonymousUser) -> str:
    """A person (an account, or a username as recorded) as the viewer reads them: "you", or their username."""
    if person is None:
        return ""
    name = person if isinstance(person, str) else person.get_username()
    return "you" if viewer.is_authenticated and name == viewer.get_username() else name


@register.filter
def oneline(text: str) -> str:
    """Text written over several template lines, on one (for an attribute such as a long title)."""
    return " ".join(str(text).split())


@register.filter
def percent(used: int | None, total: int | None) -> int:
    if not total:
        return 0
    return max(0, min(100, round(100 * (used or 0) / total)))


@register.filter
def words(value: str) -> str:
    """An identifier as words: "needs_attention" -> "needs attention"."""
    return str(value or "").replace("_", " ")


@register.simple_tag
def ended_against(ended: datetime, deadline: datetime, name: str) -> str:
    """ "finished 20 min before the business deadline": a fact that stays true once it ended."""
    delta = deadline - ended
    if abs(delta) < timedelta(seconds=1):
        return f"finished exactly at {name}"
    side = "before" if delta > timedelta(0) else "after"
    return f"finished {human_duration(delta)} {side} {name}"


@register.simple_tag
def waited(value: datetime | None, until: datetime | None = None) -> str:
    """How long since `value` (until now, or until `until` once the operation ended)."""
    if value is None:
        return ""
    return human_duration((until or timezone.now()) - value)


@register.filter
def pretty_json(value: object) -> str:
    """Indented JSON as plain text (autoescaped by the template like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@register.simple_tag
def story_lines(lines: list[StoryLine]) -> str:
    """The timeline's <li> lines, built in one pass (an operation can have thousands)."""
    return format_html_join(
        "",
        # data-utc-ref: a time in the sentence without a date is on the entry's (UTC) day.
        '<li class="story-{}" data-utc-ref="{}"><time datetime="{}" title="{}" data-local="time">{}</time> '
        '<span class="story-actor">{}</span> <span class="story-text" data-utc-text>{}</span></li>',
        (
            (
                line.kind.replace(".", "-"),
                line.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                line.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                _utc(line.at),
                line.at.strftime("%H:%M:%S"),
                line.actor,
                line.text,
            )
            for line in lines
        ),
    )


@register.simple_tag
def at_text(value: object) -> str:
    """An RFC 3339 string from a JSON record ("2026-12-01T10:15:00Z") shown like `at`."""
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value or "—")
    return at(moment if moment.tzinfo else moment.replace(tzinfo=UTC))


@register.filter
def seconds(value: float | None) -> str:
    """A duration given in seconds, in words: "45 s", "12 min", "1 h 5 min"."""
    return "—" if value is None else human_duration(timedelta(seconds=value))


@register.filter
def signed_in(record: object) -> str:
    """How a decider had authenticated (Decision.authentication), in words: "password, 2026-12-01
    09:12:03 UTC" or "single sign-on https://id.example.com as 248289761001, 2026-12-01 09:12:03 UTC"."""
    sign_in = SignIn.from_record(record)
    if sign_in is None:
        return "not recorded"
    when = "time not given by the provider" if sign_in.at is None else _utc(sign_in.at)
    if sign_in.method == OIDC:
        return f"single sign-on {sign_in.issuer} as {sign_in.subject}, {when}"
    return f"password, {when}"
