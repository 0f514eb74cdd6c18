"""A fake PagerDuty Events API v2 receiver for tests: strict about payloads, told how to answer.

``POST /v2/enqueue`` validates the event as the documentation describes it, more strictly than
PagerDuty itself (unknown keys are refused, so a typo in a field name fails a test instead of
being silently ignored). An invalid event is answered 400 with PagerDuty's error shape whatever
the script says. A valid one is answered by the next scripted step:

- ``"202"`` (the default once the script runs out): ``{"status": "success", ...}``
- ``"400"``, ``"429"`` (with ``Retry-After`` when given as ``"429:30"``), ``"500"``, ``"503"``
- ``"hang"``: never answer (until stop()); ``"drop"``: close without answering.
- ``"400:echo"``: a 400 whose ``errors`` quote the routing key back, as a careless compatible
  receiver might (the sender must scrub it before recording the refusal).

Every request is recorded, valid or not, with the routing key replaced by whether it was one of
the accepted keys (the fake never keeps the secret). ``events(dedup_key)`` returns the events
answered 202, in arrival order. No Django import: usable from benchmarks and the demo as well.

PagerDuty's other direction, v3 webhooks, is built here too: ``webhook_event`` writes an incident
event as PagerDuty documents it and ``webhook_signature`` signs it, for the tests and the demo's
"Acknowledge in PagerDuty" button (demo/receivers.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from demo.fakehttp import FakeHandler, ScriptedReceiver

BODY_MAX = 512 * 1024
TOP_KEYS = {"routing_key", "event_action", "dedup_key", "payload", "images", "links", "client", "client_url"}
PAYLOAD_KEYS = {"summary", "source", "severity", "timestamp", "component", "group", "class", "custom_details"}
SEVERITIES = {"critical", "error", "warning", "info"}
ACTIONS = {"trigger", "acknowledge", "resolve"}


@dataclass(frozen=True)
class Received:
    seq: int
    at: float
    status: int | None  # None: hung or dropped
    routing_key_accepted: bool
    event: dict[str, Any]  # the body without routing_key
    errors: tuple[str, ...]


def validate(body: object, *, accepted_keys: frozenset[str]) -> list[str]:
    """Every problem with an event, in PagerDuty's words where the docs give them."""
    if not isinstance(body, dict):
        return ["Event object must be a JSON object"]
    errors = [f"Unknown field '{key}'" for key in sorted(set(body) - TOP_KEYS)]
    key = body.get("routing_key")
    if not isinstance(key, str) or not key:
        errors.append("'routing_key' is missing or not a string")
    elif key not in accepted_keys:
        errors.append("Invalid routing key")
    action = body.get("event_action")
    if action not in ACTIONS:
        errors.append("'event_action' must be one of trigger, acknowledge, resolve")
    dedup = body.get("dedup_key")
    if dedup is not None and (not isinstance(dedup, str) or not 1 <= len(dedup) <= 255):
        errors.append("'dedup_key' must be a string of 1 to 255 characters")
    if action in ("acknowledge", "resolve") and dedup is None:
        errors.append(f"'dedup_key' is required to {action}")
    if action == "trigger":
        errors += _payload_errors(body.get("payload"))
    for name in ("client", "client_url"):
        if name in body and not isinstance(body[name], str):
            errors.append(f"'{name}' must be a string")
    errors += _context_errors(body)
    return errors


def _payload_errors(payload: object) -> list[str]:
    if not isinstance(payload, dict):
        return ["'payload' is required to trigger and must be an object"]
    errors = [f"Unknown field 'payload.{key}'" for key in sorted(set(payload) - PAYLOAD_KEYS)]
    summary = payload.get("summary")
    if not isinstance(summary, str) or not 1 <= len(summary) <= 1024:
        errors.append("'payload.summary' must be a string of 1 to 1024 characters")
    if not isinstance(payload.get("source"), str) or not payload["source"]:
        errors.append("'payload.source' is required")
    if payload.get("severity") not in SEVERITIES:
        errors.append("'payload.severity' must be one of critical, error, warning, info")
    if "timestamp" in payload:
        try:
            stamp = datetime.fromisoformat(payload["timestamp"])
            if stamp.tzinfo is None:
                errors.append("'payload.timestamp' needs a time zone")
        except (TypeError, ValueError):
            errors.append("'payload.timestamp' must be an ISO 8601 timestamp")
    for name in ("component", "group", "class"):
        if name in payload and not isinstance(payload[name], str):
            errors.append(f"'payload.{name}' must be a string")
    if "custom_details" in payload and not isinstance(payload["custom_details"], dict):
        errors.append("'payload.custom_details' must be an object")
    return errors


def _context_errors(body: dict) -> list[str]:
    errors: list[str] = []
    for name, required in (("links", "href"), ("images", "src")):
        if name not in body:
            continue
        items = body[name]
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            errors.append(f"'{name}' must be a list of objects")
            continue
        for index, item in enumerate(items):
            if not isinstance(item.get(required), str) or not item[required]:
                errors.append(f"'{name}[{index}].{required}' is required")
            if name == "images" and isinstance(item.get("src"), str) and not item["src"].startswith("https://"):
                errors.append(f"'images[{index}].src' must be served over HTTPS")
    return errors


