"""Test support shared by conftest.py and test modules (one module object, so one guard state)."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from django.db import connection

# A credential that must never appear in any response, log record, stored row or error text.
CANARY = "canary-secret-7f3e9a1c55d24b08"

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def job_id(scenario: str, **params: object) -> str:
    """A unique scenario job id, e.g. job_id("slow_success", polls=3)."""
    parts = [scenario, *(f"{key}={value}" for key, value in params.items()), f"id={uuid.uuid4().hex[:12]}"]
    return "__".join(parts)


class _CanaryLogHandler(logging.Handler):
    """Sees every log record raw (before redaction) and remembers any that carry the canary."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.leaks: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record must not break the suite
            text = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            text += str(record.exc_info[1])
        if CANARY in text:
            self.leaks.append(f"{record.name}: {text[:200]}")


canary_log_handler = _CanaryLogHandler()


def canary_rows() -> list[str]:
    from operations.models import AuditEntry, CallbackDelivery, Decision, Escalation, Operation, StatusCheck

    found = []
    try:
        for model in (Operation, StatusCheck, Escalation, Decision, CallbackDelivery):
            for row in model.objects.all().values():
                if CANARY in repr(row):
                    found.append(f"{model.__name__} row")
        for body in AuditEntry.objects.values_list("body", flat=True):
            if CANARY.encode() in bytes(body):
                found.append("AuditEntry body")
    except Exception:  # noqa: BLE001 - the test's own transaction may be unusable; its failure shows
        connection.close_if_unusable_or_obsolete()
    return found
