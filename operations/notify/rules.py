"""The notification outbox's rules: retries, what an acknowledgement or a decision does to the
rows not sent yet, and the order of follow-ups (PagerDuty's acknowledge and resolve, a Slack post
updated in place).

The rows themselves (NotificationDelivery) live in the database; these are the decisions about
them, pure, so the services (escalations/oncall/) stay thin and every rule has a unit test. `Event`
and `State` are the one vocabulary of those rows: the model's choices are made from them
(operations.models.notify), so a row the database can hold is always a row the rules can read.

- `retry_delay_s`: when to try a failed attempt again (or give up);
- `on_acknowledge` / `on_end`: rows to skip and follow-ups to add, in the transaction of the
  acknowledgement or decision, so "acknowledged" and "level 2 will not be sent" commit together;
- `on_change`: the in-place updates any other act on the card writes (a Slack-app post shows the
  card as it is now after every act, wherever it was taken);
- `follow_up_ready`: a follow-up (PagerDuty acknowledge/resolve, Slack message update) waits for
  the row it follows, so trigger -> acknowledge -> resolve arrive in order with one dedup_key;
- `never_held_by_hourly_caps`: the messages the hourly caps may count but never hold back;
- `snooze_choices`: the snoozes a card offers (15 min, 1 h, 4 h), none past the operation's deadline.

Which channels follow a message up, and which fold a card's repeated pages into one alert, is
each channel's own word (escalations/oncall/channels/): the callers pass it in.
"""

from __future__ import annotations

import random
from collections.abc import Sequence, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from operations.notify.kinds import Kind


