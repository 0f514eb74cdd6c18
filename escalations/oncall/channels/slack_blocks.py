"""Slack Block Kit messages for a card (posted by a level, replaced when the card moves on), shared by
the three Slack channels (slack_webhook, slack_channel, slack_reply), and the text of a message about
no card.

The message shows the reason, pollerdash's link to the card first, the operation, requests used,
the deadlines (as Slack date tokens, so every reader sees their own local time, with UTC as the
fallback text), what the agent wrote, and buttons: "Review and decide" and, where the Slack app's
interactivity is configured and the card is still open, "Acknowledge" and a snooze menu. With the
Slack app's bot token as well, "Review and decide" opens a modal in Slack (escalations.oncall.
slack_modal) where the options that can be undone or only spend bounded requests are decided;
otherwise it is a link to the card.

Untrusted text (the agent's job id and purpose, why it stopped as far as it quotes the provider)
never reaches mrkdwn: it is one plain_text line after the link, quoted and defanged
(escalations.agent_text), so it can neither form a link or a mention nor pose as pollerdash. The
values that do go into mrkdwn are pollerdash's own (ids, labels, slugs, a decision's words, made
inert where they name a provider's state), escaped for Slack's three control characters and sent
with `verbatim: true`.
Every string is cut to Block Kit's limits, so Slack never refuses a message (invalid_blocks) and
leaves a level unsent.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from escalations.agent_text import quoted, slack_escaped
from escalations.oncall.facts import CardFacts, CardStatus, Notice
from operations.cards.options import human_duration
from operations.notify.rules import snooze_choices

ACK_ACTION_ID = "pollerdash_ack"
OPEN_ACTION_ID = "pollerdash_open"
REVIEW_ACTION_ID = "pollerdash_review"
SNOOZE_ACTION_ID = "pollerdash_snooze"
# Block Kit limits (Block Kit reference).
HEADER_MAX = 150
TEXT_MAX = 3000
FIELD_MAX = 2000
URL_MAX = 3000
# Below the limits on purpose: a notification is a summary, the card has the rest.
AGENT_TEXT_MAX = 300
DETAIL_MAX = 400

HEADS = {
    "open": "Decision needed",
    "acknowledged": "Acknowledged",
    "decided": "Decided",
    "superseded": "No longer needs a decision",
}


def card_message(
    *,
    facts: CardFacts,
    status: CardStatus,
    interactive: bool,
    head: str = "",
    modal: bool = False,
    now: datetime | None = None,
) -> dict:
    """The whole message: `text` (the notification fallback, pollerdash's words only) plus blocks.
    `interactive`: the Slack app verifies clicks (Acknowledge, snooze); `modal`: it can also open
    a modal (bot token), so "Review and decide" opens one instead of linking to the card; `now`:
    when the snoozes offered are counted from (none without it)."""
    head = head or HEADS.get(status.state, "Decision needed")
    link = f"<{facts.card_url[:URL_MAX]}|Open the decision card>"
    blocks: list[dict] = [
        {"type": "header", "text": _plain(_cut(f"{head}: {facts.reason_label}", HEADER_MAX))},
        {
            "type": "section",
            "text": _md(
                f"{link} · operation `{slack_escaped(facts.operation_id)}` on {slack_escaped(facts.provider_slug)}"
            ),
        },
        {
            "type": "section",
            "fields": [
                _md(f"*Requests used*\n{facts.requests_used} of {facts.max_requests}"),
                _md(f"*Deadline*\n{_when(facts.deadline_at)}"),
                _md(f"*Business deadline*\n{_when(facts.business_deadline_at)}"),
                _md(f"*Waiting since*\n{_when(facts.opened_at)}"),
            ],
        },
        {
            "type": "context",
            "elements": [
                _plain(_cut(f"Why it stopped (may quote the provider; links disabled): {facts.detail}", DETAIL_MAX))
            ],
        },
        {
            "type": "context",
            "elements": [
                _plain(
                    "From the agent (links disabled): job id "
                    f"{quoted(facts.provider_job_id, limit=AGENT_TEXT_MAX)} · purpose "
                    + (quoted(facts.purpose, limit=AGENT_TEXT_MAX) if facts.purpose.strip() else "—")
                )
            ],
        },
    ]
    lines = _status_lines(status)
    if lines:
        blocks.append({"type": "context", "elements": [_md(line) for line in lines]})
    buttons = _buttons(facts, status, interactive, modal=modal, now=now)
    blocks.append({"type": "actions", "block_id": f"card-{facts.escalation_id}", "elements": buttons})
    fallback = f"{head}: {facts.reason_label} - {facts.provider_slug} ({facts.operation_id}) {facts.card_url}"
    return {"text": slack_escaped(_cut(fallback, 400)), "blocks": blocks, "unfurl_links": False, "unfurl_media": False}


def notice_message(notice: Notice) -> dict:
    """A message about no card, Slack-compatible (`text`, mrkdwn), with the structured copy receivers
    of NOTIFY_WEBHOOK_URL read since 1.1 (`pollerdash: {event, url}`)."""
    summary = f" · {slack_escaped(notice.summary)}" if notice.summary else ""
    text = (
        f"*{slack_escaped(notice.title)}* for <{notice.link[:URL_MAX]}|{slack_escaped(notice.operation_id)}>{summary}"
    )
    if notice.quoted:
        text += "\n" + " · ".join(slack_escaped(line) for line in notice.quoted)
    return {"text": _cut(text, TEXT_MAX), "pollerdash": {"event": f"escalation.{notice.event}", "url": notice.link}}


def replacement(
    *, facts: CardFacts, status: CardStatus, interactive: bool = False, modal: bool = False, now: datetime | None = None
) -> dict:
    """The body for a click's response_url: the same message, updated, in place (an acknowledged
    card keeps "Review and decide"; a closed one only links to the card)."""
    body = card_message(facts=facts, status=status, interactive=interactive, modal=modal, now=now)
    return {"replace_original": True, **body}


def ephemeral(text: str) -> dict:
    """A reply only the person who clicked sees; the original message stays as it is."""
    return {"response_type": "ephemeral", "replace_original": False, "text": slack_escaped(_cut(text, TEXT_MAX))}


def _buttons(
    facts: CardFacts, status: CardStatus, interactive: bool, *, modal: bool, now: datetime | None
) -> list[dict]:
    is_open = status.state in ("open", "acknowledged")
    open_button: dict = {
        "type": "button",
        "action_id": OPEN_ACTION_ID,
        "text": _plain("Review and decide" if status.state == "open" else "Open the card"),
        "url": facts.card_url[:URL_MAX],
    }
    if modal and interactive and is_open:
        # No url: the click comes to pollerdash, which opens the modal with the click's trigger_id.
        open_button = {
            "type": "button",
            "action_id": REVIEW_ACTION_ID,
            "text": _plain("Review and decide"),
            "value": str(facts.escalation_id),
        }
    if status.state == "open":
        open_button["style"] = "primary"
    buttons = [open_button]
    if interactive and is_open and now is not None:
        choices = snooze_choices(deadline_at=facts.deadline_at, now=now)
        if choices:
            buttons.append(_snooze_menu(facts.escalation_id, choices))
    if interactive and status.state == "open":
        # Only the card id: the endpoint re-reads the card and trusts nothing else in the click.
        buttons.append(
            {
                "type": "button",
                "action_id": ACK_ACTION_ID,
                "text": _plain("Acknowledge"),
                "value": str(facts.escalation_id),
            }
        )
    return buttons


def _snooze_menu(escalation_id: int, choices: list[int]) -> dict:
    """A menu of the snoozes that end before the deadline; each value names the card and the minutes
    (the endpoint checks both again)."""
    return {
        "type": "static_select",
        "action_id": SNOOZE_ACTION_ID,
        "placeholder": _plain("Snooze reminders"),
        "options": [
            {
                "text": _plain(f"Snooze {human_duration(timedelta(minutes=minutes))}"),
                "value": f"{escalation_id}:{minutes}",
            }
            for minutes in choices
        ],
    }


def _status_lines(status: CardStatus) -> list[str]:
    """Where the card stands, one line each: its state (or an open card's last change of hands) and
    a snooze still running."""
    who = f" by {slack_escaped(status.by)}" if status.by else ""
    when = f" · {_when(status.at)}" if status.at else ""
    outcome = f": {slack_escaped(_cut(status.outcome, 300))}" if status.outcome else ""
    lines = []
    if status.state == "acknowledged":
        via = f" via {status.via}" if status.via else ""
        taken = f" (taken over from {slack_escaped(status.taken_from)})" if status.taken_from else ""
        lines.append(f":white_check_mark: Acknowledged{who}{via}{taken}{when}")
    elif status.state == "decided":
        lines.append(f":ballot_box_with_check: Decided{who}{when}{outcome}")
    elif status.state == "superseded":
        lines.append(f":information_source: Closed without a decision{when}{outcome}")
    elif status.change:
        at = f" · {_when(status.change_at)}" if status.change_at else ""
        lines.append(f":arrows_counterclockwise: {slack_escaped(status.change)}{at}")
    if status.snoozed_until is not None and status.state in ("open", "acknowledged"):
        by = f" by {slack_escaped(status.snoozed_by)}" if status.snoozed_by else ""
        lines.append(f":zzz: Reminders snoozed{by} until {_when(status.snoozed_until)}")
    return lines


def _when(value: datetime | None) -> str:
    """A Slack date token (shown in the reader's time zone), with UTC as the fallback text."""
    if value is None:
        return "none"
    utc = value.astimezone(UTC)
    return f"<!date^{int(utc.timestamp())}^{{date_short_pretty}} {{time}}|{utc:%Y-%m-%d %H:%M} UTC>"


def _plain(text: str) -> dict:
    return {"type": "plain_text", "text": _cut(text, FIELD_MAX), "emoji": False}


def _md(text: str) -> dict:
    return {"type": "mrkdwn", "text": _cut(text, FIELD_MAX), "verbatim": True}


def _cut(text: str, limit: int) -> str:
    text = "".join(ch for ch in text if ch in "\n\t" or ch.isprintable())
    return text if len(text) <= limit else text[: limit - 1] + "…"
