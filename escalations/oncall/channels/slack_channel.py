"""The Slack app channel: a card's message posted to a channel id with the bot token (chat.postMessage)
and updated in place (chat.update) after every act on the card (acknowledged, given back, taken
over, handed on, snoozed and the snooze's end, an acknowledgement that timed out, closed); and the Web API's
users.info, which the interactivity endpoint asks who clicked (escalations.views.slack).

Slack's Web API answers HTTP 200 with `{"ok": false, "error": ...}` when it refuses: ratelimited,
internal_error and service_unavailable are retried, any other error is final. The bot token is
registered with the log scrubber before it is sent.
"""

from __future__ import annotations

import json
from typing import TypedDict

from django.conf import settings

from escalations.oncall.channels.base import Channel, Message, Outcome, Unsendable, Verdict, admit, answer_outcome
from escalations.oncall.channels.slack_blocks import card_message
from escalations.oncall.facts import CardStatus
from escalations.oncall.slack import SlackUser, parse_users_info
from operations.infrastructure import outbound
from operations.infrastructure.redaction import register_secret
from operations.notify.kinds import Kind
from operations.notify.rules import Event

RETRIED_ERRORS = frozenset({"ratelimited", "internal_error", "service_unavailable"})


class SlackChannel(Channel):
    kind = Kind.SLACK_CHANNEL
    follow_ups = {
        Event.ACKNOWLEDGED: "message updated (acknowledged)",
        Event.ENDED: "message updated (closed)",
        Event.UPDATED: "message updated",
    }

    def deliver(self, message: Message) -> Outcome:
        token = _token()
        if token is None:
            raise Unsendable("slack_channel needs SLACK_BOT_TOKEN, which is not set")
        if message.card is None:
            raise Unsendable("a Slack channel is posted to about cards only")
        if message.event is Event.LEVEL:
            body = card_message(
                facts=message.card, status=CardStatus("open"), head=message.head, now=message.now, **app_flags()
            )
            method, payload = "chat.postMessage", {"channel": message.address, **body}
        else:
            if not message.updates:
                return Outcome(Verdict.FAILED, None, "no message of this card to update")
            channel, _, ts = message.updates.partition("/")
            body = card_message(facts=message.card, status=message.status, now=message.now, **app_flags())
            method, payload = "chat.update", {"channel": channel, "ts": ts, **body}
        answer = web_api(method, token=token, content=json.dumps(payload).encode())
        if answer.http_status != 200 or answer.transport_error is not None:
            return answer_outcome(answer, now=message.now)
        reply = _json(answer.body)
        if reply is None:
            return Outcome(Verdict.RETRY, 200, f"{method} answered something that is not JSON")
        if not reply.get("ok"):
            error = str(reply.get("error") or "unknown error")[:100]
            verdict = Verdict.RETRY if error in RETRIED_ERRORS else Verdict.FAILED
            return Outcome(verdict, 200, f"{method} refused: {error}")
        ref = f"{reply.get('channel') or payload['channel']}/{reply.get('ts') or payload.get('ts', '')}"
        return Outcome(Verdict.SENT, 200, f"{method}: ok", provider_ref=ref)


class AppFlags(TypedDict):
    interactive: bool
    modal: bool


def app_flags() -> AppFlags:
    """What the Slack app can do with a message's buttons: verify clicks (the signing secret) and
    open a modal (with the bot token too)."""
    interactive = bool(settings.SLACK_SIGNING_SECRET)
    return {"interactive": interactive, "modal": interactive and bool(settings.SLACK_BOT_TOKEN)}


def users_info(slack_user_id: str) -> SlackUser | str | None:
    """Slack's users.info for a clicker (bot token with users:read and users:read.email), or why not;
    None without a bot token. The clicker waits: purpose `slack_lookup` (connect 1 s, read 2 s)."""
    token = _token()
    if token is None:
        return None
    try:
        answer = web_api("users.info", token=token, form={"user": slack_user_id}, purpose=outbound.Purpose.SLACK_LOOKUP)
    except Unsendable as refused:
        return refused.why
    if answer.transport_error is not None or answer.http_status is None:
        return f"users.info did not answer ({answer.error_type or 'no answer'})"
    reply = _json(answer.body)
    return parse_users_info(reply) if reply is not None else "users.info answered something that is not JSON"


def web_api(
    method: str,
    *,
    token: str,
    content: bytes | None = None,
    form: dict[str, str] | None = None,
    purpose: outbound.Purpose = outbound.Purpose.ONCALL,
) -> outbound.Answer:
    """One Web API call (SLACK_API_URL/<method>) with the bot token; Unsendable for a refused URL."""
    target = admit(f"{settings.SLACK_API_URL}/{method}", what="SLACK_API_URL", purpose=purpose)
    headers = {"Authorization": f"Bearer {token}"}
    if content is not None:
        headers["Content-Type"] = "application/json; charset=utf-8"
    return outbound.send(target=target, method="POST", content=content, form=form, headers=headers)


def _token() -> str | None:
    token = settings.SLACK_BOT_TOKEN
    if not token:
        return None
    register_secret(token)
    return token


def _json(body: bytes | None) -> dict | None:
    try:
        reply = json.loads((body or b"").decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return reply if isinstance(reply, dict) else None