class _Handler(FakeHandler):
    server_version = "fake-pagerduty/1"

    def do_POST(self) -> None:
        # Set by FakeReceiver.start (demo/fakehttp.py) on the server object.
        receiver: FakePagerDuty = self.server.receiver  # type: ignore[attr-defined]
        script = receiver.script
        if self.path.partition("?")[0] != "/v2/enqueue":
            return self.reply(404, b'{"status":"not found"}', content_type="application/json")
        raw = self.read_body(cap=BODY_MAX)
        if raw is None:
            return self.reply(413, b'{"status":"too large"}', content_type="application/json")
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            body = None
        errors = ["Invalid JSON"] if body is None else validate(body, accepted_keys=receiver.accepted_keys)
        key_ok = isinstance(body, dict) and body.get("routing_key") in receiver.accepted_keys
        event = {k: v for k, v in body.items() if k != "routing_key"} if isinstance(body, dict) else {}
        with script.lock:
            step = "400" if errors else (script.steps.popleft() if script.steps else "202")
            seq = len(script.log) + 1
        echo = step == "400:echo"
        code, _, retry_after = ("400", "", "") if echo else step.partition(":")
        status = int(code) if code.isdigit() else None
        with script.lock:
            script.log.append(Received(seq, time.time(), status, key_ok, event, tuple(errors)))
        if step == "hang":
            return self.hang()
        if step == "drop":
            return self.drop()
        if status == 202:
            answer = {"status": "success", "message": "Event processed", "dedup_key": event.get("dedup_key", "")}
        elif status == 400:
            reasons = errors or ([f"Routing key {body.get('routing_key')} is not valid"] if echo else ["Forced"])
            answer = {"status": "invalid event", "message": "Event object is invalid", "errors": reasons}
        else:
            answer = {"status": "error", "message": f"HTTP {status}"}
        headers = {"Retry-After": retry_after} if retry_after else {}
        self.reply(status or 500, json.dumps(answer).encode(), content_type="application/json", headers=headers)


class FakePagerDuty(ScriptedReceiver[Received]):
    handler = _Handler
    thread_name = "fake-pagerduty"

    def __init__(self, *, accepted_keys: Iterable[str]) -> None:
        super().__init__()
        self.accepted_keys = frozenset(accepted_keys)

    @property
    def url(self) -> str:
        return f"{self.base_url}/v2/enqueue"

    def events(self, dedup_key: str | None = None) -> list[dict[str, Any]]:
        """Events answered 202, oldest first (optionally of one dedup_key)."""
        return [
            r.event
            for r in self.received()
            if r.status == 202 and (dedup_key is None or r.event.get("dedup_key") == dedup_key)
        ]


# --- v3 webhooks: what PagerDuty sends back -----------------------------------------------------------

WEBHOOK_EVENT_TYPES = {
    "incident.acknowledged",
    "incident.unacknowledged",
    "incident.resolved",
    "incident.triggered",
    "incident.escalated",
    "incident.reassigned",
}


def webhook_user(user_id: str, name: str, *, account: str = "acme") -> dict[str, str]:
    """A v3 `user_reference`, as PagerDuty writes an agent or an assignee: no email in it."""
    return {
        "html_url": f"https://{account}.pagerduty.com/users/{user_id}",
        "id": user_id,
        "self": f"https://api.pagerduty.com/users/{user_id}",
        "summary": name,
        "type": "user_reference",
    }


def webhook_event(
    *,
    event_type: str,
    dedup_key: str,
    agent: dict[str, str] | None,
    event_id: str | None = None,
    occurred_at: datetime | None = None,
    incident_id: str = "PGR0VU2",
) -> bytes:
    """A v3 webhook body as PagerDuty documents it ("Webhooks v3 Overview": one `event` with `id`,
    `event_type`, `resource_type`, `occurred_at`, `agent`, `client`, `data` — an `incident` whose
    `incident_key` is the dedup_key of the Events API v2 alert that opened it)."""
    if event_type not in WEBHOOK_EVENT_TYPES:
        raise ValueError(f"not a v3 incident event type this fake sends: {event_type}")
    when = (occurred_at or datetime.now(UTC)).astimezone(UTC)
    status = {"incident.acknowledged": "acknowledged", "incident.resolved": "resolved"}.get(event_type, "triggered")
    event = {
        "id": event_id or str(uuid.uuid4()),
        "event_type": event_type,
        "resource_type": "incident",
        "occurred_at": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "agent": agent,
        "client": {"name": "PagerDuty"} if agent else None,
        "data": {
            "id": incident_id,
            "type": "incident",
            "self": f"https://api.pagerduty.com/incidents/{incident_id}",
            "html_url": f"https://acme.pagerduty.com/incidents/{incident_id}",
            "number": 2,
            "status": status,
            "incident_key": dedup_key,
            "created_at": when.isoformat(timespec="seconds").replace("+00:00", "Z"),
            "title": "pollerdash card",
            "service": {"id": "PF9KMXH", "summary": "pollerdash", "type": "service_reference"},
            "assignees": [agent] if agent else [],
            "urgency": "high",
            "resolve_reason": None,
        },
    }
    return json.dumps({"event": event}, separators=(",", ":")).encode()


def webhook_signature(*, body: bytes, secrets: Iterable[str]) -> str:
    """`X-PagerDuty-Signature`: a `v1=` HMAC-SHA256 hex of the raw body per secret, comma-separated
    (several during a secret's rotation)."""
    return ",".join("v1=" + hmac.new(s.encode(), body, hashlib.sha256).hexdigest() for s in secrets)
