"""From a step's targets to the recipients its outbox rows are written for.

A user or group target becomes one email row per person, so the card can say "email to alice
19:02" and a failure names whom it missed. Group membership and addresses are read when the level
is sent (not when the card opened): someone added to the on-call group an hour ago is paged by
level 2. The caller reads the directory; this module only decides.

A person reached twice in one step (directly and through a group) gets one row. Someone who
cannot be reached (no address, inactive, no responder role) still gets a row, recorded as
skipped with the reason, because "nobody was told and here is why" must show on the card.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from operations.notify.policy import Notify, TargetKind


class Channel(StrEnum):
    EMAIL = "email"
    SLACK_WEBHOOK = "slack_webhook"
    SLACK_CHANNEL = "slack_channel"
    PAGERDUTY = "pagerduty"
    SLACK_REPLY = "slack_reply"  # the answer to a click in Slack (not a policy target)


@dataclass(frozen=True)
class Person:
    username: str
    email: str
    is_active: bool
    is_responder: bool


@dataclass(frozen=True)
class People:
    by_username: Mapping[str, Person]
    # Group name -> usernames of its members (all of them; responders are picked here).
    group_members: Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class Recipient:
    """One outbox row of a level send. `address` is an email address, a channel id or the NAME
    of the environment variable holding a webhook URL or routing key; never a secret."""

    notify: Notify
    channel: Channel
    address: str
    display: str
    skip_reason: str = ""

    @property
    def key(self) -> str:
        return f"{self.channel}:{self.address.lower() if self.channel is Channel.EMAIL else self.address}"


def expand(notifications: Sequence[Notify], *, people: People) -> list[Recipient]:
    """Recipients of one step, in target order, each reached once."""
    out: list[Recipient] = []
    seen: set[str] = set()
    for notify in notifications:
        for recipient in _of(notify, people=people):
            if recipient.key in seen:
                continue
            seen.add(recipient.key)
            out.append(recipient)
    return out


def _of(notify: Notify, *, people: People) -> list[Recipient]:
    target = notify.target
    if target.kind is TargetKind.EMAIL:
        return [Recipient(notify, Channel.EMAIL, target.ref, target.ref)]
    if target.kind is TargetKind.SLACK_WEBHOOK:
        return [Recipient(notify, Channel.SLACK_WEBHOOK, target.ref, "Slack")]
    if target.kind is TargetKind.SLACK_CHANNEL:
        return [Recipient(notify, Channel.SLACK_CHANNEL, target.ref, f"Slack {target.ref}")]
    if target.kind is TargetKind.PAGERDUTY:
        return [Recipient(notify, Channel.PAGERDUTY, target.ref, "PagerDuty")]
    if target.kind is TargetKind.USER:
        return [_person(notify, people.by_username.get(target.ref), username=target.ref, via="")]
    members = people.group_members.get(target.ref)
    if not members:
        # The group was emptied or deleted after the policy was saved: GoAlert #4548's lesson is
        # to say so at once instead of silently waiting out the level.
        return [Recipient(notify, Channel.EMAIL, f"group:{target.ref}", target.ref, "the group has no members")]
    return [
        _person(notify, people.by_username.get(name), username=name, via=target.ref)
        for name in sorted(members)
        if name in people.by_username and people.by_username[name].is_responder
    ] or [Recipient(notify, Channel.EMAIL, f"group:{target.ref}", target.ref, "no member has the responder role")]


def _person(notify: Notify, person: Person | None, *, username: str, via: str) -> Recipient:
    display = username if not via else f"{username} ({via})"
    if person is None:
        return Recipient(notify, Channel.EMAIL, f"user:{username}", display, "the account no longer exists")
    if not person.is_active:
        return Recipient(notify, Channel.EMAIL, f"user:{username}", display, "the account is inactive")
    if not person.email:
        return Recipient(notify, Channel.EMAIL, f"user:{username}", display, "the account has no email address")
    return Recipient(notify, Channel.EMAIL, person.email, display)
