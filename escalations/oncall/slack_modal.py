"""The "Review and decide" modal in Slack: what it shows, and the signed card reference it carries.

The modal lists the card's current options with their cost and effect, as the card shows them.
Options that can be undone or only spend bounded requests (every option but those that need a
fresh sign-in — cancel at the provider, close, accept output — and inspecting the provider's
console) are radio buttons decided right there; the others are listed with a link to the card,
which asks for a fresh sign-in before anything that cannot be undone. An optional comment goes
with the decision.

`private_metadata` is pollerdash's own text, signed with SECRET_KEY (django.core.signing): the card,
the version it showed, the Slack user and team it was opened for and the click's response_url. A
submission whose metadata was altered (another card, another version) or that comes from another
Slack user is refused before anything is read from the database.

Untrusted text (an option's label can quote a provider's state) is plain_text only, defanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core import signing

from escalations.agent_text import inert, slack_escaped
from escalations.oncall.slack import (
    COMMENT_ACTION,
    COMMENT_BLOCK,
    DECIDE_CALLBACK_ID,
    OPTION_ACTION,
    OPTION_BLOCK,
)
from operations.cards.card import Card
from operations.cards.options import Kind, Option
from operations.decisions.check import COMMENT_MAX, FRESH_SIGN_IN_KINDS

SALT = "pollerdash.slack.decide-modal"
# A modal left open longer than a day is refused as if altered: open it again from the message.
METADATA_MAX_AGE_S = 24 * 3600
# Block Kit limits (the modal view reference).
TITLE_MAX = 24
OPTION_TEXT_MAX = 75
SECTION_MAX = 3000
RADIO_MAX = 10


@dataclass(frozen=True)
class Form:
    """The card a modal was opened for, as pollerdash signed it."""

    escalation_id: int
    version: int
    slack_user: str
    slack_team: str
    response_url: str


def sign(form: Form) -> str:
    data = [form.escalation_id, form.version, form.slack_user, form.slack_team, form.response_url]
    return signing.dumps(data, salt=SALT, compress=True)


def read(text: str) -> Form | None:
    """The form pollerdash signed, or None for anything else (altered, too old, not ours)."""
    try:
        data = signing.loads(text, salt=SALT, max_age=METADATA_MAX_AGE_S)
    except signing.BadSignature:
        return None
    if not isinstance(data, list) or len(data) != 5:
        return None
    card, version, user, team, response_url = data
    if not all(isinstance(v, int) for v in (card, version)) or not all(
        isinstance(v, str) for v in (user, team, response_url)
    ):
        return None
    return Form(card, version, user, team, response_url)


def kind_decidable_in_slack(kind: Kind) -> bool:
    """Options that can be undone or only spend bounded requests; never one that needs a fresh
    sign-in (operations.decisions.check.FRESH_SIGN_IN_KINDS), nor a look at the provider's console."""
    return kind not in FRESH_SIGN_IN_KINDS and kind is not Kind.INSPECT


def decidable_in_slack(option: Option) -> bool:
    return kind_decidable_in_slack(option.kind)


def review_view(*, card: Card, metadata: str, card_url: str, notice: str = "") -> dict:
    """The modal for an open card; `notice` (pollerdash's words) heads it, e.g. after a stale submit."""
    decidable = [o for o in card.options if decidable_in_slack(o)][:RADIO_MAX]
    elsewhere = [o for o in card.options if not decidable_in_slack(o)]
    blocks: list[dict] = []
    if notice:
        blocks.append(_section(f":warning: {slack_escaped(notice)}"))
    blocks += _head(card, card_url)
    for option in decidable:
        blocks.append(_plain_section(f"{option.label}\n{option.effect}"))
    if decidable:
        blocks.append(
            {
                "type": "input",
                "block_id": OPTION_BLOCK,
                "label": _plain("Decide"),
                "element": {
                    "type": "radio_buttons",
                    "action_id": OPTION_ACTION,
                    "options": [
                        {"text": _plain(o.label, OPTION_TEXT_MAX), "value": o.id, "description": _plain(o.effect, 75)}
                        for o in decidable
                    ],
                },
            }
        )
        blocks.append(
            {
                "type": "input",
                "block_id": COMMENT_BLOCK,
                "optional": True,
                "label": _plain("Comment (recorded with the decision)"),
                "element": {
                    "type": "plain_text_input",
                    "action_id": COMMENT_ACTION,
                    "multiline": True,
                    "max_length": COMMENT_MAX,
                },
            }
        )
    if elsewhere:
        blocks.append({"type": "divider"})
        blocks.append(
            _section("*On the card only* (it asks you to sign in again before anything that cannot be undone):")
        )
        blocks += [_link_section(option, card_url) for option in elsewhere]
    view: dict = {
        "type": "modal",
        "callback_id": DECIDE_CALLBACK_ID,
        "title": _plain(f"Decide: card {card.escalation.pk}", TITLE_MAX),
        "close": _plain("Cancel"),
        "private_metadata": metadata,
        "blocks": blocks,
    }
    if decidable:
        view["submit"] = _plain("Decide")
    return view


def result_view(*, text: str, card_url: str) -> dict:
    """What the modal shows once the submission was answered: pollerdash's words and the card's link."""
    return {
        "type": "modal",
        "title": _plain("pollerdash"),
        "close": _plain("Close"),
        "blocks": [_plain_section(text), _section(f"<{card_url[:3000]}|Open the card>")],
    }


def _head(card: Card, card_url: str) -> list[dict]:
    op = card.operation
    return [
        _section(
            f"*{slack_escaped(card.reason_label)}* · <{card_url[:3000]}|Open the card> · operation "
            f"`{slack_escaped(op.pk)}` on {slack_escaped(op.provider.slug)}"
        ),
        {
            "type": "context",
            "elements": [
                _md(
                    f"Card version {card.escalation.version} · requests used {op.status_requests_used} of "
                    f"{op.max_status_requests}"
                )
            ],
        },
    ]


def _link_section(option: Option, card_url: str) -> dict:
    return {
        "type": "section",
        "text": _plain(f"{option.label}\n{option.effect}", SECTION_MAX),
        "accessory": {
            "type": "button",
            "action_id": f"pollerdash_card_{option.kind}",
            "text": _plain("Open the card"),
            "url": card_url[:3000],
        },
    }


def _section(text: str) -> dict:
    return {"type": "section", "text": _md(text)}


def _plain_section(text: str) -> dict:
    return {"type": "section", "text": _plain(text, SECTION_MAX)}


def _md(text: str) -> dict:
    return {"type": "mrkdwn", "text": _cut(text, SECTION_MAX), "verbatim": True}


def _plain(text: str, limit: int = 75) -> dict:
    # inert(): an option's words may quote a provider's state; one defanged line per paragraph.
    shown = "\n".join(inert(line, limit=limit) for line in text.split("\n"))
    return {"type": "plain_text", "text": _cut(shown, limit), "emoji": False}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
