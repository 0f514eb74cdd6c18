"""The Slack incoming-webhook channel: a card's Block Kit message posted to the URL an ONCALL_ variable
holds. A webhook cannot edit what it posted, so it has no follow-ups; a click on the message's
Acknowledge button replaces it through the click's response_url (slack_reply).

NOTIFY_WEBHOOK_URL (the implicit `settings` policy, and the messages about no card) keeps the 1.1
body key `pollerdash: {event, url}` for receivers written before Block Kit.
"""

from __future__ import annotations

from escalations.oncall.channels.base import Message, Request, WebhookChannel, admit, json_request, secret
from escalations.oncall.channels.slack_blocks import card_message, notice_message
from escalations.oncall.channels.slack_channel import app_flags
from escalations.oncall.facts import CardStatus
from operations.notify.kinds import Kind
from operations.notify.store import LEGACY_WEBHOOK_ENV


class SlackWebhook(WebhookChannel):
    kind = Kind.SLACK_WEBHOOK

    def render(self, message: Message) -> Request:
        target = admit(secret(message.address), what=f"the Slack webhook in {message.address}")
        if message.notice is not None:
            return json_request(target, notice_message(message.notice))
        assert message.card is not None  # a Message has a card or a notice
        body = card_message(
            facts=message.card, status=CardStatus("open"), head=message.head, now=message.now, **app_flags()
        )
        if message.address == LEGACY_WEBHOOK_ENV:
            # Receivers of the webhook before Block Kit may read this structured copy.
            kind = "opened" if message.first else "reminder"
            body["pollerdash"] = {"event": f"escalation.{kind}", "url": message.card.card_url}
        return json_request(target, body)