class State(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"  # the receiver refused it for good, or retries ran out
    SKIPPED = "skipped"  # never sent, on purpose; the reason is recorded


class Event(StrEnum):
    LEVEL = "level"  # email, Slack post or PagerDuty trigger of a level send
    ACKNOWLEDGED = "acknowledged"  # PagerDuty acknowledge; Slack message updated in place
    ENDED = "ended"  # PagerDuty resolve; Slack message updated in place
    # A Slack-app post updated in place to show the card as it is now after an act that neither
    # acknowledged nor closed it (given back, snoozed, a snooze's end, handed on, taken over, an
    # acknowledgement that timed out); never a predecessor of other follow-ups.
    UPDATED = "updated"
    REASSIGNED = "reassigned"  # the responder a card was handed to is told
    TAKEN_OVER = "taken_over"  # the responder a card was taken over from is told
    AWAITING_SECOND = "awaiting_second"  # an acceptance needs a second responder
    SLACK_REPLY = "slack_reply"  # the answer to a click in Slack
    # Not about a card: an operation's message to NOTIFY_EMAILS and NOTIFY_WEBHOOK_URL.
    CALLBACK_FAILED = "callback_failed"  # an agent's completion callback gave up
    BUSINESS_DEADLINE_NEAR = "business_deadline_near"  # a business deadline is near, the job still runs


TERMINAL = frozenset({State.SENT, State.FAILED, State.SKIPPED})
# Messages that reach people and count against the caps, as opposed to a stream's follow-ups and
# the answer to a click.
TO_PEOPLE = frozenset(
    {
        Event.LEVEL,
        Event.REASSIGNED,
        Event.TAKEN_OVER,
        Event.AWAITING_SECOND,
        Event.CALLBACK_FAILED,
        Event.BUSINESS_DEADLINE_NEAR,
    }
)

# Delay before attempt 1, 2, ... of one row: six attempts over about 18 minutes. PagerDuty asks
# for a retry on 429/5xx "after some time", "preferably with a backoff of a few minutes"; a page
# that still fails after that is shown as failed on the card and the next level goes on anyway.
SCHEDULE_S = (0, 30, 60, 120, 300, 600)
JITTER = 0.2
RETRY_AFTER_CAP_S = 15 * 60
# A claimed attempt whose task never reported back (worker killed, task lost) is offered again
# after this lease; the attempt stays counted, so it is retried as the next attempt.
CLAIM_LEASE_S = 60


def retry_delay_s(
    *, attempts_made: int, retry_after_s: float | None, rng: random.Random, schedule: Sequence[float] = SCHEDULE_S
) -> float | None:
    """Seconds until the next attempt after `attempts_made` attempts, or None: give up."""
    if attempts_made >= len(schedule):
        return None
    delay = schedule[attempts_made] * rng.uniform(1 - JITTER, 1 + JITTER)
    if retry_after_s is not None:
        delay = max(delay, min(max(retry_after_s, 0.0), RETRY_AFTER_CAP_S))
    return delay


@dataclass(frozen=True)
class Row:
    """What the rules need to know of one outbox row of a card."""

    id: int
    channel: Kind
    address: str
    event: Event
    state: State
    attempts: int
    # For a Slack post sent with the app: "channel/ts", which chat.update needs.
    provider_ref: str = ""

    @property
    def unsent(self) -> bool:
        return self.state is State.PENDING and self.attempts == 0


@dataclass(frozen=True)
class Skip:
    row_id: int
    reason: str


@dataclass(frozen=True)
class FollowUp:
    """A row to add: after `after_row_id` (the stream's last row), same channel and address."""

    channel: Kind
    address: str
    event: Event
    after_row_id: int


@dataclass(frozen=True)
class Changes:
    skip: tuple[Skip, ...]
    add: tuple[FollowUp, ...]


def on_acknowledge(*, rows: Sequence[Row], followed_up: Set[Kind]) -> Changes:
    return _close_streams(
        rows=rows, followed_up=followed_up, event=Event.ACKNOWLEDGED, why="acknowledged before it was sent"
    )


def on_end(*, rows: Sequence[Row], followed_up: Set[Kind]) -> Changes:
    """The streams' end; in-place updates not sent yet (a snooze's end) are skipped: the end's own
    update shows the card closed."""
    why = "the card was closed before it was sent"
    closed = _close_streams(rows=rows, followed_up=followed_up, event=Event.ENDED, why=why)
    pending = tuple(Skip(row.id, why) for row in rows if row.event is Event.UPDATED and row.unsent)
    return Changes(skip=closed.skip + pending, add=closed.add)


def on_change(
    *, rows: Sequence[Row], updated_in_place: Set[Kind], announced: Set[tuple[Kind, str]] = frozenset()
) -> tuple[FollowUp, ...]:
    """One in-place update for each stream of a channel in `updated_in_place` (a Slack-app post)
    whose post went out, or may have, unless the act's own follow-up already updates it
    (`announced`: its (channel, address)). The update follows the stream's last post (it waits for
    that post, nothing else) and shows the card as it is when it is sent."""
    streams: dict[tuple[Kind, str], list[Row]] = {}
    for row in sorted(rows, key=lambda r: r.id):
        if row.channel in updated_in_place and row.event is Event.LEVEL and row.state in (State.SENT, State.PENDING):
            streams.setdefault((row.channel, row.address), []).append(row)
    return tuple(
        FollowUp(channel=channel, address=address, event=Event.UPDATED, after_row_id=posts[-1].id)
        for (channel, address), posts in streams.items()
        if (channel, address) not in announced
    )


def _close_streams(*, rows: Sequence[Row], followed_up: Set[Kind], event: Event, why: str) -> Changes:
    """Level sends not attempted yet are skipped (an in-flight attempt cannot be recalled and is
    left alone). Each stream of a channel in `followed_up` (PagerDuty, a Slack-app post) whose
    first message went out, or may have, gets one follow-up of `event`, ordered after the stream's
    last row that went out or may go out (never after a row skipped here or earlier: a follow-up
    chained to a skipped re-trigger after a give-back would itself be skipped, and the alert would
    stay open). Other channels have no follow-up: email cannot be recalled, and an incoming
    webhook cannot edit what it posted (a click in Slack replaces the message through its
    response_url instead)."""
    skip = [Skip(row.id, why) for row in rows if row.event is Event.LEVEL and row.unsent]
    skipped = {s.row_id for s in skip}
    streams: dict[tuple[Kind, str], list[Row]] = {}
    for row in sorted(rows, key=lambda r: r.id):
        # An in-place update is never waited for: it may be scheduled for a snooze's end.
        if row.channel in followed_up and row.event is not Event.UPDATED:
            streams.setdefault((row.channel, row.address), []).append(row)
    add: list[FollowUp] = []
    for (channel, address), stream in streams.items():
        live = [r for r in stream if r.id not in skipped and r.state in (State.SENT, State.PENDING)]
        opened = [r for r in live if r.event is Event.LEVEL]
        if not opened:
            continue  # never reached anyone (failed or skipped): nothing to acknowledge or resolve
        if any(r.event is event and r.id > opened[-1].id for r in stream):
            # Already announced since the stream's last level went out (an acknowledgement
            # repeated, a decision retried); a level sent after a give-back is acknowledged anew.
            continue
        add.append(FollowUp(channel=channel, address=address, event=event, after_row_id=live[-1].id))
    return Changes(skip=tuple(skip), add=tuple(add))


def never_held_by_hourly_caps(*, event: Event, one_alert_per_card: bool, slot: tuple[int, int, int]) -> bool:
    """A new card's (or group's) first page - round 0, level 1, its first repetition - and every
    page through a channel that folds a card's pages into one alert (PagerDuty's dedup_key) go out
    whatever the hourly caps say: a flood of other messages, or someone spending the caps, must
    never be what keeps on-call from hearing about a new outage; such pages cannot flood a pager."""
    if event is not Event.LEVEL:
        return False
    return one_alert_per_card or slot == (0, 0, 0)


class Readiness(StrEnum):
    READY = "ready"
    WAIT = "wait"
    SKIP = "skip"


def follow_up_ready(*, predecessor: Row | None) -> tuple[Readiness, str]:
    """May this follow-up be claimed? Not while the row before it is still pending (an
    acknowledge overtaking a trigger still retrying after a 429 would be dropped by PagerDuty,
    and the trigger would then page after all). Skipped when the stream never got going."""
    if predecessor is None or predecessor.state is State.SENT:
        return Readiness.READY, ""
    if predecessor.state is State.PENDING:
        return Readiness.WAIT, ""
    if predecessor.event is not Event.LEVEL:
        # The acknowledge before a resolve failed: the resolve still closes the alert.
        return Readiness.READY, ""
    return Readiness.SKIP, f"the first message was {predecessor.state}, so there is nothing to update"


# The snoozes a responder may choose (Grafana OnCall's silence, bounded): 15 min, 1 h, 4 h.
SNOOZE_MINUTES = (15, 60, 240)


def snooze_choices(*, deadline_at: datetime | None, now: datetime) -> list[int]:
    """The snoozes (minutes) that end no later than the operation's deadline: reminders are never
    silent when the watch ends."""
    if deadline_at is None:
        return []
    return [m for m in SNOOZE_MINUTES if now + timedelta(minutes=m) <= deadline_at]
