"""Template helpers for the dashboard: times (relative, with absolute UTC on hover), labels, gauges.

Every time is rendered server-side ("in 12 min", with the UTC time in `title`), so pages read
right without JavaScript; static/js/app.js only keeps the relative words fresh.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from operations.decisions.cards import reason_label
from operations.decisions.options import human_duration
from operations.decisions.signin import OIDC, SignIn

register = template.Library()


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


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
        value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
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
    if delta <= timedelta(0):
        words, urgency = f"{label} passed {human_duration(-delta)} ago".strip(), "overdue"
    else:
        words = f"{label} in {human_duration(delta)}".strip()
        urgency = "soon" if delta <= timedelta(minutes=15) else "later"
    return format_html(
        '<time class="countdown urgency-{}" datetime="{}" title="{}" data-rel="countdown" data-label="{}">{}</time>',
        urgency,
        value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        _utc(value),
        label,
        words,
    )


@register.filter
def utc(value: datetime | None) -> str:
    return "—" if value is None else _utc(value)


@register.filter
def hhmm(value: datetime | None) -> str:
    return "—" if value is None else value.astimezone(UTC).strftime("%H:%M:%S")


@register.filter
def reason_name(value: str) -> str:
    return reason_label(value)


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
def waited(value: datetime | None) -> str:
    if value is None:
        return ""
    return human_duration(timezone.now() - value)


@register.filter
def pretty_json(value: object) -> str:
    """Indented JSON as plain text (autoescaped by the template like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@register.simple_tag
def story_lines(lines: list[object]) -> str:
    """The timeline's <li> lines, built in one pass (an operation can have thousands)."""
    return format_html_join(
        "",
        '<li class="story-{}"><time datetime="{}" title="{}">{}</time> <span class="story-actor">{}</span> '
        '<span class="story-text">{}</span></li>',
        (
            (
                line.kind.replace(".", "-"),  # type: ignore[attr-defined]
                line.at.strftime("%Y-%m-%dT%H:%M:%SZ"),  # type: ignore[attr-defined]
                _utc(line.at),  # type: ignore[attr-defined]
                line.at.strftime("%H:%M:%S"),  # type: ignore[attr-defined]
                line.actor,  # type: ignore[attr-defined]
                line.text,  # type: ignore[attr-defined]
            )
            for line in lines
        ),
    )


@register.filter
def isotext(value: object) -> str:
    """An RFC 3339 string from a JSON record ("2026-12-01T10:15:00Z") shown as "2026-12-01 10:15:00 UTC"."""
    try:
        return _utc(datetime.fromisoformat(str(value).replace("Z", "+00:00")))
    except ValueError:
        return str(value or "—")


@register.filter
def signed_in(record: object) -> str:
    """How a decider had authenticated (Decision.authentication), in words: "password, 2026-12-01
    09:12:03 UTC" or "single sign-on https://id.example.com as 248289761001, 2026-12-01 09:12:03 UTC"."""
    sign_in = SignIn.from_record(record)
    if sign_in is None:
        return "not recorded"
    when = _utc(sign_in.at)
    if sign_in.method == OIDC:
        return f"single sign-on {sign_in.issuer} as {sign_in.subject}, {when}"
    return f"password, {when}"
