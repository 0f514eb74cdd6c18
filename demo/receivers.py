"""The demo's PagerDuty and Slack: the test fakes, each with a page that shows what arrived.

`make demo` runs them (`manage.py demo_receivers`) and its escalation policy notifies them, so a
newcomer sees the pager hand-off and Slack's Acknowledge without accounts anywhere:

- PagerDuty, ``GET /``: one row per card (its ``dedup_key``) with the events in the order they
  arrived, "triggered · acknowledged · resolved", and the summary and link of the trigger; and
  buttons that act in "PagerDuty" as one of its people: **Acknowledge**, **Unacknowledge** (as an
  acknowledgement timeout does) and **Resolve**, each sent to pollerdash as PagerDuty sends it: a
  v3 webhook event signed with the subscription's secret, posted to ``SITE_URL/pagerduty/webhooks``;
  pollerdash matches the person by the email PAGERDUTY_USER_EMAILS gives their PagerDuty id.
- Slack, ``GET /``: the channel as it reads now (messages updated in place after every act), each
  open card's message with its **Review and decide** and **Acknowledge** buttons. A click is sent
  to pollerdash as Slack sends one: a block_actions payload, signed with the app's signing secret,
  posted to ``SITE_URL/slack/interactions``, with a response_url back here; pollerdash then asks
  this Slack's ``users.info`` who clicked and matches the confirmed email to a demo account.
  "Review and decide" carries a trigger_id, with which pollerdash opens its modal here
  (``views.open``): the page draws each modal received (demo/slack_drawing.py) as Slack would,
  and submits it to pollerdash as Slack does (a signed view_submission).

Both listen on 127.0.0.1 only. A click form carries a token made at start-up, so another web page
open in the same browser cannot post clicks here.
"""

from __future__ import annotations

import hmac
import html
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
from demo.slack_drawing import MODAL_STYLE, DemoModal, modals_section, mrkdwn, texts

ACK_ACTION_ID = "pollerdash_ack"  # escalations.oncall.channels.slack_blocks.ACK_ACTION_ID (demo imports no layer above)
REVIEW_ACTION_ID = "pollerdash_review"  # slack_blocks.REVIEW_ACTION_ID: in Slack it opens a modal
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
    "border:1px solid #007a5a;border-radius:4px;color:#007a5a;text-decoration:none;margin-right:.4rem}" + MODAL_STYLE
)
# Modals drawn on the page, newest first.
MODALS_SHOWN = 3


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


def _page(title: str, body: str, *, refresh: bool = True) -> bytes:
    # No refresh while a modal is drawn: it would wipe the choice being made.
    meta = f'<meta http-equiv="refresh" content="{PAGE_REFRESH_S}">' if refresh else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'{meta}<link rel="icon" href="data:,">'
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


def _click_form(*, action: str, key: str, card: str, label: str, click_token: str, people: str) -> str:
    return (
        '<form method=post action="/demo/click" style="display:inline">'
        f'<input type=hidden name=token value="{click_token}">'
        f'<input type=hidden name=message value="{html.escape(key)}">'
        f'<input type=hidden name=card value="{html.escape(card)}">'
        f'<input type=hidden name=action value="{action}">'
        f"<label>as <select name=user>{people}</select></label> "
        f"<button>{label}</button></form> "
    )


def slack_page(
    messages: Mapping[str, dict[str, Any]], *, click_token: str, modals: list[DemoModal] | None = None
) -> bytes:
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
                    label = html.escape(" ".join(texts(button.get("text"))))
                    if button.get("url"):
                        buttons.append(f'<a class=btn href="{html.escape(str(button["url"]))}">{label}</a>')
                    elif button.get("action_id") in (ACK_ACTION_ID, REVIEW_ACTION_ID):
                        # Review and decide opens pollerdash's modal, drawn above the channel.
                        action = "review" if button.get("action_id") == REVIEW_ACTION_ID else "ack"
                        card = str(button.get("value", ""))
                        buttons.append(
                            _click_form(
                                action=action, key=key, card=card, label=label, click_token=click_token, people=people
                            )
                        )
            else:
                text = "\n".join(texts(block))
                if text:
                    lines.append(f"<div style='white-space:pre-wrap'>{html.escape(text)}</div>")
        if not lines:
            lines.append(f"<div>{html.escape(mrkdwn(str(message.get('text', ''))))}</div>")
        parts.append(f"<div class=msg>{''.join(lines)}<p>{''.join(buttons)}</p></div>")
    intro = (
        f"<p class=muted>The demo's stand-in for a Slack channel ({CHANNEL}): pollerdash's messages as they "
        "read now (updated in place after every act on the card, wherever it was taken). Acknowledge and Review "
        "and decide send a signed click to pollerdash as Slack does; pollerdash matches the person by email, and "
        "Review and decide opens pollerdash's modal, drawn below as Slack shows it. "
        f"Refreshes every {PAGE_REFRESH_S} s while no modal waits for a choice.</p>"
    )
    shown, choosing = modals_section(modals or [], click_token=click_token)
    body = intro + shown + ("".join(parts) or "<p>No messages yet.</p>")
    return _page("Slack #oncall (demo receiver)", body, refresh=not choosing)


