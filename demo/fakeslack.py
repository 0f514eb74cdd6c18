"""A fake Slack for tests: incoming webhooks, response_url, and the three Web API methods used.

- ``POST /services/T.../B.../<secret>``: an incoming webhook. Validates the message against
  Block Kit's limits (independently of pollerdash's builder, so a builder bug fails a test) and
  answers ``ok`` or Slack's error text (``invalid_blocks``, ``no_text``). Scripted answers for
  faults: ``"404:no_service"``, ``"410:channel_is_archived"``, ``"429:1"`` (Retry-After: 1),
  ``"500"``, ``"hang"``, ``"drop"``.
- ``POST /actions/<id>``: a click's response_url. ``replace_original`` replaces the message the
  click came from; ``response_type: ephemeral`` is recorded as ephemeral. Usable five times and
  for 30 minutes (by the injected clock), then ``404 expired_url`` / ``used_url``.
- ``POST /api/chat.postMessage``, ``/api/chat.update``, ``/api/users.info``, ``/api/views.open``:
  Bearer token checked; HTTP 200 with ``{"ok": false, "error": ...}`` on failure, as Slack does.
  ``chat.update`` needs the channel and ts of a message posted here; ``views.open`` a trigger_id
  this fake issued (``new_trigger``), used once within 3 s (by the injected clock), and a modal
  within Block Kit's limits (``view_problems``), or ``invalid_arguments``.

``signed(body, secret, ts)`` gives the headers Slack would send to pollerdash's interactivity
endpoint; ``interaction(...)`` builds a block_actions body with a response_url pointing here, and
``view_submission(...)`` the body Slack posts when a modal opened here is submitted.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode

from slack_sdk.signature import SignatureVerifier

from demo.fakehttp import FakeHandler, FakeReceiver
from demo.fakeslack_blocks import message_problems, view_problems

__all__ = ["FakeSlack", "interaction", "message_problems", "signed", "view_problems", "view_submission"]

RESPONSE_URL_USES = 5
RESPONSE_URL_TTL_S = 30 * 60
TRIGGER_TTL_S = 3


@dataclass(frozen=True)
class Posted:
    seq: int
    via: str  # "webhook", "response_url", "chat.postMessage", "chat.update"
    key: str  # webhook path secret part, response_url id, or channel/ts
    body: dict[str, Any]
    status: int | None


@dataclass
class _ResponseUrl:
    created_at: float
    uses: int = 0
    replaces: str = ""  # the key of the message the click came from


@dataclass
class _State:
    bot_token: str
    users: dict[str, dict[str, Any]]
    clock: Callable[[], float]
    lock: threading.Lock = field(default_factory=threading.Lock)
    script: deque[str] = field(default_factory=deque)
    log: list[Posted] = field(default_factory=list)
    # What the channel shows now: message key -> latest body (webhook posts are keyed by seq).
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    response_urls: dict[str, _ResponseUrl] = field(default_factory=dict)
    next_ts: int = 1_700_000_000_000_100
    # trigger_id -> when it was issued; removed when used.
    triggers: dict[str, float] = field(default_factory=dict)
    # Modals opened: view id -> the view as sent.
    views: dict[str, dict[str, Any]] = field(default_factory=dict)


class _Handler(FakeHandler):
    server_version = "fake-slack/1"

    @property
    def state(self) -> _State:
        # Set by FakeReceiver.start (demo/fakehttp.py) on the server object.
        return self.server.receiver.state  # type: ignore[attr-defined]

    def do_POST(self) -> None:
        path = self.path.partition("?")[0]
        raw = self.read_body()
        if raw is None:
            return self._text(413, "request_too_large")
        if path.startswith("/services/"):
            return self._webhook(path, raw)
        if path.startswith("/actions/"):
            return self._response_url(path[len("/actions/") :], raw)
        if path in ("/api/chat.postMessage", "/api/chat.update", "/api/users.info", "/api/views.open"):
            return self._web_api(path[len("/api/") :], raw)
        self._text(404, "not_found")

    def _scripted(self) -> str:
        with self.state.lock:
            return self.state.script.popleft() if self.state.script else "200"

    def _webhook(self, path: str, raw: bytes) -> None:
        body = _json(raw)
        problems = message_problems(body)
        step = "400:" + problems[0] if problems else self._scripted()
        if step == "hang":
            return self.hang()
        if step == "drop":
            return self.drop()
        code, _, text = step.partition(":")
        status = int(code)
        with self.state.lock:
            seq = len(self.state.log) + 1
            self.state.log.append(Posted(seq, "webhook", path.rsplit("/", 1)[-1], body or {}, status))
            if status == 200:
                self.state.messages[f"webhook-{seq}"] = body or {}
        if status == 429:
            return self._text(429, "rate_limited", {"Retry-After": text or "1"})
        self._text(status, "ok" if status == 200 else (text or "error"))

    def _response_url(self, url_id: str, raw: bytes) -> None:
        body = _json(raw) or {}
        with self.state.lock:
            entry = self.state.response_urls.get(url_id)
            expired = entry is None or self.state.clock() - entry.created_at > RESPONSE_URL_TTL_S
            used_up = entry is not None and entry.uses >= RESPONSE_URL_USES
            status = 404 if expired or used_up else (400 if message_problems(body) else 200)
            self.state.log.append(Posted(len(self.state.log) + 1, "response_url", url_id, body, status))
            if status == 200 and entry is not None:
                entry.uses += 1
                if body.get("replace_original") is True and body.get("response_type") != "ephemeral":
                    self.state.messages[entry.replaces] = body
        if status != 200:
            return self._text(status, "expired_url" if expired else ("used_url" if used_up else "invalid_blocks"))
        self._text(200, "ok")

    def _web_api(self, method: str, raw: bytes) -> None:
        auth = self.headers.get("Authorization", "")
        if auth != f"Bearer {self.state.bot_token}":
            return self._api({"ok": False, "error": "invalid_auth"})
        if method == "users.info":
            form = parse_qs(raw.decode("utf-8", "replace")) if raw else parse_qs(self.path.partition("?")[2])
            user = self.state.users.get((form.get("user") or [""])[0])
            return self._api({"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"})
        body = _json(raw) or {}
        if method == "views.open":
            return self._views_open(body)
        if method == "chat.update" and not (isinstance(body.get("channel"), str) and isinstance(body.get("ts"), str)):
            return self._api({"ok": False, "error": "invalid_arguments", "detail": "channel and ts are required"})
        problems = message_problems(body)
        if problems:
            return self._api({"ok": False, "error": "invalid_blocks", "detail": problems[0]})
        with self.state.lock:
            if method == "chat.postMessage":
                self.state.next_ts += 100
                ts = f"{self.state.next_ts // 1_000_000}.{self.state.next_ts % 1_000_000:06d}"
                key = f"{body.get('channel')}/{ts}"
                self.state.messages[key] = body
                self.state.log.append(Posted(len(self.state.log) + 1, "chat.postMessage", key, body, 200))
                return self._api({"ok": True, "channel": body.get("channel"), "ts": ts})
            key = f"{body.get('channel')}/{body.get('ts')}"
            if key not in self.state.messages:
                return self._api({"ok": False, "error": "message_not_found"})
            self.state.messages[key] = body
            self.state.log.append(Posted(len(self.state.log) + 1, "chat.update", key, body, 200))
        self._api({"ok": True, "channel": body.get("channel"), "ts": body.get("ts")})

    def _views_open(self, body: dict) -> None:
        trigger, view = body.get("trigger_id"), body.get("view")
        if set(body) - {"trigger_id", "view"} or not isinstance(trigger, str):
            return self._api({"ok": False, "error": "invalid_arguments", "detail": "trigger_id and view only"})
        problems = view_problems(view)
        with self.state.lock:
            issued = self.state.triggers.pop(trigger, None)
            if issued is None:
                return self._api({"ok": False, "error": "invalid_trigger_id"})
            if self.state.clock() - issued > TRIGGER_TTL_S:
                return self._api({"ok": False, "error": "expired_trigger_id"})
            if problems:
                return self._api({"ok": False, "error": "invalid_arguments", "detail": problems[0]})
            view_id = f"V{len(self.state.views) + 1:08d}"
            assert isinstance(view, dict)
            self.state.views[view_id] = view
            self.state.log.append(Posted(len(self.state.log) + 1, "views.open", view_id, body, 200))
        self._api({"ok": True, "view": {"id": view_id, **view}})

    def _api(self, answer: dict) -> None:
        self.reply(200, json.dumps(answer).encode(), content_type="application/json; charset=utf-8")

    def _text(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        self.reply(status, text.encode(), content_type="text/plain; charset=utf-8", headers=headers)


def _json(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class FakeSlack(FakeReceiver):
    handler = _Handler
    thread_name = "fake-slack"

    def __init__(
        self,
        *,
        bot_token: str = "",
        users: dict[str, dict[str, Any]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.state = _State(bot_token=bot_token, users=users or {}, clock=clock)

    def webhook_url(self, secret: str = "XXXXXXXXXXXXXXXXXXXXXXXX") -> str:
        return f"{self.base_url}/services/T0000000/B0000000/{secret}"

    def answer(self, *steps: str) -> None:
        with self.state.lock:
            self.state.script.extend(steps)

    def new_response_url(self, *, replaces: str) -> str:
        """A response_url for a click on message `replaces` (a key of `messages()`)."""
        with self.state.lock:
            url_id = f"r{len(self.state.response_urls) + 1}"
            self.state.response_urls[url_id] = _ResponseUrl(created_at=self.state.clock(), replaces=replaces)
        return f"{self.base_url}/actions/{url_id}"

    def new_trigger(self) -> str:
        """A trigger_id as Slack gives with a click: views.open accepts it once, within 3 s."""
        with self.state.lock:
            trigger = f"{len(self.state.triggers) + len(self.state.views) + 1}.{int(self.state.clock())}.abcdef"
            self.state.triggers[trigger] = self.state.clock()
        return trigger

    def views(self) -> dict[str, dict[str, Any]]:
        """The modals opened, by view id."""
        with self.state.lock:
            return dict(self.state.views)

    def posted(self, via: str | None = None) -> list[Posted]:
        with self.state.lock:
            return [p for p in self.state.log if via is None or p.via == via]

    def messages(self) -> dict[str, dict[str, Any]]:
        """What the channel shows now (after replacements and updates)."""
        with self.state.lock:
            return dict(self.state.messages)


def signed(*, body: bytes, secret: str, timestamp: int) -> dict[str, str]:
    """The headers Slack sends with an interaction to pollerdash's endpoint."""
    signature = SignatureVerifier(secret).generate_signature(timestamp=str(timestamp), body=body)
    return {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": str(timestamp),
        "X-Slack-Signature": signature or "",
    }


