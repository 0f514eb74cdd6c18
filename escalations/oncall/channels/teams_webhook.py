"""The Microsoft Teams channel: an Adaptive Card posted to a Teams Workflows webhook ("When a Teams
webhook request is received", the replacement of the retired Office 365 connectors), whose URL an
ONCALL_ variable holds (`{ teams_webhook = "ONCALL_TEAMS_PAYMENTS" }`).

The body is a message with one Adaptive Card attachment (version 1.4, which Teams renders on every
client). The card reads, in order: its heading as the link to the decision card, the reason, the
operation and provider, requests used, the deadlines, why it stopped, what the agent wrote, the
options, and an "Open in pollerdash" button. Teams renders a subset of Markdown in TextBlocks and
facts, so only pollerdash's own words go there; everything that may quote a provider or an agent is
a TextRun of a RichTextBlock, which Teams shows as plain text, quoted and with its links disabled
(escalations.agent_text). A Workflows webhook cannot edit what it posted: no follow-ups.

Answers: 2xx (Workflows answers 202 Accepted) sent; 429 with Retry-After and 5xx retried; any
other 4xx failed for good, with Microsoft's error code and message when it gives them.
"""

from __future__ import annotations

from datetime import UTC, datetime

from escalations.agent_text import quoted
from escalations.oncall.channels.base import Message, Request, WebhookChannel, admit, cut, json_request, secret
from escalations.oncall.facts import CardFacts, Notice
from operations.notify.kinds import Kind

CARD_VERSION = "1.4"
CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
OPEN_TITLE = "Open in pollerdash"
# A summary, not the card: Teams' messages are small (about 28 KB), and the card has the rest.
TEXT_MAX = 400
AGENT_TEXT_MAX = 300


class TeamsWebhook(WebhookChannel):
    kind = Kind.TEAMS_WEBHOOK

    def render(self, message: Message) -> Request:
        target = admit(secret(message.address), what=f"the Teams webhook in {message.address}")
        if message.notice is not None:
            return json_request(target, envelope(notice_card(message.notice)))
        assert message.card is not None  # a Message has a card or a notice
        return json_request(target, envelope(card_card(facts=message.card, head=message.head, now=message.now)))


def envelope(card: dict) -> dict:
    """What a Workflows webhook expects: a message whose first attachment is the Adaptive Card."""
    return {
        "type": "message",
        "attachments": [{"contentType": CONTENT_TYPE, "contentUrl": None, "content": card}],
    }


def card_card(*, facts: CardFacts, head: str, now: datetime) -> dict:
    """The Adaptive Card of a decision card."""
    body: list[dict] = [
        _link_heading(f"{head}: {facts.reason_label}", facts.card_url),
        {
            "type": "FactSet",
            "facts": _facts(
                ("Reason", facts.reason_label),
                ("Operation", facts.operation_id),
                (
                    "Provider",
                    f"{facts.provider_slug} ({facts.provider_account})"
                    if facts.provider_account
                    else facts.provider_slug,
                ),
                ("Requests used", f"{facts.requests_used} of {facts.max_requests}"),
                ("Deadline", _utc(facts.deadline_at)),
                ("Business deadline", _utc(facts.business_deadline_at)),
                ("Waiting since", _utc(facts.opened_at)),
            ),
        },
        # Quoted, links disabled, capped (escalations.oncall.facts): it may quote the provider.
        _plain(f"Why it stopped (may quote the provider; links disabled): {facts.detail}"),
        _plain(
            "From the agent (links disabled): job id "
            f"{quoted(facts.provider_job_id, limit=AGENT_TEXT_MAX)} · purpose "
            + (quoted(facts.purpose, limit=AGENT_TEXT_MAX) if facts.purpose.strip() else "—")
        ),
    ]
    if facts.option_labels:
        body.append(_plain("Options on the card: " + "; ".join(facts.option_labels)))
    if facts.group_size > 1:
        body.append(_plain(f"One of {facts.group_size} open cards of the same outage: decide them together."))
    actions = [_open(facts.card_url)]
    if facts.group_size > 1 and facts.group_url:
        actions.append({"type": "Action.OpenUrl", "title": "Open the group", "url": facts.group_url})
    return _card(body, actions)


def notice_card(notice: Notice) -> dict:
    """The Adaptive Card of a message about no card (a callback that gave up, a business deadline near)."""
    body: list[dict] = [_link_heading(notice.title, notice.link), _plain(notice.opening)]
    body += [_plain(paragraph) for paragraph in notice.paragraphs]
    if notice.facts:
        body.append({"type": "FactSet", "facts": _facts(*notice.facts)})
    if notice.quoted:
        body.append(_plain(" · ".join([*([notice.quoted_intro] if notice.quoted_intro else []), *notice.quoted])))
    return _card(body, [_open(notice.link)])


def _card(body: list[dict], actions: list[dict]) -> dict:
    return {"$schema": CARD_SCHEMA, "type": "AdaptiveCard", "version": CARD_VERSION, "body": body, "actions": actions}


def _link_heading(text: str, url: str) -> dict:
    """pollerdash's own words as a Markdown link to its page: the first thing the card shows."""
    label = text.replace("[", "(").replace("]", ")")
    return {
        "type": "TextBlock",
        "text": f"[{cut(label, 150)}]({url})",
        "weight": "Bolder",
        "size": "Medium",
        "wrap": True,
    }


def _plain(text: str) -> dict:
    """Plain text: a TextRun, which Teams renders without Markdown (no link, no mention, no styling)."""
    return {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": cut(" ".join(text.split()), TEXT_MAX)}]}


def _facts(*pairs: tuple[str, str]) -> list[dict]:
    return [{"title": title, "value": cut(value, TEXT_MAX)} for title, value in pairs]


def _open(url: str) -> dict:
    return {"type": "Action.OpenUrl", "title": OPEN_TITLE, "url": url}


def _utc(value: datetime | None) -> str:
    return "none" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
