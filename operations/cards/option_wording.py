"""An option's cost and effect in words, and the durations and clock times they use (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta

from operations.cards.option_types import Facts
from operations.polling.gate import business_deadline_binds
from operations.polling.window import Window


def effect_text(facts: Facts, window: Window) -> str:
    """ "+4 requests: 4 checks, about every 11 min, until 19:20 UTC — 15 min before the business deadline"."""
    parts = []
    if window.first_at > facts.now:
        parts.append(f"first check not before {clock_text(window.first_at, facts.now)} (the provider asked to wait)")
    checks = window.checks
    pace = f"{checks} checks, about every {human_duration(timedelta(seconds=window.spacing_s))}"
    if checks == 1:
        pace = "1 check"
    text = f"+{checks} request{'' if checks == 1 else 's'}: {pace}, until {clock_text(window.ends_at, facts.now)}"
    past = _past_business(facts, window.ends_at)
    if past is not None:
        if past > timedelta(0):
            text += f" — {human_duration(past)} after the business deadline"
        elif past < timedelta(0):
            text += f" — {human_duration(-past)} before the business deadline"
        else:
            text += " — exactly at the business deadline"
    parts.append(text)
    business = facts.business_deadline_at
    if (
        business is not None
        and facts.now < business < window.ends_at
        and business_deadline_binds(
            business_deadline_at=business, deadline_at=window.ends_at, waived=facts.business_deadline_waived
        )
    ):
        parts.append(f"polling stops at the business deadline {clock_text(business, facts.now)} for a person to decide")
    return "; ".join(parts)


def _past_business(facts: Facts, new_deadline: datetime) -> timedelta | None:
    if facts.business_deadline_at is None:
        return None
    return new_deadline - facts.business_deadline_at


def clock_text(value: datetime, now: datetime) -> str:
    """ "11:15 UTC" today, "Dec 2 11:15 UTC" on another day."""
    value_utc = value.astimezone(now.tzinfo) if now.tzinfo else value
    if value_utc.date() == now.date():
        return f"{value_utc:%H:%M} UTC"
    return f"{value_utc:%b} {value_utc.day} {value_utc:%H:%M} UTC"


def minutes_text(minutes: int) -> str:
    if minutes % (24 * 60) == 0:
        days = minutes // (24 * 60)
        return f"{days} day" + ("s" if days != 1 else "")
    if minutes % 60 == 0:
        return f"{minutes // 60} h"
    return f"{minutes} min"


def human_duration(delta: timedelta) -> str:
    """A short duration in words: "45 s", "20 min", "1 h 5 min", "2 days 3 h"."""
    seconds = int(abs(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = round(seconds / 60) if seconds < 3600 else seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{days} day" + ("s" if days != 1 else "") + (f" {hours} h" if hours else "")


def shortened(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
