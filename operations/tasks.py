"""django-q2 entry points. Thin: arguments are ids and ints only; the services do the work."""

from __future__ import annotations

from operations.agents.services import provider_cancel_forward
from operations.callbacks.delivery import deliver
from operations.polls.batch import poll_claims
from operations.polls.controller import poll_once
from operations.providers.credentials import credentials_publish_all


def run_poll(operation_id: str, fence: int) -> str:
    return str(poll_once(operation_id=operation_id, fence=fence))


def run_polls(claims: list[tuple[str, int]]) -> str:
    return ",".join(str(result) for result in poll_claims(claims=[(op, fence) for op, fence in claims]))


def deliver_callback(delivery_id: str, attempt: int) -> str:
    return deliver(delivery_id=delivery_id, attempt=attempt)


def forward_provider_cancel(operation_id: str) -> str:
    return provider_cancel_forward(operation_id=operation_id)


def publish_credential_fingerprints() -> int:
    return credentials_publish_all()
