"""The notification outbox's rules: retries, what an acknowledgement or a decision does to the
rows not sent yet, and the order of PagerDuty and Slack follow-ups.

The rows themselves (NotificationDelivery) live in the database; these are the decisions about
them, pure, so the services (escalations/oncall/) stay thin and every rule has a unit test. `Event`
and `State` are the one vocabulary of those rows: the model's choices are made from them
(operations.models.notify), so a row the database can hold is always a row the rules can read.

- `retry_delay_s`: when to try a failed attempt again (or give up);
- `on_acknowledge` / `on_end`: rows to skip and follow-ups to add, in the transaction of the
  acknowledgement or decision, so "acknowledged" and "level 2 will not be sent" commit together;
- `follow_up_ready`: a follow-up (PagerDuty acknowledge/resolve, Slack message update) waits for
  the row it follows, so trigger -> acknowledge -> resolve arrive in order with one dedup_key;
- `never_held_by_hourly_caps`: the messages the hourly caps may count but never hold back.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from operations.notify.recipients import Channel


class State(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"  # the receiver refused it for good, or retries ran out
    SKIPPED = "skipped"  # never sent, on purpose; the reason is recorded


class Event(StrEnum):
    LEVEL = "level"  # email, Slack post or PagerDuty trigger of a level send
    ACKNOWLEDGED = "acknowledged"  # PagerDuty acknowledge; Slack message updated in place
    ENDED = "ended"  # PagerDuty resolve; Slack message updated in place
    REASSIGNED = "reassigned"  # the responder a card was handed to is told
    TAKEN_OVER = "taken_over"  # the responder a card was taken over from is told
    AWAITING_SECOND = "awaiting_second"  # an acceptance needs a second responder
    SLACK_REPLY = "slack_reply"  # the answer to a click in Slack


TERMINAL = frozenset({State.SENT, State.FAILED, State.SKIPPED})

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
    channel: Channel
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

    channel: Channel
    address: str
    event: Event
    after_row_id: int


@dataclass(frozen=True)
class Changes:
    skip: tuple[Skip, ...]
    add: tuple[FollowUp, ...]


def on_acknowledge(*, rows: Sequence[Row]) -> Changes:
    return _close_streams(rows=rows, event=Event.ACKNOWLEDGED, why="acknowledged before it was sent")


def on_end(*, rows: Sequence[Row]) -> Changes:
    return _close_streams(rows=rows, event=Event.ENDED, why="the card was closed before it was sent")


def _close_streams(*, rows: Sequence[Row], event: Event, why: str) -> Changes:
    """Level sends not attempted yet are skipped (an in-flight attempt cannot be recalled and is
    left alone). Each PagerDuty or Slack stream whose first message went out, or may have, gets
    one follow-up of `event`, ordered after the stream's last row that went out or may go out
    (never after a row skipped here or earlier: a follow-up chained to a skipped re-trigger after a
    give-back would itself be skipped, and the alert would stay open); email has no follow-up."""
    skip = [Skip(row.id, why) for row in rows if row.event is Event.LEVEL and row.unsent]
    skipped = {s.row_id for s in skip}
    streams: dict[tuple[Channel, str], list[Row]] = {}
    for row in sorted(rows, key=lambda r: r.id):
        if row.channel in (Channel.PAGERDUTY, Channel.SLACK_WEBHOOK, Channel.SLACK_CHANNEL):
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
        if channel is Channel.SLACK_WEBHOOK:
            # An incoming webhook cannot edit what it posted; a click in Slack replaces the message
            # through its response_url instead (escalations/oncall/slack.py).
            continue
        add.append(FollowUp(channel=channel, address=address, event=event, after_row_id=live[-1].id))
    return Changes(skip=tuple(skip), add=tuple(add))


def never_held_by_hourly_caps(*, event: Event, channel: Channel, slot: tuple[int, int, int]) -> bool:
    """A new card's (or group's) first page - round 0, level 1, its first repetition - and every
    PagerDuty trigger go out whatever the hourly caps say: a flood of other messages, or someone
    spending the caps, must never be what keeps on-call from hearing about a new outage. PagerDuty
    folds a card's triggers into one alert (one dedup_key), so they cannot flood a pager."""
    if event is not Event.LEVEL:
        return False
    return channel is Channel.PAGERDUTY or slot == (0, 0, 0)


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
