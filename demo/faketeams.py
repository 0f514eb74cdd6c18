"""A fake Microsoft Teams Workflows webhook for tests and the demo: strict about the message, told how
to answer.

``POST /workflows/<id>/triggers/manual/paths/invoke?sig=<signature>`` is what a Teams workflow's
"When a Teams webhook request is received" trigger gives out; the signature in the URL is the
secret. A request with another signature is answered 401. The body must be a message carrying one
Adaptive Card, checked independently of pollerdash's builder (so a builder bug fails a test):

- ``type`` is ``message`` and ``attachments`` a non-empty list; ``attachments[0].contentType`` is
  ``application/vnd.microsoft.card.adaptive`` and its ``content`` an ``AdaptiveCard`` with a
  ``version`` Teams renders (1.0 to 1.5) and a non-empty ``body``;
- each body element a known type with its required fields (TextBlock ``text``, RichTextBlock
  ``inlines`` of TextRuns, FactSet ``facts`` of ``title``/``value`` strings); each action an
  ``Action.OpenUrl`` with a ``title`` and an http(s) ``url``;
- the whole message at most 28 KB (Teams' message size limit); unknown keys refused.

An invalid message is answered 400 with an error object whatever the script says. A valid one is
answered by the next scripted step: ``"202"`` (the default once the script runs out), ``"400"``,
``"400:echo"`` (a refusal quoting the URL's signature back, as a careless receiver might: the
sender must scrub it before recording the refusal), ``"429"`` (``"429:30"`` with Retry-After),
``"500"``, ``"503"``, ``"hang"`` (never answer, until stop()), ``"drop"`` (close without
answering). Every request is recorded, with whether its signature was the accepted one (never the
signature itself). ``GET /`` shows the channel as a person would read it (each card's heading,
facts and text, newest first), for the demo. No Django import.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from demo.fakehttp import FakeHandler, ScriptedReceiver

MESSAGE_MAX = 28 * 1024
CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
VERSIONS = {"1.0", "1.1", "1.2", "1.3", "1.4", "1.5"}
MESSAGE_KEYS = {"type", "attachments", "summary", "text"}
ATTACHMENT_KEYS = {"contentType", "contentUrl", "content", "name"}
CARD_KEYS = {"$schema", "type", "version", "body", "actions", "msteams", "fallbackText", "speak", "lang"}
ELEMENTS = {"TextBlock", "RichTextBlock", "FactSet", "Container", "ColumnSet", "Image", "ActionSet"}
PATH_PREFIX = "/workflows/"
PATH_SUFFIX = "/triggers/manual/paths/invoke"


def validate(message: object) -> list[str]:
    """Every problem with a Workflows message carrying an Adaptive Card."""
    if not isinstance(message, dict):
        return ["the body must be a JSON object"]
    errors = [f"unknown message key '{key}'" for key in sorted(set(message) - MESSAGE_KEYS)]
    if message.get("type") != "message":
        errors.append("'type' must be 'message'")
    attachments = message.get("attachments")
    if not isinstance(attachments, list) or not attachments or not isinstance(attachments[0], dict):
        return [*errors, "'attachments' must be a non-empty list of objects"]
    first = attachments[0]
    errors += [f"unknown attachment key '{key}'" for key in sorted(set(first) - ATTACHMENT_KEYS)]
    if first.get("contentType") != CONTENT_TYPE:
        errors.append(f"'attachments[0].contentType' must be '{CONTENT_TYPE}'")
    return errors + _card_errors(first.get("content"))


def _card_errors(card: object) -> list[str]:
    if not isinstance(card, dict):
        return ["'attachments[0].content' must be an Adaptive Card object"]
    errors = [f"unknown card key '{key}'" for key in sorted(set(card) - CARD_KEYS)]
    if card.get("type") != "AdaptiveCard":
        errors.append("the card's 'type' must be 'AdaptiveCard'")
    if card.get("version") not in VERSIONS:
        errors.append(f"the card's 'version' must be one Teams renders ({', '.join(sorted(VERSIONS))})")
    body = card.get("body")
    if not isinstance(body, list) or not body:
        errors.append("the card's 'body' must be a non-empty list")
    else:
        for index, element in enumerate(body):
            errors += _element_errors(element, where=f"body[{index}]")
    for index, action in enumerate(card.get("actions") or []):
        errors += _action_errors(action, where=f"actions[{index}]")
    return errors


def _element_errors(element: object, *, where: str) -> list[str]:
    if not isinstance(element, dict) or element.get("type") not in ELEMENTS:
        return [f"{where}: unknown element type"]
    kind = element["type"]
    if kind == "TextBlock" and not _text(element.get("text")):
        return [f"{where}: a TextBlock needs 'text'"]
    if kind == "RichTextBlock":
        return _each(element, "inlines", where=where, ok=_text_run, problem="a TextRun with 'text' (or a string)")
    if kind == "FactSet":
        return _each(element, "facts", where=where, ok=_fact, problem="'title' and 'value' must be strings")
    return []


def _each(element: dict, key: str, *, where: str, ok: Callable[[object], bool], problem: str) -> list[str]:
    """A non-empty list under `key`, every item of which is `ok`."""
    items = element.get(key)
    if not isinstance(items, list) or not items:
        return [f"{where}: a {element['type']} needs '{key}'"]
    return [f"{where}.{key}[{i}]: {problem}" for i, item in enumerate(items) if not ok(item)]


def _text_run(inline: object) -> bool:
    return _text(inline) or (isinstance(inline, dict) and inline.get("type") == "TextRun" and _text(inline.get("text")))


def _fact(fact: object) -> bool:
    return isinstance(fact, dict) and isinstance(fact.get("title"), str) and isinstance(fact.get("value"), str)


def _action_errors(action: object, *, where: str) -> list[str]:
    if not isinstance(action, dict) or action.get("type") != "Action.OpenUrl":
        return [f"{where}: only Action.OpenUrl is accepted here"]
    url = action.get("url")
    if not _text(action.get("title")) or not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        return [f"{where}: Action.OpenUrl needs a 'title' and an http(s) 'url'"]
    return []


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


@dataclass(frozen=True)
class Received:
    seq: int
    at: float
    status: int | None  # None: hung or dropped
    signature_accepted: bool
    message: dict[str, Any]
    errors: tuple[str, ...]

    @property
    def card(self) -> dict[str, Any]:
        return self.message["attachments"][0]["content"]


def page(received: list[Received]) -> bytes:
    """The demo's view of the Teams channel: every card accepted, as its text reads, newest first."""
    cards = []
    for item in reversed(received):
        if item.status != 202:
            continue
        lines = [f"<div>{html.escape(line)}</div>" for line in _card_lines(item.card)]
        buttons = [
            f'<a href="{html.escape(str(action.get("url", "")))}">{html.escape(str(action.get("title", "")))}</a>'
            for action in item.card.get("actions") or []
        ]
        cards.append(
            f"<section style='border:1px solid #ccc;padding:.5rem;margin:.5rem 0'>{''.join(lines)}"
            f"<p>{' · '.join(buttons)}</p></section>"
        )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta http-equiv=refresh content=5>"
        "<title>Microsoft Teams (demo receiver)</title></head><body style='font:15px system-ui;max-width:60rem;"
        "margin:1.5rem auto'><h1>Microsoft Teams (demo receiver)</h1><p>The Adaptive Cards pollerdash posted "
        "to this Workflows webhook, checked as Teams would. Refreshes every 5 s.</p>"
        + ("".join(cards) or "<p>No cards yet: they arrive when a card opens and its policy names Teams.</p>")
        + "</body></html>"
    ).encode()


