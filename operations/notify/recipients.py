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

from operations.notify.kinds import LABELS, Kind
from operations.notify.steps import Notify


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
    channel: Kind
    address: str
    display: str
    skip_reason: str = ""

    @property
    def key(self) -> str:
        return f"{self.channel}:{self.address.lower() if self.channel is Kind.EMAIL else self.address}"


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
    if target.kind is Kind.USER:
        return [_person(notify, people.by_username.get(target.ref), username=target.ref, via="")]
    if target.kind is Kind.GROUP:
        return _group(notify, target.ref, people=people)
    if target.kind is Kind.EMAIL:
        return [Recipient(notify, Kind.EMAIL, target.ref, target.ref)]
    # A chat or a pager: one row through the channel of the target's own kind.
    display = f"{LABELS[target.kind]} {target.ref}" if target.kind is Kind.SLACK_CHANNEL else LABELS[target.kind]
    return [Recipient(notify, target.kind, target.ref, display)]


def _group(notify: Notify, name: str, *, people: People) -> list[Recipient]:
    members = people.group_members.get(name)
    if not members:
        # The group was emptied or deleted after the policy was saved: GoAlert #4548's lesson is
        # to say so at once instead of silently waiting out the level.
        return [Recipient(notify, Kind.EMAIL, f"group:{name}", name, "the group has no members")]
    return [
        _person(notify, people.by_username.get(member), username=member, via=name)
        for member in sorted(members)
        if member in people.by_username and people.by_username[member].is_responder
    ] or [Recipient(notify, Kind.EMAIL, f"group:{name}", name, "no member has the responder role")]


def _person(notify: Notify, person: Person | None, *, username: str, via: str) -> Recipient:
    display = username if not via else f"{username} ({via})"
    if person is None:
        return Recipient(notify, Kind.EMAIL, f"user:{username}", display, "the account no longer exists")
    if not person.is_active:
        return Recipient(notify, Kind.EMAIL, f"user:{username}", display, "the account is inactive")
    if not person.email:
        return Recipient(notify, Kind.EMAIL, f"user:{username}", display, "the account has no email address")
    return Recipient(notify, Kind.EMAIL, person.email, display)
