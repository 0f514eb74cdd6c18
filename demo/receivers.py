"""The demo's PagerDuty and Slack: the test fakes, each with a page that shows what arrived.

`make demo` runs them (`manage.py demo_receivers`) and its escalation policy notifies them, so a
newcomer sees the pager hand-off and Slack's Acknowledge without accounts anywhere:

- PagerDuty, ``GET /``: one row per card (its ``dedup_key``) with the events in the order they
  arrived, "triggered · acknowledged · resolved", and the summary and link of the trigger; and
  buttons that act in "PagerDuty" as one of its people: **Acknowledge**, **Unacknowledge** (as an
  acknowledgement timeout does) and **Resolve**, each sent to pollerdash as PagerDuty sends it: a
  v3 webhook event signed with the subscription's secret, posted to ``SITE_URL/pagerduty/webhooks``;
  pollerdash matches the person by the email PAGERDUTY_USER_EMAILS gives their PagerDuty id.
- Slack, ``GET /``: the channel as it reads now (messages updated in place), each open card's
  message with its **Acknowledge** button. A click is sent to pollerdash as Slack sends one:
  a block_actions payload, signed with the app's signing secret, posted to
  ``SITE_URL/slack/interactions``, with a response_url back here; pollerdash then asks this
  Slack's ``users.info`` who clicked and matches the confirmed email to a demo account.

Both listen on 127.0.0.1 only. A click form carries a token made at start-up, so another web page
open in the same browser cannot post clicks here.
"""

from __future__ import annotations

import hmac
import html
import re
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from demo import fakepagerduty, fakeslack
from demo.envfile import EMAIL_DOMAIN, PAGERDUTY_PEOPLE

ACK_ACTION_ID = "pollerdash_ack"  # escalations.oncall.channels.slack_blocks.ACK_ACTION_ID (demo imports no layer above)
REVIEW_ACTION_ID = "pollerdash_review"  # slack_blocks.REVIEW_ACTION_ID: in Slack it opens a modal
_CARD_LINK = re.compile(r"<(https?://[^|>\s]+)\|Open the decision card>")
CHANNEL = "C0DEMO0001"
# The Slack people who may click, and the demo account each one's confirmed email belongs to.
SLACK_PEOPLE = {"UDEMORESP1": "responder", "UDEMORESP2": "responder2", "UDEMOVIEW1": "viewer"}
PAGE_REFRESH_S = 5
STYLE = (
    "body{font:15px/1.45 system-ui,sans-serif;margin:1.5rem auto;max-width:60rem;padding:0 1rem;color:#1d1c1d}"
    "h1{font-size:1.3rem}.msg{border:1px solid #ddd;border-radius:6px;padding:.6rem .9rem;margin:.7rem 0}"
    ".muted{color:#616061;font-size:.85rem}table{border-collapse:collapse;width:100%}"
    "td,th{border-bottom:1px solid #ddd;padding:.35rem .5rem;text-align:left;vertical-align:top}"
    "button{font:inherit;padding:.2rem .7rem;margin-right:.4rem}.btn{display:inline-block;padding:.2rem .7rem;"
    "border:1px solid #007a5a;border-radius:4px;color:#007a5a;text-decoration:none;margin-right:.4rem}"
)


def email_of(username: str) -> str:
    return f"{username}@{EMAIL_DOMAIN}"


def slack_users(team_id: str) -> dict[str, dict[str, Any]]:
    """users.info answers: each demo person with the confirmed email of their demo account."""
    return {
        user_id: {
            "id": user_id,
            "team_id": team_id,
            "name": username,
            "deleted": False,
            "is_bot": False,
            "is_email_confirmed": True,
            "profile": {"email": email_of(username), "real_name": username},
        }
        for user_id, username in SLACK_PEOPLE.items()
    }


def _page(title: str, body: str) -> bytes:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="refresh" content="{PAGE_REFRESH_S}"><link rel="icon" href="data:,">'
        f"<title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>"
    ).encode()


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S UTC")


# --- PagerDuty ---------------------------------------------------------------------------------------

PAST = {"trigger": "triggered", "acknowledge": "acknowledged", "resolve": "resolved"}


