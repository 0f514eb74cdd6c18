"""The answer to a click in Slack: posted to the click's response_url, which Slack gave for it (a
short-lived capability, blanked once the row finishes). "replace" shows the card's state in place of
the message clicked; any other note is a reply only the clicker sees.

The response_url must be Slack's (https://hooks.slack.com/...) or a receiver listed in
NOTIFY_ALLOWED_HOSTS: pollerdash POSTs to it, so a forged one must not point anywhere else.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings

from escalations.oncall.channels.base import (
    Message,
    Request,
    Unsendable,
    WebhookChannel,
    admit,
    host_port,
    json_request,
)
from escalations.oncall.channels.slack_blocks import ephemeral, replacement
from escalations.oncall.channels.slack_channel import app_flags
from operations.notify.kinds import Kind

RESPONSE_URL_HOSTS = frozenset({"hooks.slack.com"})


class SlackReply(WebhookChannel):
    kind = Kind.SLACK_REPLY

    def render(self, message: Message) -> Request:
        if not message.response_url:
            raise Unsendable("the click's response_url is gone")
        target = admit(message.response_url, what="the response_url")
        listed = host_port(message.response_url) in settings.NOTIFY_ALLOWED_HOSTS
        if urlsplit(message.response_url).hostname not in RESPONSE_URL_HOSTS and not listed:
            raise Unsendable("the response_url is not on hooks.slack.com")
        if message.note == "replace" and message.card is not None:
            body = replacement(facts=message.card, status=message.status, now=message.now, **app_flags())
            return json_request(target, body)
        return json_request(target, ephemeral(message.note))
