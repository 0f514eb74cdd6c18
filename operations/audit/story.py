"""An operation's story: its audit entries as a human-readable timeline (docs/DESIGN.md section 8).

    10:20:31 received 503, Retry-After 120, next poll 10:22:31 UTC from provider guidance (request 3 of 12)
    10:24:02 escalated: deadline exceeded (12 of 12 requests)
    10:31:15 user:alice extended by 15 min / 4 checks (new deadline 10:46:15 UTC)

Built from the entry bodies - the hashed bytes, the source of truth - never from the mutable
rows they describe, so the story shown, printed and exported is the story the chain proves.
Times are UTC and every time in a sentence says so ("10:46:15 UTC"; the dashboard shows them in
the viewer's time zone); a time on another day than its entry carries its date. Outcomes and
option names are the words of operations.cards.words, as on every page and export.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from operations.audit.sentences import RENDERERS, generic
from operations.audit.story_format import actor_name, parse_at
from operations.cards.words import channel_words
from operations.models import AuditEntry


@dataclass(frozen=True)
class StoryLine:
    at: datetime
    seq: int | None  # None while the entry awaits integration into the tree
    kind: str  # the entry type, e.g. "controller.decision" (audit_types.DATA_KEYS)
    actor: str  # pollerdash's own process ("controller"), else "<kind>:<id>" ("user:alice", "agent:bot")
    text: str

    def as_text(self) -> str:
        return f"{self.at:%H:%M:%S} {self.text}"


def operation_story(*, operation_id: str) -> list[StoryLine]:
    """Every audit entry of the operation, oldest first, as one line each."""
    bodies = AuditEntry.objects.filter(operation_id=operation_id).order_by("pk").values_list("seq", "body")
    return [story_line(seq=seq, body=bytes(body)) for seq, body in bodies]


def operation_story_latest(*, operation_id: str, limit: int) -> list[StoryLine]:
    """The newest `limit` lines of an operation's story, oldest first (the page shows only these)."""
    rows = list(AuditEntry.objects.filter(operation_id=operation_id).order_by("-pk").values_list("seq", "body")[:limit])
    return [story_line(seq=seq, body=bytes(body)) for seq, body in reversed(rows)]


def story_line(*, seq: int | None, body: bytes) -> StoryLine:
    """One entry body as a StoryLine; an entry it cannot read still gets a line, never an error."""
    try:
        entry = json.loads(body)
        at = parse_at(entry["at"])
        kind = str(entry["type"])
        actor = actor_name(entry["actor"])
        data = entry["data"] if isinstance(entry["data"], dict) else {}
    except (ValueError, KeyError, TypeError):
        return StoryLine(at=datetime.fromtimestamp(0, UTC), seq=seq, kind="unreadable", actor="?", text="unreadable")
    try:
        text = RENDERERS[kind](data, actor, at)
    except (KeyError, TypeError, ValueError):
        # A type this module does not know yet, or a body it cannot read: show the raw facts.
        text = f"{kind}: {generic(data, actor, at)}"
    return StoryLine(at=at, seq=seq, kind=kind, actor=actor, text=text + _via(kind, data))


def _via(kind: str, data: Mapping[str, object]) -> str:
    """A person's act that did not come from the dashboard says where it came from: " (via Slack
    (slack:T1/U1))". A channel's own notice names it already."""
    if not kind.startswith("human.") or not isinstance(data.get("channel"), str):
        return ""
    identity = data.get("channel_identity")
    said = channel_words(channel=str(data["channel"]), identity=identity if isinstance(identity, str) else "")
    return f" ({said})" if said else ""