PAGER_ACTS = {
    "incident.acknowledged": "Acknowledge",
    "incident.unacknowledged": "Unacknowledge",
    "incident.resolved": "Resolve",
}


def _pager_form(dedup_key: str, click_token: str) -> str:
    people = "".join(
        f'<option value="{pd}">{html.escape(name)} ({pd})</option>' for pd, name in PAGERDUTY_PEOPLE.items()
    )
    buttons = "".join(f'<button name=event value="{event}">{label}</button>' for event, label in PAGER_ACTS.items())
    return (
        '<form method=post action="/demo/webhook">'
        f'<input type=hidden name=token value="{click_token}">'
        f'<input type=hidden name=dedup_key value="{html.escape(dedup_key)}">'
        f"<label>in PagerDuty as <select name=user>{people}</select></label> {buttons}</form>"
    )


def pagerduty_page(received: list[fakepagerduty.Received], *, click_token: str = "") -> bytes:
    incidents: dict[str, list[fakepagerduty.Received]] = {}
    for item in received:
        incidents.setdefault(str(item.event.get("dedup_key", "")), []).append(item)
    rows = []
    for dedup_key, events in sorted(incidents.items(), key=lambda kv: -kv[1][0].at):
        trigger = next((e.event for e in events if e.event.get("event_action") == "trigger"), {})
        summary = str((trigger.get("payload") or {}).get("summary", ""))
        link = next((str(x.get("href", "")) for x in trigger.get("links") or [] if isinstance(x, dict)), "")
        steps = " · ".join(
            f"{PAST.get(str(e.event.get('event_action')), 'refused')} {_clock(e.at)}"
            + ("" if e.status == 202 else f" (answered {e.status}: {'; '.join(e.errors) or 'scripted'})")
            for e in events
        )
        anchor = f' <a href="{html.escape(link)}">open the card</a>' if link.startswith("http") else ""
        form = _pager_form(dedup_key, click_token) if click_token and dedup_key else ""
        rows.append(
            f"<tr><td>{html.escape(summary)}{anchor}<div class=muted>{html.escape(dedup_key)}</div></td>"
            f"<td>{html.escape(steps)}{form}</td></tr>"
        )
    table = (
        "<table><tr><th>incident (pollerdash card)</th><th>events, in order of arrival</th></tr>"
        + "".join(rows)
        + "</table>"
        if rows
        else "<p>No events yet: they arrive when a card opens and its policy pages.</p>"
    )
    intro = (
        "<p class=muted>The demo's stand-in for PagerDuty's Events API v2: every event pollerdash sent, "
        "checked as PagerDuty documents it. The buttons act here as a PagerDuty user would and send pollerdash "
        "the signed v3 webhook PagerDuty sends: an acknowledgement acknowledges the card, a resolve only notes "
        f"it. Refreshes every {PAGE_REFRESH_S} s.</p>"
    )
    return _page("PagerDuty (demo receiver)", intro + table)


class _PagerDutyHandler(fakepagerduty._Handler):
    def do_GET(self) -> None:
        if self.path.partition("?")[0] != "/":
            return self.reply(404, b"not found", content_type="text/plain")
        # Typing: FakeReceiver.start sets receiver on the server (demo/fakehttp.py).
        receiver: DemoPagerDuty = self.server.receiver  # type: ignore[attr-defined]
        page = pagerduty_page(receiver.received(), click_token=receiver.click_token if receiver.webhook_url else "")
        self.reply(200, page, content_type="text/html; charset=utf-8")

    def do_POST(self) -> None:
        if self.path.partition("?")[0] != "/demo/webhook":
            return super().do_POST()
        # Typing: FakeReceiver.start sets receiver on the server (demo/fakehttp.py).
        receiver: DemoPagerDuty = self.server.receiver  # type: ignore[attr-defined]
        raw = self.read_body()
        form = {k: v[0] for k, v in parse_qs((raw or b"").decode("utf-8", "replace")).items()}
        if not receiver.webhook_url or not hmac.compare_digest(form.get("token", ""), receiver.click_token):
            return self.reply(403, b"this form is not from the demo's PagerDuty page", content_type="text/plain")
        if form.get("user") not in PAGERDUTY_PEOPLE or form.get("event") not in PAGER_ACTS:
            return self.reply(400, b"choose a person and an act", content_type="text/plain")
        problem = receiver.send_webhook(
            event_type=form["event"], dedup_key=form.get("dedup_key", ""), user_id=form["user"]
        )
        if problem:
            page = _page("PagerDuty (demo receiver)", f"<p>{html.escape(problem)}</p>")
            return self.reply(200, page, content_type="text/html; charset=utf-8")
        self.reply(303, b"", content_type="text/plain", headers={"Location": "/"})


