"""Who was told about a card, and where its escalation policy stands: one query per card; and how
the hourly caps on messages to people stand (/system/)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model

from escalations.oncall import caps
from escalations.oncall.channels.registry import CHANNELS
from operations.limits import ratelimit
from operations.models import NotificationDelivery, PolicyRun, RateWindow
from operations.notify.kinds import LABELS, Kind
from operations.notify.policy import Policy
from operations.notify.rules import Event

WHY = {
    "reassigned": "card handed over",
    "taken_over": "card taken over",
    "awaiting_second": "second responder needed",
}


@dataclass(frozen=True)
class Line:
    """One notification, as the card lists it: "level 2, email to bob 19:12 (sent)"."""

    what: str
    state: str  # pending / sent / failed / skipped
    at: datetime  # when it finished, or when it was written
    detail: str
    attempts: int


@dataclass(frozen=True)
class Notified:
    policy: str  # "" when the card follows no policy
    levels: int
    status: str  # running / acknowledged / exhausted / ended
    level: int  # 1-based level last sent (0: none yet)
    next_step_at: datetime | None
    lines: list[Line]
    # Set when the card joined a group and the lines are the group's first card's: a group is told
    # once, through its first card, for all of its cards.
    group_id: int | None = None

    @property
    def sent(self) -> int:
        return sum(1 for line in self.lines if line.state == "sent")

    @property
    def failed(self) -> int:
        return sum(1 for line in self.lines if line.state == "failed")


def card_notifications(*, escalation_id: int, group_first_card_id: int | None = None) -> Notified:
    """One query: the card's messages, with its run joined (a run always wrote its first level).

    `group_first_card_id`: the first card of the card's group. A group is told once, through its
    first card: a card that joined one and was told nothing of its own shows what the first card's
    messages reached (read in the same query)."""
    ids = [escalation_id]
    if group_first_card_id is not None and group_first_card_id != escalation_id:
        ids.append(group_first_card_id)
    rows = list(
        NotificationDelivery.objects.filter(escalation_id__in=ids)
        .select_related("escalation__policy_run")
        .order_by("created_at", "pk")
    )
    own = [row for row in rows if row.escalation_id == escalation_id]
    if own or len(ids) == 1:
        return _notified(own)
    card = rows[0].escalation if rows else None
    return replace(_notified(rows), group_id=card.group_id) if card is not None else _notified([])


def _notified(rows: list[NotificationDelivery]) -> Notified:
    lines = [_line(row) for row in rows]
    # Rows of cards (filtered by card above), each with its card joined.
    card = rows[0].escalation if rows else None
    try:
        run = card.policy_run if card is not None else None
    except PolicyRun.DoesNotExist:
        run = None
    if run is None:
        return Notified(policy="", levels=0, status="", level=0, next_step_at=None, lines=lines)
    return Notified(
        policy=run.policy_name,
        levels=len(Policy.from_json(run.snapshot).levels),
        status=run.status,
        level=run.level + 1,
        next_step_at=run.next_step_at,
        lines=lines,
    )


def _line(row: NotificationDelivery) -> Line:
    kind = Kind(row.channel)
    if kind is Kind.EMAIL:
        what = f"email to {row.display}"
    elif kind is Kind.SLACK_CHANNEL:
        what = f"{LABELS[kind]} {row.address}"
    else:
        what = LABELS[kind]
    follow_up = CHANNELS[kind].follow_ups.get(Event(row.event))
    if follow_up:
        what = f"{what} {follow_up}"
    elif row.event in WHY:
        what = f"{what} ({WHY[row.event]})"
    elif row.level > 0:
        what = f"level {row.level + 1}, {what}" + (f", repeat {row.repetition}" if row.repetition else "")
    if row.round and row.event == "level":
        what = f"{what} (after an unacknowledge)"
    return Line(
        what=what,
        state=row.state,
        at=row.finished_at or row.created_at,
        detail=row.detail,
        attempts=row.attempts,
    )


@dataclass(frozen=True)
class PagingCaps:
    """The hourly caps as they stand in the current window (escalations.oncall.caps)."""

    per_hour: int  # NOTIFY_MAX_PER_HOUR (0: no cap)
    used: int  # messages counted against it this hour
    window_left_s: int
    per_actor: int  # NOTIFY_MAX_PER_ACTOR_PER_HOUR (0: no cap)
    actors: list[tuple[str, int]]  # (username, messages their acts caused this hour), most first
    restart_min_s: int  # NOTIFY_RESTART_MIN_S
    resumed: int  # give-backs this hour that resumed a round instead of restarting it
    held_back: int  # messages skipped by an hourly cap in the last hour


def paging_caps(*, now: datetime) -> PagingCaps:
    used, left = ratelimit.used(key=caps.GLOBAL_KEY, window_s=caps.WINDOW_S, now=now)
    start, _ = ratelimit.window_of(now=now, window_s=caps.WINDOW_S)
    spent = dict(
        RateWindow.objects.filter(key__startswith=caps.ACTOR_KEY_PREFIX, window_start=start).values_list("key", "count")
    )
    ids = {int(key.removeprefix(caps.ACTOR_KEY_PREFIX)): count for key, count in spent.items()}
    names = dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))
    actors = sorted(((names.get(pk, f"account {pk}"), n) for pk, n in ids.items()), key=lambda a: (-a[1], a[0]))
    # caps.hold's words: "NOTIFY_MAX_PER_HOUR (60) reached", "alice's NOTIFY_MAX_PER_ACTOR_PER_HOUR (20) reached".
    held_back = NotificationDelivery.objects.filter(
        state=NotificationDelivery.State.SKIPPED,
        finished_at__gte=now - timedelta(hours=1),
        detail__contains="_PER_HOUR (",
    ).count()
    return PagingCaps(
        per_hour=settings.NOTIFY_MAX_PER_HOUR,
        used=used,
        window_left_s=left,
        per_actor=settings.NOTIFY_MAX_PER_ACTOR_PER_HOUR,
        actors=actors,
        restart_min_s=settings.NOTIFY_RESTART_MIN_S,
        resumed=ratelimit.used(key=caps.RESUMED_KEY, window_s=caps.WINDOW_S, now=now)[0],
        held_back=held_back,
    )
