"""Every channel is one module behind one interface, registered once: the kinds the outbox can hold and
the channels the registry knows are the same set, and what the rules learn from the channels is what
each channel says of itself."""

from __future__ import annotations

from escalations.oncall.channels.base import Channel
from escalations.oncall.channels.registry import CHANNELS, FOLLOWED_UP, UPDATED_IN_PLACE
from operations.notify.kinds import CHANNELS as CHANNEL_KINDS
from operations.notify.kinds import LABELS, TARGETS, Kind
from operations.notify.rules import Event


def test_every_channel_kind_has_its_one_registered_channel_and_words():
    assert set(CHANNELS) == set(CHANNEL_KINDS)
    assert all(isinstance(channel, Channel) and channel.kind is kind for kind, channel in CHANNELS.items())
    assert set(LABELS) == set(CHANNEL_KINDS)
    # A target is a person (mailed) or a channel of its own kind.
    assert set(TARGETS) - {Kind.USER, Kind.GROUP} <= set(CHANNEL_KINDS)


def test_follow_ups_are_each_channels_own_word():
    assert FOLLOWED_UP == {Kind.PAGERDUTY, Kind.SLACK_CHANNEL}
    for channel in CHANNELS.values():
        assert set(channel.follow_ups) <= {Event.ACKNOWLEDGED, Event.ENDED, Event.UPDATED}
    # Only a post that can be edited shows the card as it is after every act (PagerDuty has no such event).
    assert UPDATED_IN_PLACE == {Kind.SLACK_CHANNEL}
    assert [kind for kind, channel in CHANNELS.items() if channel.one_alert_per_card] == [Kind.PAGERDUTY]
