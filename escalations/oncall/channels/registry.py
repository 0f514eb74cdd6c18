"""Every channel, registered once: the one place a channel's module is named.

The sender picks a row's channel here by its kind; the rules learn here which channels follow a
message up and which fold a card's pages into one alert; the card's list of messages takes each
follow-up's words from here. A kind of operations.notify.kinds.CHANNELS without a channel here fails
tests/escalations/test_channels.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from escalations.oncall.channels.base import Channel
from escalations.oncall.channels.email import EmailChannel
from escalations.oncall.channels.pagerduty import PagerDuty
from escalations.oncall.channels.slack_channel import SlackChannel
from escalations.oncall.channels.slack_reply import SlackReply
from escalations.oncall.channels.slack_webhook import SlackWebhook
from escalations.oncall.channels.teams_webhook import TeamsWebhook
from operations.notify.kinds import Kind
from operations.notify.rules import Event

CHANNELS: Mapping[Kind, Channel] = {
    channel.kind: channel
    for channel in (EmailChannel(), SlackWebhook(), SlackChannel(), SlackReply(), PagerDuty(), TeamsWebhook())
}
# The channels whose messages have follow-ups (operations.notify.rules.on_acknowledge, on_end).
FOLLOWED_UP = frozenset(kind for kind, channel in CHANNELS.items() if channel.follow_ups)
# The channels whose messages show the card as it is after every act (operations.notify.rules.on_change).
UPDATED_IN_PLACE = frozenset(kind for kind, channel in CHANNELS.items() if Event.UPDATED in channel.follow_ups)


def channel(kind: Kind) -> Channel:
    return CHANNELS[kind]
