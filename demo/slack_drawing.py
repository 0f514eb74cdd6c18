"""How the demo Slack page draws Block Kit: a message's words (`texts`, `mrkdwn`), and a modal
pollerdash opened (views.open): what the on-call person
sees in Slack after "Review and decide" — the title, the card and its version, each option with its
cost and effect, the options decided there as radio buttons, the comment field, the options left to
the card with its link — and a form that submits it to pollerdash as Slack would (a view_submission).

Everything shown is escaped: a modal quotes a provider's words (an option's label can name its state).
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from typing import Any

MODAL_STYLE = (
    ".modal{border:1px solid #bbb;border-radius:8px;margin:.8rem 0;max-width:34rem;box-shadow:0 2px 8px #0002}"
    ".mhead{display:flex;justify-content:space-between;padding:.6rem .9rem;border-bottom:1px solid #ddd;"
    "font-weight:700}.mbody{padding:.6rem .9rem}.mfoot{padding:.6rem .9rem;border-top:1px solid #ddd;"
    "text-align:right}.opt{display:block;margin:.3rem 0}.err{color:#b00020}textarea{width:100%}"
)
_DATE_TOKEN = re.compile(r"<!date\^\d+\^[^|>]*\|([^>]*)>")
_LINK = re.compile(r"<(https?://[^|>]+)\|([^>]*)>")


EMOJI = {
    ":white_check_mark:": "✅",
    ":ballot_box_with_check:": "☑️",
    ":information_source:": "ℹ️",
    ":arrows_counterclockwise:": "🔄",
    ":zzz:": "💤",
    ":warning:": "⚠️",
}


def mrkdwn(text: str) -> str:
    """Slack's markup as plain words: date tokens read as their fallback, links as their label, a
    field's "*Label*\nvalue" on one line."""
    text = _DATE_TOKEN.sub(r"\1", text)
    text = _LINK.sub(r"\2", text)
    text = re.sub(r"^\*([^*\n]+)\*\n", r"\1: ", text)
    text = re.sub(r"`([^`\n]*)`", r"\1", text)  # a code span reads as its words
    for code, emoji in EMOJI.items():
        text = text.replace(code, emoji)
    return html.unescape(text.replace("*", ""))


def texts(element: Any) -> list[str]:
    if isinstance(element, dict):
        if isinstance(element.get("text"), str):
            return [mrkdwn(element["text"])]
        found: list[str] = []
        for key in ("text", "fields", "elements"):
            found += texts(element.get(key))
        return found
    if isinstance(element, list):
        return [t for item in element for t in texts(item)]
    return []


# Modals drawn on the page, newest first.
MODALS_SHOWN = 3


@dataclass
class DemoModal:
    """A modal pollerdash opened here, who it was opened for, and the errors its last submission got."""

    view_id: str
    view: dict[str, Any]
    opened_by: str
    errors: dict[str, str] = field(default_factory=dict)

    def answered(self, raw: bytes) -> None:
        """pollerdash's answer to a submission, as Slack applies it: `update` replaces the modal,
        `errors` shows next to the fields."""
        try:
            reply = json.loads(raw.decode("utf-8")) if raw else {}
        except (UnicodeDecodeError, ValueError):
            return
        if not isinstance(reply, dict):
            return
        if reply.get("response_action") == "update" and isinstance(reply.get("view"), dict):
            self.view, self.errors = reply["view"], {}
        elif reply.get("response_action") == "errors" and isinstance(reply.get("errors"), dict):
            self.errors = {str(k): str(v) for k, v in reply["errors"].items()}


def modals_section(modals: list[DemoModal], *, click_token: str) -> tuple[str, bool]:
    """The newest modals, drawn above the channel ("" for none), and whether one still waits for a
    choice (the page then does not refresh, which would wipe it)."""
    shown = modals[:MODALS_SHOWN]
    drawn = [
        modal_html(m.view_id, m.view, opened_by=m.opened_by, errors=m.errors, click_token=click_token) for m in shown
    ]
    if not drawn:
        return "", False
    section = "<h2>Modals opened in Slack (views.open)</h2>" + "".join(drawn) + "<h2>#oncall</h2>"
    return section, any(m.view.get("submit") for m in shown)