def _card_lines(card: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for element in card.get("body") or []:
        if element.get("type") == "TextBlock":
            lines.append(str(element.get("text", "")))
        elif element.get("type") == "FactSet":
            lines += [f"{fact.get('title')}: {fact.get('value')}" for fact in element.get("facts") or []]
        elif element.get("type") == "RichTextBlock":
            lines.append("".join(str(i.get("text", "")) if isinstance(i, dict) else str(i) for i in element["inlines"]))
    return lines


class _Handler(FakeHandler):
    server_version = "fake-teams-workflows/1"

    def do_GET(self) -> None:
        if self.path.partition("?")[0] != "/":
            return self._error(404, "NotFound", "no such page")
        # Set by FakeReceiver.start (demo/fakehttp.py) on the server object.
        receiver: FakeTeams = self.server.receiver  # type: ignore[attr-defined]
        self.reply(200, page(receiver.received()), content_type="text/html; charset=utf-8")

    def do_POST(self) -> None:
        # Set by FakeReceiver.start (demo/fakehttp.py) on the server object.
        receiver: FakeTeams = self.server.receiver  # type: ignore[attr-defined]
        script = receiver.script
        parts = urlsplit(self.path)
        if not (parts.path.startswith(PATH_PREFIX) and parts.path.endswith(PATH_SUFFIX)):
            return self._error(404, "NotFound", "no such workflow")
        raw = self.read_body(cap=MESSAGE_MAX * 4)
        if raw is None:
            return self._error(413, "RequestEntityTooLarge", "the message is too large")
        signed = parse_qs(parts.query).get("sig") == [receiver.signature]
        try:
            message = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            message = None
        errors = ["the body is not JSON"] if message is None else validate(message)
        if len(raw) > MESSAGE_MAX:
            errors.append(f"the message is {len(raw)} bytes; Teams takes at most {MESSAGE_MAX}")
        with script.lock:
            if not signed:
                step = "401"
            elif errors:
                step = "400"
            else:
                step = script.steps.popleft() if script.steps else "202"
            echo = step == "400:echo"
            code, _, retry_after = ("400", "", "") if echo else step.partition(":")
            status = int(code) if code.isdigit() else None
            script.log.append(
                Received(
                    len(script.log) + 1,
                    time.time(),
                    status,
                    signed,
                    message if isinstance(message, dict) else {},
                    tuple(errors),
                )
            )
        if step == "hang":
            return self.hang()
        if step == "drop":
            return self.drop()
        if status == 202:
            return self.reply(202, b"", content_type="text/plain")
        if status == 401:
            return self._error(401, "Unauthorized", "the signature of this workflow URL is not valid")
        if status == 400:
            sent_sig = (parse_qs(parts.query).get("sig") or [""])[0]
            why = f"the flow refused the request signed {sent_sig}" if echo else "refused (scripted)"
            return self._error(400, "InvalidRequestContent", "; ".join(errors) or why)
        headers = {"Retry-After": retry_after} if retry_after else {}
        self._error(status or 500, "Throttled" if status == 429 else "ServiceUnavailable", f"HTTP {status}", headers)

    def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        self.reply(status, body, content_type="application/json", headers=headers)


class FakeTeams(ScriptedReceiver[Received]):
    handler = _Handler
    thread_name = "fake-teams"

    def __init__(self, *, signature: str) -> None:
        super().__init__()
        self.signature = signature

    def webhook_url(self, signature: str | None = None, *, workflow: str = "0123abcd") -> str:
        """A Workflows trigger URL on this receiver (its own signature unless another is given)."""
        sig = self.signature if signature is None else signature
        return f"{self.base_url}{PATH_PREFIX}{workflow}{PATH_SUFFIX}?api-version=2016-06-01&sig={sig}"

    def cards(self) -> list[dict[str, Any]]:
        """The Adaptive Cards of the messages answered 202, oldest first."""
        return [r.card for r in self.received() if r.status == 202]
