"""The hash-chained audit log: one global chain of every decision (DESIGN.md section 8).

`append` is the only writer. It runs last inside the business transaction, under a row lock on
the chain head, so the decision and its entry commit together or not at all (fail closed).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime

import rfc8785
from django.conf import settings
from django.db import connection
from django.utils import timezone

from operations.audit_types import DATA_KEYS
from operations.models import AuditEntry, AuditHead

ENTRY_TAG = b"pollerdash/audit/entry/v1\n"
GENESIS_PREV = "0" * 64
VERSION = 1


class AuditError(Exception):
    """The entry could not be appended; the surrounding decision must not commit."""


def iso(value: datetime | None) -> str | None:
    """RFC 3339 UTC with exactly six fractional digits: the only time format inside entries."""
    if value is None:
        return None
    if value.tzinfo is None:
        raise AuditError("naive datetime in an audit entry")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def canonical(entry: Mapping[str, object]) -> bytes:
    return rfc8785.dumps(entry)


def entry_hash(body: bytes) -> str:
    return hashlib.sha256(ENTRY_TAG + body).hexdigest()


def _check_values(value: object, path: str) -> None:
    # Integers only: floats are the main cross-implementation hazard of canonical JSON.
    if isinstance(value, float):
        raise AuditError(f"float at {path}: audit entries hold integers only")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise AuditError(f"non-string key at {path}")
            _check_values(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_values(item, f"{path}[{index}]")
    elif not (value is None or isinstance(value, str | int | bool)):
        raise AuditError(f"{type(value).__name__} at {path} is not JSON")


def build_data(entry_type: str, data: Mapping[str, object]) -> dict[str, object]:
    try:
        keys = DATA_KEYS[entry_type]
    except KeyError:
        raise AuditError(f"unknown audit entry type {entry_type!r}") from None
    unknown = set(data) - set(keys)
    if unknown:
        raise AuditError(f"unknown data keys for {entry_type}: {sorted(unknown)}")
    full = {key: data.get(key) for key in keys}
    _check_values(full, "data")
    return full


def _lock_head(log: str) -> tuple[int, str]:
    """Lock the chain head row for this transaction and return (seq, head_hash)."""
    if connection.vendor != "postgresql":
        # SQLite: IMMEDIATE transactions already serialise every writer on the database lock.
        head, _ = AuditHead.objects.get_or_create(log=log, defaults={"seq": 0, "head_hash": GENESIS_PREV})
        return head.seq, head.head_hash
    with connection.cursor() as cursor:
        for _ in range(2):
            cursor.execute(
                "SELECT seq, head_hash, current_setting('transaction_isolation') "
                "FROM operations_audithead WHERE log = %s FOR UPDATE",
                [log],
            )
            row = cursor.fetchone()
            if row is not None:
                seq, head_hash, isolation = row
                if isolation != "read committed":
                    # Under REPEATABLE READ the head read after the lock wait would be a stale
                    # snapshot: refuse rather than risk a fork.
                    raise AuditError(f"audit append needs READ COMMITTED, not {isolation}")
                return seq, head_hash
            cursor.execute(
                "INSERT INTO operations_audithead (log, seq, head_hash) VALUES (%s, 0, %s) "
                "ON CONFLICT (log) DO NOTHING",
                [log, GENESIS_PREV],
            )
    raise AuditError("the audit head row could not be created")


def append(
    *,
    entry_type: str,
    actor: Mapping[str, str],
    operation_id: str | None,
    data: Mapping[str, object],
    at: datetime | None = None,
) -> AuditEntry:
    """Append one entry to the chain. Must run inside the business transaction, as its last write."""
    if not connection.in_atomic_block:
        raise AuditError("audit.append must run inside the decision's transaction")
    log = settings.AUDIT_LOG_NAME
    full_data = build_data(entry_type, data)
    actor_obj = {"kind": str(actor["kind"]), "id": str(actor["id"])}
    when = at or timezone.now()
    head_seq, head_hash = _lock_head(log)
    seq = head_seq + 1
    body = canonical(
        {
            "v": VERSION,
            "log": log,
            "seq": seq,
            "prev": head_hash,
            "at": iso(when),
            "type": entry_type,
            "actor": actor_obj,
            "operation_id": operation_id,
            "data": full_data,
        }
    )
    digest = entry_hash(body)
    entry = AuditEntry.objects.create(
        log=log,
        seq=seq,
        prev_hash=head_hash,
        entry_hash=digest,
        body=body,
        at=when,
        type=entry_type,
        operation_id=operation_id or "",
    )
    AuditHead.objects.filter(log=log).update(seq=seq, head_hash=digest)
    return entry


SYSTEM_CONTROLLER = {"kind": "system", "id": "controller"}
SYSTEM_DISPATCHER = {"kind": "system", "id": "dispatcher"}


def user_actor(user: object) -> dict[str, str]:
    return {"kind": "user", "id": str(getattr(user, "get_username", lambda: str(user))())}
