"""Helpers for the audit tests: realistic entries, appends, and byte-level export editing."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from operations.audit import entries as audit
from operations.audit import verify as av
from operations.models import AuditEntry
from tests.support import T0

OP_A = "op_01JAUDITTESTAAAAAAAAAAAAAA"
OP_B = "op_01JAUDITTESTBBBBBBBBBBBBBB"


def decision_data(n: int) -> dict[str, object]:
    """A realistic controller decision: a 503 with Retry-After, waiting."""
    return {
        "state": "running",
        "next_poll_at": audit.iso(T0 + timedelta(seconds=120 + n)),
        "delay_source": "provider_retry_after",
        "delay_ms": 120_000,
        "request_count": n,
        "max_requests": 12,
        "transport_failures": 1,
        "max_transport_failures": 3,
        "deadline": audit.iso(T0 + timedelta(minutes=40)),
        "http_status": 503,
        "provider_state": None,
        "provider_request_id": f"req_{n:04d}",
        "retry_after": "120",
        "interpreted_state": "server_error",
        "decision": "wait",
        "reason": "provider answered 503 with Retry-After 120 — «waiting»",
    }


def append_entries(count: int, *, operation_id: str | None = OP_A, start: int = 1) -> list[AuditEntry]:
    """`count` controller decisions, each in its own transaction, as the controller appends them."""
    entries = []
    for n in range(start, start + count):
        with transaction.atomic():
            entries.append(
                audit.append(
                    entry_type="controller.decision",
                    actor=audit.SYSTEM_CONTROLLER,
                    operation_id=operation_id,
                    data=decision_data(n),
                )
            )
    return entries


@dataclass(frozen=True)
class Sample:
    data: bytes
    closed_at: datetime  # the closing checkpoint's time
    key: av.VerifierKey

    @property
    def lines(self) -> list[bytes]:
        return self.data.split(b"\n")[:-1]


def join(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def verify_bytes(data: bytes, keys: list[av.VerifierKey], **kwargs: object) -> dict[str, object]:
    return av.verify_export(io.BytesIO(data), keys=keys, **kwargs)


def entry_hash(line: bytes) -> str:
    return hashlib.sha256(b"pollerdash/audit/entry/v1\n" + line).hexdigest()


def relink(line: bytes, prev: str) -> bytes:
    """The entry with another `prev`, still canonical (what a forger would write)."""
    obj = json.loads(line)
    obj["prev"] = prev
    return av.compact_json(obj)


def edit(line: bytes, **data: object) -> bytes:
    obj = json.loads(line)
    obj["data"].update(data)
    return av.compact_json(obj)
