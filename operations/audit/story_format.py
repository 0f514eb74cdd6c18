"""How the story of an operation writes its facts: entry times, actors and people, reasons, and
quoted values (operations/audit/story.py and the sentences of operations/audit/sentences.py).

Times are UTC and say so; a time on another day than its entry carries its date. pollerdash's own
processes are named plainly, everyone else with their kind, so no username can pass for the system.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

MAX_QUOTED = 200


def parse_at(text: object) -> datetime:
    return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def time_text(text: object, at: datetime) -> str:
    when = parse_at(text)
    return f"{when:%H:%M:%S} UTC" if when.date() == at.date() else f"{when:%Y-%m-%d %H:%M:%S} UTC"


def actor_name(actor: object) -> str:
    """pollerdash's own processes by name ("controller", "archiver"); everyone else with their kind
    ("user:alice", "agent:report-bot", "oidc:<issuer>"), so no username can pass for the system."""
    if not isinstance(actor, dict):
        return "?"
    kind, ident = str(actor.get("kind", "")), str(actor.get("id", ""))
    return ident if kind == "system" else f"{kind}:{ident}"


def user_name(username: object) -> str:
    """A person named in an entry's data (a card's holder, who it was handed to), as actors read."""
    return f"user:{username}"


def reason_text(reason: object) -> str:
    """'deadline_exceeded: 40 min passed' -> 'deadline exceeded: 40 min passed'."""
    text = str(reason or "no reason recorded")
    code, sep, rest = text.partition(": ")
    if sep and re.fullmatch(r"[a-z_]+", code):
        return f"{code.replace('_', ' ')}: {rest}"
    return text


def quoted(value: object, *, limit: int = MAX_QUOTED) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"'{text}'"