def modal_html(
    view_id: str,
    view: dict[str, Any],
    *,
    opened_by: str,
    errors: dict[str, str],
    click_token: str,
) -> str:
    """One modal as Slack draws it, with a form that submits it to pollerdash when it has a submit button."""
    title = " ".join(texts(view.get("title")))
    body = "".join(_block(block, errors=errors) for block in view.get("blocks") or [])
    submit = " ".join(texts(view.get("submit"))) if view.get("submit") else ""
    close = " ".join(texts(view.get("close"))) or "Close"
    foot = f"<span class=muted>{html.escape(close)}</span>" + (
        f" <button>{html.escape(submit)}</button>" if submit else ""
    )
    form_open, form_close = "", ""
    if submit:
        form_open = (
            '<form method=post action="/demo/submit">'
            f'<input type=hidden name=token value="{html.escape(click_token)}">'
            f'<input type=hidden name=view value="{html.escape(view_id)}">'
        )
        form_close = "</form>"
    return (
        f"<div class=modal id='{html.escape(view_id)}'>{form_open}"
        f"<div class=mhead><span>{html.escape(title)}</span>"
        f"<span class=muted>modal {html.escape(view_id)} · opened for {html.escape(opened_by)}</span></div>"
        f"<div class=mbody>{body}</div><div class=mfoot>{foot}</div>{form_close}</div>"
    )


def _block(block: Any, *, errors: dict[str, str]) -> str:
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "divider":
        return "<hr>"
    if kind == "context":
        return f"<p class=muted>{html.escape(' '.join(texts(block.get('elements'))))}</p>"
    if kind == "section":
        text = "\n".join(texts(block.get("text")))
        accessory = block.get("accessory") or {}
        link = ""
        if isinstance(accessory, dict) and str(accessory.get("url", "")).startswith("http"):
            label = " ".join(texts(accessory.get("text")))
            link = f' <a class=btn href="{html.escape(str(accessory["url"]))}">{html.escape(label)}</a>'
        elif isinstance(block.get("text"), dict) and (found := _LINK.search(str(block["text"].get("text", "")))):
            # A mrkdwn link ("Open the card") stays a link, as Slack draws it.
            link = f' <a class=btn href="{html.escape(found.group(1))}">{html.escape(found.group(2))}</a>'
            text = re.sub(r"\s*·\s*·\s*", " · ", text.replace(found.group(2), "", 1)).strip(" ·")
        return f"<div style='white-space:pre-wrap;margin:.4rem 0'>{html.escape(text)}{link}</div>"
    if kind == "input":
        return _input(block, error=errors.get(str(block.get("block_id", "")), ""))
    return ""


def _input(block: dict, *, error: str) -> str:
    element = block.get("element") or {}
    label = " ".join(texts(block.get("label"))) + (" (optional)" if block.get("optional") else "")
    shown = f"<div class=err>{html.escape(error)}</div>" if error else ""
    if element.get("type") == "radio_buttons":
        options = "".join(
            "<label class=opt>"
            f'<input type=radio name=option value="{html.escape(str(option.get("value", "")))}" required> '
            f"<b>{html.escape(' '.join(texts(option.get('text'))))}</b>"
            f"<br><span class=muted>{html.escape(' '.join(texts(option.get('description'))))}</span></label>"
            for option in element.get("options") or []
            if isinstance(option, dict)
        )
        return f"<fieldset><legend>{html.escape(label)}</legend>{shown}{options}</fieldset>"
    if element.get("type") == "plain_text_input":
        limit = int(element.get("max_length") or 3000)
        return f"<label>{html.escape(label)}{shown}<textarea name=comment rows=2 maxlength={limit}></textarea></label>"
    return ""
