"""Completion callbacks (DESIGN.md section 9): outbox, URL policy and Standard Webhooks delivery.

- `record_event` writes the event row inside the transaction that changes the operation's status,
  so a status change and its announcement commit together (transactional outbox). A completion is
  announced once per operation (a unique constraint backs this up).
- `dispatch_due_callbacks` (called by `dispatch_polls` every pass) claims due deliveries with a
  compare-and-set on `next_attempt_at` and enqueues one django-q2 task per attempt in the same
  transaction.
- `deliver` sends one attempt: the attempt is charged (compare-and-set on `attempts`) before it is
  sent, so a redelivered task never sends the same attempt twice. Every attempt carries the same
  `webhook-id` and a fresh timestamp and signature.

Callback URLs must be https on a public address (operations/addresses.py), unless the exact
host and port are listed in CALLBACK_ALLOWED_HOSTS; the address is resolved again at send time,
every address it resolves to is checked, and the request is sent to the checked address (DNS
rebinding cannot swap it afterwards).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import random
import re
import socket
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from standardwebhooks import Webhook
from ulid import ULID

from operations import audit
from operations.addresses import allowed_by_entries, host_is_listed, is_public
from operations.models import CallbackDelivery, CallbackEndpoint, Operation
from operations.representation import rfc3339

logger = logging.getLogger(__name__)

EVENT_COMPLETED = "operation.completed"
EVENT_NEEDS_ATTENTION = "operation.needs_attention"
USER_AGENT = "pollerdash-webhooks/1"
# Standard Webhooks example schedule: the delay before attempt 1, 2, ... 10 (about 3 days in all).
SCHEDULE_S = (0, 5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 14 * 3600, 20 * 3600, 24 * 3600)
JITTER = 0.2  # each delay is drawn from [0.8, 1.2] x the scheduled delay
# A claimed attempt is re-offered after this long if its task never ran (lost task, dead worker).
CLAIM_LEASE_S = 120
RETRY_AFTER_CAP_S = 24 * 3600
URL_MAX = 2048
ALLOWED_PORTS = (None, 443, 8443)
_HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")
_INTERNAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa", ".lan", ".intranet")

_rng = random.SystemRandom()
_client: httpx.Client | None = None
_client_pid: int | None = None
_client_lock = threading.Lock()


def event_id() -> str:
    return f"evt_{ULID()}"


# --- outbox ---------------------------------------------------------------------------------------


def event_payload(*, operation: Operation, event_type: str, at: datetime) -> bytes:
    """The thin Standard Webhooks body: enough to act on, the rest is one GET away."""
    self_url = f"{settings.SITE_URL}/api/v1/operations/{operation.pk}"
    return json.dumps(
        {
            "type": event_type,
            "timestamp": rfc3339(at),
            "data": {
                "object": "operation_event",
                "operation_id": operation.pk,
                "sequence": operation.sequence,
                "status": str(operation.status),
                "done": operation.done,
                "provider": operation.provider.slug,
                "provider_job_id": operation.provider_job_id,
                "links": {"self": self_url, "wait": f"{self_url}/wait?timeout_s=25"},
            },
        },
        separators=(",", ":"),
    ).encode()


def record_event(*, operation: Operation, event_type: str) -> CallbackDelivery | None:
    """Queue one event for the operation's callback URL, if it has one.

    Runs inside the caller's transaction, with the operation row locked, after its status change.
    Idempotent per (operation, event type, sequence), and a completion is announced only once.
    """
    if not operation.callback_url:
        return None
    if event_type == EVENT_COMPLETED:
        existing = CallbackDelivery.objects.filter(operation=operation, event_type=EVENT_COMPLETED).first()
        if existing is not None:
            return existing
    now = timezone.now()
    delivery, _ = CallbackDelivery.objects.get_or_create(
        operation=operation,
        event_type=event_type,
        sequence=operation.sequence,
        defaults={
            "id": event_id(),
            "payload": event_payload(operation=operation, event_type=event_type, at=now),
            "url": operation.callback_url,
            "next_attempt_at": now,
            "created_at": now,
        },
    )
    return delivery


# --- URL policy -----------------------------------------------------------------------------------


def _allowed(*, scheme: str, host: str, port: int | None) -> bool:
    return allowed_by_entries(tuple(settings.CALLBACK_ALLOWED_HOSTS), scheme=scheme, host=host, port=port)


def _host_of(url: str) -> tuple[str, str, int | None] | str:
    """(scheme, host, port) or the reason the URL cannot even be read."""
    if not isinstance(url, str) or not url:
        return "must be a non-empty string"
    if len(url) > URL_MAX:
        return f"is longer than {URL_MAX} characters"
    if any(not 0x21 <= ord(ch) <= 0x7E for ch in url):
        return "must be plain ASCII without spaces or control characters (IDNs in punycode)"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "is not a valid URL (host or port)"
    if "@" in parts.netloc:
        return "must not contain user info (user:password@)"
    if parts.fragment or "#" in url:
        return "must not have a #fragment"
    host = (parts.hostname or "").rstrip(".")
    if not host:
        return "has no host"
    return parts.scheme.lower(), host.lower(), port


def callback_url_problem(url: str) -> str | None:
    """Why this callback URL is refused at registration, or None when it is acceptable."""
    read = _host_of(url)
    if isinstance(read, str):
        return read
    scheme, host, port = read
    if _allowed(scheme=scheme, host=host, port=port):
        return None
    problem = _public_url_problem(scheme=scheme, host=host, port=port)
    if problem is not None and host_is_listed(tuple(settings.CALLBACK_ALLOWED_HOSTS), host=host):
        # The exemption is for the listed port (and scheme) only; say so rather than puzzle the agent.
        return f"{problem} (CALLBACK_ALLOWED_HOSTS exempts {host} on its listed port only)"
    return problem


def _public_url_problem(*, scheme: str, host: str, port: int | None) -> str | None:
    if scheme != "https":
        return "must use https"
    if port not in ALLOWED_PORTS:
        return "must use port 443 or 8443"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None:
        return None if is_public(ip) else f"points at a non-public address ({ip})"
    labels = host.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]) or all(_NUMERIC_LABEL.fullmatch(label) for label in labels):
        return "uses an alternate IP address encoding (decimal, hex or octal); write a public DNS name"
    if not all(_HOST_LABEL.fullmatch(label) for label in labels):
        return "does not have a valid DNS host name"
    if len(labels) < 2 or host == "localhost" or host.endswith(_INTERNAL_SUFFIXES):
        return "names an internal host; use a public DNS name"
    return None


@dataclass(frozen=True)
class Target:
    url: str
    headers: dict[str, str]
    extensions: dict[str, object]


class TargetRefused(Exception):
    pass


def resolve_target(url: str) -> Target:
    """Where to send, checked now: every address the name resolves to must be public."""
    problem = callback_url_problem(url)
    if problem is not None:
        raise TargetRefused(f"callback URL {problem}")
    scheme, host, port = _host_of(url)  # type: ignore[misc]
    if _allowed(scheme=scheme, host=host, port=port):
        return Target(url=url, headers={}, extensions={})
    try:
        ipaddress.ip_address(host)
        return Target(url=url, headers={}, extensions={})
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port or 443, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise TargetRefused(f"cannot resolve {host}: {exc.strerror or exc}") from None
    addresses = []
    for info in infos:
        try:
            addresses.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            raise TargetRefused(f"{host} resolved to an unreadable address") from None
    if not addresses:
        raise TargetRefused(f"{host} resolved to no address")
    private = [str(ip) for ip in addresses if not is_public(ip)]
    if private:
        raise TargetRefused(f"{host} resolves to a non-public address ({private[0]}); not sent")
    ip = addresses[0]
    netloc = f"[{ip}]" if ip.version == 6 else str(ip)
    if port:
        netloc += f":{port}"
    parts = urlsplit(url)
    pinned = parts._replace(netloc=netloc).geturl()
    host_header = host if not port else f"{host}:{port}"
    # TLS still verifies the certificate against the name, while the socket goes to the checked IP.
    return Target(url=pinned, headers={"Host": host_header}, extensions={"sni_hostname": host})


# --- dispatch and delivery ------------------------------------------------------------------------


def dispatch_due_callbacks(*, limit: int = 100) -> int:
    """Hand due callback attempts to workers; returns how many. Called by `dispatch_polls` each pass.

    Each due row is claimed by moving its `next_attempt_at` forward by a lease with a
    compare-and-set, so two dispatchers never enqueue the same attempt; the task is enqueued in the
    same transaction (ORM broker), so a claim and its task commit together.
    """
    from django_q.tasks import async_task

    now = timezone.now()
    due = list(
        CallbackDelivery.objects.filter(state=CallbackDelivery.State.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("pk", "attempts", "next_attempt_at")[:limit]
    )
    sent = 0
    for pk, attempts, due_at in due:
        with transaction.atomic():
            claimed = CallbackDelivery.objects.filter(
                pk=pk, state=CallbackDelivery.State.PENDING, attempts=attempts, next_attempt_at=due_at
            ).update(next_attempt_at=now + timedelta(seconds=CLAIM_LEASE_S))
            if claimed:
                async_task(
                    "operations.tasks.deliver_callback",
                    pk,
                    attempts,
                    task_name=f"callback {pk} #{attempts + 1}",
                    group="callbacks",
                )
                sent += 1
    return sent


def client() -> httpx.Client:
    global _client, _client_pid
    with _client_lock:
        if _client is None or _client_pid != os.getpid():
            _client = httpx.Client(
                timeout=httpx.Timeout(settings.CALLBACK_TIMEOUT_S),
                follow_redirects=False,
                trust_env=False,
                headers={"User-Agent": USER_AGENT},
            )
            _client_pid = os.getpid()
        return _client


def next_delay_s(*, attempts_made: int, retry_after_s: float | None, rng: random.Random | None = None) -> float | None:
    """Seconds until the next attempt after `attempts_made` failures, or None when exhausted."""
    if attempts_made >= len(SCHEDULE_S):
        return None
    delay = SCHEDULE_S[attempts_made] * (rng or _rng).uniform(1 - JITTER, 1 + JITTER)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, RETRY_AFTER_CAP_S))
    return delay


def _retry_after(value: str | None) -> float | None:
    if value and re.fullmatch(r"[0-9]{1,9}", value.strip()):
        return float(value.strip())
    return None


def sign(*, secret: str, event_id_: str, at: datetime, payload: bytes) -> str:
    return Webhook(secret).sign(msg_id=event_id_, timestamp=at, data=payload.decode())


def deliver(*, delivery_id: str, attempt: int) -> str:
    """Send attempt number `attempt` (0-based) of one delivery, once. Returns what happened."""
    now = timezone.now()
    with transaction.atomic():
        charged = CallbackDelivery.objects.filter(
            pk=delivery_id, state=CallbackDelivery.State.PENDING, attempts=attempt
        ).update(attempts=attempt + 1, last_attempt_at=now, next_attempt_at=now + timedelta(seconds=CLAIM_LEASE_S))
    if not charged:
        return "stale"
    delivery = CallbackDelivery.objects.select_related("operation__agent").get(pk=delivery_id)
    endpoint = CallbackEndpoint.objects.filter(url=delivery.url).first()
    if endpoint is not None and endpoint.disabled_at is not None:
        _finish(delivery, state=CallbackDelivery.State.DISABLED, http_status=None, error="endpoint disabled")
        _escalate(delivery, reason=f"callback endpoint disabled since {audit.iso(endpoint.disabled_at)}")
        return "disabled"
    agent = delivery.operation.agent
    if agent is None or not agent.webhook_secret:
        _finish(delivery, state=CallbackDelivery.State.FAILED, http_status=None, error="no signing secret")
        _escalate(delivery, reason="the operation's agent has no webhook signing secret")
        return "failed"
    try:
        target = resolve_target(delivery.url)
    except TargetRefused as exc:
        return _failed_attempt(delivery, http_status=None, error=str(exc), retry_after_s=None)
    sent_at = timezone.now()
    payload = bytes(delivery.payload)
    headers = {
        **target.headers,
        "Content-Type": "application/json",
        "webhook-id": delivery.pk,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": sign(secret=agent.webhook_secret, event_id_=delivery.pk, at=sent_at, payload=payload),
    }
    try:
        with client().stream(
            "POST", target.url, content=payload, headers=headers, extensions=target.extensions
        ) as response:
            status = response.status_code
            retry_after = _retry_after(response.headers.get("retry-after"))
    except httpx.HTTPError as exc:
        return _failed_attempt(delivery, http_status=None, error=f"{type(exc).__name__}", retry_after_s=None)
    if 200 <= status < 300:
        _finish(delivery, state=CallbackDelivery.State.DELIVERED, http_status=status, error="")
        return "delivered"
    if status == 410:
        with transaction.atomic():
            CallbackEndpoint.objects.update_or_create(
                url=delivery.url,
                defaults={
                    "disabled_at": timezone.now(),
                    "disabled_reason": f"410 Gone for {delivery.pk}",
                    "last_http_status": 410,
                },
            )
        _finish(delivery, state=CallbackDelivery.State.DISABLED, http_status=410, error="410 Gone: endpoint disabled")
        _escalate(delivery, reason="the receiver answered 410 Gone; the endpoint is disabled")
        return "disabled"
    hint = retry_after if status in (429, 503) else None
    return _failed_attempt(delivery, http_status=status, error=f"HTTP {status}", retry_after_s=hint)


def _failed_attempt(
    delivery: CallbackDelivery, *, http_status: int | None, error: str, retry_after_s: float | None
) -> str:
    delay = next_delay_s(attempts_made=delivery.attempts, retry_after_s=retry_after_s)
    if delay is None:
        _finish(delivery, state=CallbackDelivery.State.FAILED, http_status=http_status, error=error)
        _escalate(delivery, reason=f"{delivery.attempts} attempts failed; last: {error}")
        return "failed"
    delivery.last_http_status = http_status
    CallbackDelivery.objects.filter(pk=delivery.pk, attempts=delivery.attempts).update(
        next_attempt_at=timezone.now() + timedelta(seconds=delay),
        last_http_status=http_status,
        last_error=error[:300],
    )
    logger.info("callback %s attempt %s failed (%s); retry in %.0f s", delivery.pk, delivery.attempts, error, delay)
    return "retry"


def _finish(delivery: CallbackDelivery, *, state: str, http_status: int | None, error: str) -> None:
    now = timezone.now()
    delivery.state, delivery.last_http_status, delivery.last_error = state, http_status, error[:300]
    fields: dict[str, object] = {
        "state": state,
        "next_attempt_at": None,
        "last_http_status": http_status,
        "last_error": error[:300],
    }
    if state == CallbackDelivery.State.DELIVERED:
        fields["delivered_at"] = now
    CallbackDelivery.objects.filter(pk=delivery.pk, attempts=delivery.attempts).update(**fields)
    if http_status is not None:
        CallbackEndpoint.objects.filter(url=delivery.url).update(last_http_status=http_status)


def _escalate(delivery: CallbackDelivery, *, reason: str) -> None:
    """A callback that cannot be delivered is put in front of people.

    The operation may already be done (terminal statuses never change), so this is not a decision
    card: the operation gets a warning the agent sees, the audit chain gets a `callback.failed`
    entry, and the on-call log gets an error. The operation stays in the agent's open list until
    it is acknowledged, so polling still recovers the result.
    """
    warning = f"callback {delivery.pk} ({delivery.event_type}) not delivered: {reason}"
    with transaction.atomic():
        op = Operation.objects.select_for_update().filter(pk=delivery.operation_id).first()
        if op is None:
            return
        op.warnings = op.warnings_with(warning)
        op.sequence += 1
        op.updated_at = timezone.now()
        op.save(update_fields=["warnings", "sequence", "updated_at"])
        audit.append(
            entry_type="callback.failed",
            actor=audit.SYSTEM_CONTROLLER,
            operation_id=op.pk,
            data={
                "event_id": delivery.pk,
                "event_type": delivery.event_type,
                "attempts": delivery.attempts,
                "http_status": delivery.last_http_status,
                "reason": reason[:300],
            },
        )
    logger.error("operation %s: %s", delivery.operation_id, warning)
    _notify_people(delivery, reason=reason)


def _notify_people(delivery: CallbackDelivery, *, reason: str) -> None:
    """Tell on-call by the escalation channels (NOTIFY_EMAILS, NOTIFY_WEBHOOK_URL), after commit.

    The reason can quote the agent's callback address: it follows pollerdash's link as quoted,
    defanged data. Counted against NOTIFY_MAX_PER_HOUR like every message to people.
    """
    from django.core.mail import send_mail

    from escalations.agent_text import quoted, slack_escaped
    from escalations.notifications import Message, hourly_slot, post_webhook

    if not (settings.NOTIFY_EMAILS or settings.NOTIFY_WEBHOOK_URL):
        return
    if not hourly_slot():
        logger.warning(
            "operation %s: callback failure notification skipped, NOTIFY_MAX_PER_HOUR (%s) reached",
            delivery.operation_id,
            settings.NOTIFY_MAX_PER_HOUR,
        )
        return
    link = f"{settings.SITE_URL}/operations/{delivery.operation_id}/"
    why = f"Why (may quote the agent's callback address; links disabled): {quoted(reason)}"
    text = (
        f"pollerdash could not deliver the {delivery.event_type} callback {delivery.pk} of operation "
        f"{delivery.operation_id}.\n\n{link}\n\nThe agent can still read the outcome (the operation stays in "
        f"its open list until acknowledged); check the agent's callback endpoint.\n\n{why}"
    )
    message = Message(
        subject=f"[pollerdash] Callback not delivered: {delivery.operation_id}",
        text=text,
        chat=f"*Callback not delivered* for <{link}|{delivery.operation_id}>\n{slack_escaped(why)}",
        link=link,
    )
    if settings.NOTIFY_EMAILS:
        try:
            send_mail(message.subject, message.text, settings.DEFAULT_FROM_EMAIL, list(settings.NOTIFY_EMAILS))
        except Exception as exc:  # noqa: BLE001 - a failed channel must not stop the other
            logger.warning("callback failure email not sent (%s)", type(exc).__name__)
    if settings.NOTIFY_WEBHOOK_URL:
        post_webhook(url=settings.NOTIFY_WEBHOOK_URL, message=message, kind="callback_failed")