def interaction(
    *,
    user_id: str,
    team_id: str,
    app_id: str,
    action_id: str,
    value: str,
    response_url: str,
    trigger_id: str = "1.2.3",
    selected: str | None = None,
) -> bytes:
    """A block_actions body as Slack posts it: form-encoded, one `payload` field of JSON (`selected`:
    a static select's chosen value instead of a button's)."""
    payload = {
        "type": "block_actions",
        "user": {"id": user_id, "username": user_id.lower(), "name": user_id.lower(), "team_id": team_id},
        "api_app_id": app_id,
        "team": {"id": team_id, "domain": "example"},
        "container": {
            "type": "message",
            "message_ts": "1700000000.000100",
            "channel_id": "C0000000",
            "is_ephemeral": False,
        },
        "trigger_id": trigger_id,
        "channel": {"id": "C0000000", "name": "oncall"},
        "response_url": response_url,
        "actions": [{"action_id": action_id, "block_id": "card", "type": "button", "value": value, "action_ts": "1"}],
    }
    if selected is not None:
        payload["actions"] = [
            {
                "action_id": action_id,
                "block_id": "card",
                "type": "static_select",
                "selected_option": {"text": {"type": "plain_text", "text": "-"}, "value": selected},
                "action_ts": "1",
            }
        ]
    return urlencode({"payload": json.dumps(payload)}).encode()


