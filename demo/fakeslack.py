"""A fake Slack for tests: incoming webhooks, response_url, and the three Web API methods used.

- ``POST /services/T.../B.../<secret>``: an incoming webhook. Validates the message against
  Block Kit's limits (independently of pollerdash's builder, so a builder bug fails a test) and
  answers ``ok`` or Slack's error text (``invalid_blocks``, ``no_text``). Scripted answers for
  faults: ``"404:no_service"``, ``"410:channel_is_archived"``, ``"429:1"`` (Retry-After: 1),
  ``"500"``, ``"hang"``, ``"drop"``.
- ``POST /actions/<id>``: a click's response_url. ``replace_original`` replaces the message the
  click came from; ``response_type: ephemeral`` is recorded as ephemeral. Usable five times and
  for 30 minutes (by the injected clock), then ``404 expired_url`` / ``used_url``.
- ``POST /api/chat.postMessage``, ``/api/chat.update``, ``/api/users.info``: Bearer token
  checked; HTTP 200 with ``{"ok": false, "error": ...}`` on failure, as Slack does.

``signed(body, secret, ts)`` gives the headers Slack would send to pollerdash's interactivity
endpoint; ``interaction(...)`` builds a block_actions body with a response_url pointing here.
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

RESPONSE_URL_USES = 5
RESPONSE_URL_TTL_S = 30 * 60
BLOCK_TYPES = {"header", "section", "context", "actions", "divider", "rich_text"}


def message_problems(message: object) -> list[str]:
    """Block Kit limits a message must respect (what Slack answers invalid_blocks for)."""
    if not isinstance(message, dict):
        return ["invalid_payload"]
    blocks = message.get("blocks")
    if not message.get("text") and not blocks:
        return ["no_text"]
    if blocks is None:
        return []
    if not isinstance(blocks, list) or len(blocks) > 50:
        return ["blocks: a list of at most 50"]
    problems: list[str] = []
    block_ids: set[str] = set()
    action_ids: set[str] = set()
    for i, block in enumerate(blocks):
        where = f"blocks[{i}]"
        if not isinstance(block, dict) or block.get("type") not in BLOCK_TYPES:
            problems.append(f"{where}: unknown block type")
            continue
        if "block_id" in block:
            if not isinstance(block["block_id"], str) or len(block["block_id"]) > 255 or block["block_id"] in block_ids:
                problems.append(f"{where}.block_id: unique, at most 255")
            block_ids.add(block.get("block_id", ""))
        kind = block["type"]
        if kind == "header":
            problems += _text(block.get("text"), f"{where}.text", 150, plain_only=True)
        elif kind == "section":
            if "text" not in block and "fields" not in block:
                problems.append(f"{where}: needs text or fields")
            if "text" in block:
                problems += _text(block["text"], f"{where}.text", 3000)
            fields = block.get("fields", [])
            if not isinstance(fields, list) or len(fields) > 10:
                problems.append(f"{where}.fields: at most 10")
            else:
                for j, f in enumerate(fields):
                    problems += _text(f, f"{where}.fields[{j}]", 2000)
        elif kind == "context":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 10:
                problems.append(f"{where}.elements: 1 to 10")
            else:
                for j, e in enumerate(elements):
                    problems += _text(e, f"{where}.elements[{j}]", 2000)
        elif kind == "actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 25:
                problems.append(f"{where}.elements: 1 to 25")
                continue
            for j, e in enumerate(elements):
                problems += _button(e, f"{where}.elements[{j}]", action_ids)
        elif kind == "rich_text":
            problems += _rich_text(block.get("elements"), where)
    return problems


def _text(obj: object, where: str, limit: int, *, plain_only: bool = False) -> list[str]:
    if not isinstance(obj, dict) or obj.get("type") not in (
        ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
    ):
        return [f"{where}: a {'plain_text' if plain_only else 'text'} object"]
    text = obj.get("text")
    if not isinstance(text, str) or not 1 <= len(text) <= limit:
        return [f"{where}.text: 1 to {limit} characters"]
    return []


def _button(element: object, where: str, action_ids: set[str]) -> list[str]:
    if not isinstance(element, dict) or element.get("type") != "button":
        return [f"{where}: only buttons are expected"]
    problems = _text(element.get("text"), f"{where}.text", 75, plain_only=True)
    action_id = element.get("action_id")
    if not isinstance(action_id, str) or len(action_id) > 255 or action_id in action_ids:
        problems.append(f"{where}.action_id: unique, at most 255")
    action_ids.add(str(action_id))
    if "url" in element and (not isinstance(element["url"], str) or len(element["url"]) > 3000):
        problems.append(f"{where}.url: at most 3000")
    if "value" in element and (not isinstance(element["value"], str) or len(element["value"]) > 2000):
        problems.append(f"{where}.value: at most 2000")
    if "style" in element and element["style"] not in ("primary", "danger"):
        problems.append(f"{where}.style: primary or danger")
    return problems


def _rich_text(elements: object, where: str) -> list[str]:
    if not isinstance(elements, list) or not elements:
        return [f"{where}.elements: a non-empty list"]
    problems = []
    for j, e in enumerate(elements):
        if not isinstance(e, dict) or e.get("type") not in (
            "rich_text_section",
            "rich_text_quote",
            "rich_text_preformatted",
        ):
            problems.append(f"{where}.elements[{j}]: unknown rich text element")
            continue
        for k, leaf in enumerate(e.get("elements") or []):
            if not isinstance(leaf, dict) or leaf.get("type") != "text" or not isinstance(leaf.get("text"), str):
                problems.append(f"{where}.elements[{j}].elements[{k}]: only text is expected")
    return problems


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
        if path in ("/api/chat.postMessage", "/api/chat.update", "/api/users.info"):
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


def interaction(*, user_id: str, team_id: str, app_id: str, action_id: str, value: str, response_url: str) -> bytes:
    """A block_actions body as Slack posts it: form-encoded, one `payload` field of JSON."""
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
        "trigger_id": "1.2.3",
        "channel": {"id": "C0000000", "name": "oncall"},
        "response_url": response_url,
        "actions": [{"action_id": action_id, "block_id": "card", "type": "button", "value": value, "action_ts": "1"}],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()