class _SlackHandler(fakeslack._Handler):
    def do_GET(self) -> None:
        if self.path.partition("?")[0] != "/":
            return self._text(404, "not_found")
        # Typing: FakeReceiver.start sets receiver on the server (demo/fakehttp.py).
        receiver: DemoSlack = self.server.receiver  # type: ignore[attr-defined]
        page = slack_page(receiver.messages(), click_token=receiver.click_token, modals=receiver.modals())
        self.reply(200, page, content_type="text/html; charset=utf-8")

    def do_POST(self) -> None:
        path = self.path.partition("?")[0]
        if path not in ("/demo/click", "/demo/submit"):
            return super().do_POST()
        # Typing: FakeReceiver.start sets receiver on the server (demo/fakehttp.py).
        receiver: DemoSlack = self.server.receiver  # type: ignore[attr-defined]
        raw = self.read_body()
        form = {k: v[0] for k, v in parse_qs((raw or b"").decode("utf-8", "replace")).items()}
        if not hmac.compare_digest(form.get("token", ""), receiver.click_token):
            return self._text(403, "this form is not from the demo's Slack page")
        if path == "/demo/submit":
            problem = receiver.submit(
                view_id=form.get("view", ""), option=form.get("option", ""), comment=form.get("comment", "")
            )
        elif form.get("user") not in SLACK_PEOPLE or not form.get("card", "").isdigit():
            return self._text(400, "choose a person and a card")
        else:
            action = REVIEW_ACTION_ID if form.get("action") == "review" else ACK_ACTION_ID
            problem = receiver.click(
                message_key=form.get("message", ""), card=form["card"], user_id=form["user"], action_id=action
            )
        if problem:
            return self.reply(
                200,
                _page("Slack (demo receiver)", f"<p>{html.escape(problem)}</p><p><a href='/'>Back</a></p>"),
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
        # Modals by view id, with who opened each (views.open does not say; the click before it does).
        self._modals: dict[str, DemoModal] = {}

    def modals(self) -> list[DemoModal]:
        """The modals opened here, newest first, as they read after their last submission."""
        for view_id, view in self.views().items():
            self._modals.setdefault(view_id, DemoModal(view_id, view, opened_by=""))
        return list(reversed(self._modals.values()))

    def click(self, *, message_key: str, card: str, user_id: str, action_id: str = ACK_ACTION_ID) -> str:
        """Send pollerdash the click Slack would send; "" when pollerdash took it, else why not. Review
        and decide carries a trigger_id, with which pollerdash opens its modal here at once."""
        before = set(self.views())
        body = fakeslack.interaction(
            user_id=user_id,
            team_id=self.team_id,
            app_id=self.app_id,
            action_id=action_id,
            value=card,
            response_url=self.new_response_url(replaces=message_key),
            trigger_id=self.new_trigger() if action_id == REVIEW_ACTION_ID else "1.2.3",
        )
        problem, _ = self._send(body, what="the click")
        for view_id, view in self.views().items():
            if view_id not in before:
                self._modals[view_id] = DemoModal(view_id, view, opened_by=SLACK_PEOPLE.get(user_id, user_id))
        if not problem and action_id == REVIEW_ACTION_ID and set(self.views()) == before:
            return "pollerdash opened no modal; its answer is on the message, for the person who clicked."
        return problem

    def submit(self, *, view_id: str, option: str, comment: str) -> str:
        """Submit a modal as Slack would (a view_submission, signed); its answer replaces the modal
        (response_action update) or shows next to the field (errors)."""
        modal = self._modals.get(view_id)
        user_id = next((u for u, name in SLACK_PEOPLE.items() if modal and name == modal.opened_by), "")
        if modal is None or not user_id:
            return "no such modal on this page."
        body = fakeslack.view_submission(
            view=modal.view,
            view_id=view_id,
            user_id=user_id,
            team_id=self.team_id,
            app_id=self.app_id,
            option=option,
            comment=comment,
        )
        problem, answer = self._send(body, what="the decision")
        modal.answered(answer)
        return problem

    def _send(self, body: bytes, *, what: str) -> tuple[str, bytes]:
        headers = fakeslack.signed(body=body, secret=self.signing_secret, timestamp=int(time.time()))
        request = urllib.request.Request(self.interactions_url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:  # a fixed local URL
                return "", answer.read()
        except urllib.error.HTTPError as exc:
            return f"pollerdash answered {exc.code} to {what}.", b""
        except OSError as exc:
            return f"pollerdash did not answer {what} ({exc.__class__.__name__}); is the web process running?", b""