def view_submission(
    *, view: dict[str, Any], view_id: str, user_id: str, team_id: str, app_id: str, option: str, comment: str = ""
) -> bytes:
    """The body Slack posts when a modal (as views.open received it) is submitted with `option` chosen."""
    values: dict[str, Any] = {}
    for block in view.get("blocks", []):
        if block.get("type") != "input":
            continue
        element = block["element"]
        if element["type"] == "radio_buttons":
            chosen = next((o for o in element["options"] if o["value"] == option), {"value": option})
            values[block["block_id"]] = {element["action_id"]: {"type": "radio_buttons", "selected_option": chosen}}
        else:
            text = comment or None
            values[block["block_id"]] = {element["action_id"]: {"type": "plain_text_input", "value": text}}
    payload = {
        "type": "view_submission",
        "team": {"id": team_id, "domain": "example"},
        "user": {"id": user_id, "username": user_id.lower(), "name": user_id.lower(), "team_id": team_id},
        "api_app_id": app_id,
        "trigger_id": "9.9.9",
        "view": {
            "id": view_id,
            "team_id": team_id,
            "type": "modal",
            "callback_id": view.get("callback_id", ""),
            "private_metadata": view.get("private_metadata", ""),
            "hash": "1700000000.abc",
            "state": {"values": values},
        },
        "response_urls": [],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()
