"""The one vocabulary of who a policy names and what a message is sent through.

A policy target and a notification row's channel are the same word: `pagerduty` is both the target
`{ pagerduty = "ONCALL_PD_PAYMENTS" }` and the channel its rows are sent through. Two kinds are
targets only (`user` and `group`: each person is mailed, so their rows' channel is `email`) and one
is a channel only (`slack_reply`: the answer to a click in Slack). The model's choices, its check
constraint, the policy's validation and the card's words are all read from here
(operations.models.notify, operations.notify.policy, escalations.selectors.notifications); how each
channel renders and sends is its own module in the human layer (escalations/oncall/channels/).

Pure: no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class Kind(StrEnum):
    USER = "user"  # ref: a username; mailed at the account's address
    GROUP = "group"  # ref: a Django group; each member with the responder role is mailed
    EMAIL = "email"  # ref: an address outside pollerdash (a team list)
    SLACK_WEBHOOK = "slack_webhook"  # ref: the NAME of the ONCALL_ variable holding the webhook URL
    SLACK_CHANNEL = "slack_channel"  # ref: a channel id, posted with the Slack app's bot token
    PAGERDUTY = "pagerduty"  # ref: the NAME of the ONCALL_ variable holding the routing key
    TEAMS_WEBHOOK = "teams_webhook"  # ref: the NAME of the ONCALL_ variable holding a Teams Workflows URL
    SLACK_REPLY = "slack_reply"  # not a target: the answer to a click in Slack, through its response_url


class Ref(StrEnum):
    """What a target's value is; each is kept in the PolicyTarget column of the same name."""

    USER = "user"  # a username (a foreign key to the account)
    GROUP = "group"  # a group name (a foreign key to the group)
    EMAIL = "email"  # an email address
    ENV = "env"  # the NAME of an ONCALL_ environment variable holding a secret (a URL, a key)
    CHANNEL = "channel"  # a Slack channel id


# What a policy may name, and what the name is.
TARGETS: Mapping[Kind, Ref] = {
    Kind.USER: Ref.USER,
    Kind.GROUP: Ref.GROUP,
    Kind.EMAIL: Ref.EMAIL,
    Kind.SLACK_WEBHOOK: Ref.ENV,
    Kind.SLACK_CHANNEL: Ref.CHANNEL,
    Kind.PAGERDUTY: Ref.ENV,
    Kind.TEAMS_WEBHOOK: Ref.ENV,
}
# What a message row is sent through: people (users, groups) are mailed.
CHANNELS = frozenset(kind for kind in Kind if kind not in (Kind.USER, Kind.GROUP))
# Targets whose value names the variable that holds a secret, never the secret itself.
SECRET_REF_KINDS = frozenset(kind for kind, ref in TARGETS.items() if ref is Ref.ENV)

# How the card and the admin name a channel ("PagerDuty", "Slack C0123…": a Slack channel's id follows).
LABELS: Mapping[Kind, str] = {
    Kind.EMAIL: "email",
    Kind.SLACK_WEBHOOK: "Slack",
    Kind.SLACK_CHANNEL: "Slack",
    Kind.PAGERDUTY: "PagerDuty",
    Kind.TEAMS_WEBHOOK: "Microsoft Teams",
    Kind.SLACK_REPLY: "Slack reply",
}


def targets_in_order() -> list[Kind]:
    """The target kinds in the enum's order (the model's choices, the error messages)."""
    return [kind for kind in Kind if kind in TARGETS]


def channels_in_order() -> list[Kind]:
    return [kind for kind in Kind if kind in CHANNELS]