class DemoPagerDuty(fakepagerduty.FakePagerDuty):
    handler = _PagerDutyHandler

    def __init__(self, *, accepted_keys: list[str], webhook_url: str = "", webhook_secret: str = "") -> None:
        super().__init__(accepted_keys=accepted_keys)
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret
        self.click_token = secrets.token_urlsafe(16)

    def send_webhook(self, *, event_type: str, dedup_key: str, user_id: str) -> str:
        """Send pollerdash the v3 webhook PagerDuty would send; "" when pollerdash took it, else why not."""
        body = fakepagerduty.webhook_event(
            event_type=event_type,
            dedup_key=dedup_key,
            agent=fakepagerduty.webhook_user(user_id, PAGERDUTY_PEOPLE.get(user_id, user_id)),
        )
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "PagerDuty-Webhook/V3.0",
            "X-PagerDuty-Signature": fakepagerduty.webhook_signature(body=body, secrets=[self.webhook_secret]),
        }
        request = urllib.request.Request(self.webhook_url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:  # a fixed local URL
                answer.read()
        except urllib.error.HTTPError as exc:
            return f"pollerdash answered {exc.code} to the webhook."
        except OSError as exc:
            return f"pollerdash did not answer the webhook ({exc.__class__.__name__}); is the web process running?"
        return ""


# --- Slack -------------------------------------------------------------------------------------------

_DATE_TOKEN = re.compile(r"<!date\^\d+\^[^|>]*\|([^>]*)>")
_LINK = re.compile(r"<(https?://[^|>]+)\|([^>]*)>")


EMOJI = {":white_check_mark:": "✅", ":ballot_box_with_check:": "☑️", ":information_source:": "ℹ️"}


def _mrkdwn(text: str) -> str:
    """Slack's markup as plain words: date tokens read as their fallback, links as their label, a
    field's "*Label*\nvalue" on one line."""
    text = _DATE_TOKEN.sub(r"\1", text)
    text = _LINK.sub(r"\2", text)
    text = re.sub(r"^\*([^*\n]+)\*\n", r"\1: ", text)
    for code, emoji in EMOJI.items():
        text = text.replace(code, emoji)
    return html.unescape(text.replace("*", ""))


def _texts(element: Any) -> list[str]:
    if isinstance(element, dict):
        if isinstance(element.get("text"), str):
            return [_mrkdwn(element["text"])]
        found: list[str] = []
        for key in ("text", "fields", "elements"):
            found += _texts(element.get(key))
        return found
    if isinstance(element, list):
        return [t for item in element for t in _texts(item)]
    return []


def slack_page(messages: Mapping[str, dict[str, Any]], *, click_token: str) -> bytes:
    people = "".join(
        f'<option value="{user_id}">{html.escape(name)} ({html.escape(email_of(name))})</option>'
        for user_id, name in SLACK_PEOPLE.items()
    )
    parts = []
    for key, message in reversed(list(messages.items())):
        lines, buttons = [], []
        for block in message.get("blocks") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "actions":
                for button in block.get("elements") or []:
                    label = html.escape(" ".join(_texts(button.get("text"))))
                    if button.get("url"):
                        buttons.append(f'<a class=btn href="{html.escape(str(button["url"]))}">{label}</a>')
                    elif button.get("action_id") == REVIEW_ACTION_ID and (link := _CARD_LINK.search(str(message))):
                        # The demo does not draw Slack's modal: the card decides the same options.
                        buttons.append(
                            f'<a class=btn href="{html.escape(link.group(1))}">{label}</a>'
                            " <span class=muted>(a modal in Slack)</span> "
                        )
                    elif button.get("action_id") == ACK_ACTION_ID:
                        buttons.append(
                            '<form method=post action="/demo/click" style="display:inline">'
                            f'<input type=hidden name=token value="{click_token}">'
                            f'<input type=hidden name=message value="{html.escape(key)}">'
                            f'<input type=hidden name=card value="{html.escape(str(button.get("value", "")))}">'
                            f"<label>as <select name=user>{people}</select></label> "
                            f"<button>{label}</button></form>"
                        )
            else:
                text = "\n".join(_texts(block))
                if text:
                    lines.append(f"<div style='white-space:pre-wrap'>{html.escape(text)}</div>")
        if not lines:
            lines.append(f"<div>{html.escape(_mrkdwn(str(message.get('text', ''))))}</div>")
        parts.append(f"<div class=msg>{''.join(lines)}<p>{''.join(buttons)}</p></div>")
    intro = (
        f"<p class=muted>The demo's stand-in for a Slack channel ({CHANNEL}): pollerdash's messages as they "
        "read now (updated in place when a card is acknowledged or decided). Acknowledge sends a signed click "
        f"to pollerdash as Slack does; pollerdash matches the person by email. Refreshes every {PAGE_REFRESH_S} s."
        "</p>"
    )
    return _page("Slack #oncall (demo receiver)", intro + ("".join(parts) or "<p>No messages yet.</p>"))


class _SlackHandler(fakeslack._Handler):
    def do_GET(self) -> None:
        if self.path.partition("?")[0] != "/":
            return self._text(404, "not_found")
        # Typing: FakeReceiver.start sets receiver on the server (demo/fakehttp.py).
        receiver: DemoSlack = self.server.receiver  # type: ignore[attr-defined]
        self.reply(
            200,
            slack_page(receiver.messages(), click_token=receiver.click_token),
            content_type="text/html; charset=utf-8",
        )

    def do_POST(self) -> None:
        if self.path.partition("?")[0] != "/demo/click":
            return super().do_POST()
        # Typing: FakeReceiver.start sets receiver on the server (demo/fakehttp.py).
        receiver: DemoSlack = self.server.receiver  # type: ignore[attr-defined]
        raw = self.read_body()
        form = {k: v[0] for k, v in parse_qs((raw or b"").decode("utf-8", "replace")).items()}
        if not hmac.compare_digest(form.get("token", ""), receiver.click_token):
            return self._text(403, "this form is not from the demo's Slack page")
        if form.get("user") not in SLACK_PEOPLE or not form.get("card", "").isdigit():
            return self._text(400, "choose a person and a card")
        problem = receiver.click(message_key=form.get("message", ""), card=form["card"], user_id=form["user"])
        if problem:
            return self.reply(
                200,
                _page("Slack (demo receiver)", f"<p>{html.escape(problem)}</p>"),
                content_type="text/html; charset=utf-8",
            )
        self.reply(303, b"", content_type="text/plain", headers={"Location": "/"})


class DemoSlack(fakeslack.FakeSlack):
    handler = _SlackHandler

    def __init__(
        self, *, bot_token: str, signing_secret: str, interactions_url: str, team_id: str, app_id: str
    ) -> None:
        super().__init__(bot_token=bot_token, users=slack_users(team_id))
        self.signing_secret = signing_secret
        self.interactions_url = interactions_url
        self.team_id = team_id
        self.app_id = app_id
        self.click_token = secrets.token_urlsafe(16)

    def click(self, *, message_key: str, card: str, user_id: str) -> str:
        """Send pollerdash the click Slack would send; "" when pollerdash took it, else why not."""
        body = fakeslack.interaction(
            user_id=user_id,
            team_id=self.team_id,
            app_id=self.app_id,
            action_id=ACK_ACTION_ID,
            value=card,
            response_url=self.new_response_url(replaces=message_key),
        )
        headers = fakeslack.signed(body=body, secret=self.signing_secret, timestamp=int(time.time()))
        request = urllib.request.Request(self.interactions_url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:  # a fixed local URL
                answer.read()
        except urllib.error.HTTPError as exc:
            return f"pollerdash answered {exc.code} to the click."
        except OSError as exc:
            return f"pollerdash did not answer the click ({exc.__class__.__name__}); is the web process running?"
        return ""
