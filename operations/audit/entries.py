"""The hash-chained audit log: one global chain of every decision (docs/DESIGN.md section 8).

`append` is the only writer. It runs last inside the business transaction, under a row lock on
the chain head, so the decision and its entry commit together or not at all (fail closed): any
problem raises, and the caller's transaction - the decision itself - rolls back.

Entry bytes are RFC 8785 canonical JSON, produced once here and stored verbatim; the verifier
hashes exactly those bytes (never a re-serialisation of columns, which
would let a database-side change of a JSON column go unnoticed).
To keep one canonical shape in every language, an entry holds integers only (no floats), ASCII
keys, RFC 3339 times with six fractional digits, and every key of its type (null when empty).

Concurrency: on PostgreSQL the head row is locked with SELECT ... FOR UPDATE, which re-reads the
newest head after waiting - correct only in READ COMMITTED, so any other isolation level is
refused (a REPEATABLE READ snapshot would read a stale head). UNIQUE (log, seq) and UNIQUE (log,
prev_hash) reject a fork even if a writer bypassed the lock. On SQLite, IMMEDIATE transactions
serialise every writer on the database lock. Before linking, the head row is checked against the
stored last entry, so a tampered head row stops appends instead of forking the chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import rfc8785
from django.conf import settings
from django.db import connection
from django.utils import timezone

from operations.audit.types import DATA_KEYS
from operations.audit.verify import ENTRY_TAG, GENESIS_PREV
from operations.models import AuditEntry, AuditHead

VERSION = 1
# Longer strings (provider text, comments) are cut with a marker: an entry stays bounded and a
# provider cannot block the recording of a decision by answering with a huge state string.
MAX_TEXT = 4000
MAX_BODY_BYTES = 64 * 1024
MAX_ACTOR_CHARS = 200
OPERATION_ID_CHARS = 32


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
    try:
        return rfc8785.dumps(entry)
    except rfc8785.CanonicalizationError as exc:
        raise AuditError(f"entry cannot be canonicalised: {exc}") from None


def entry_hash(body: bytes) -> str:
    return hashlib.sha256(ENTRY_TAG + body).hexdigest()


def _text(value: str) -> str:
    # Lone surrogates (from \ud800 escapes in provider JSON) are not UTF-8: replace, don't fail.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    if len(value) > MAX_TEXT:
        value = f"{value[:MAX_TEXT]}… [{len(value) - MAX_TEXT} more characters not recorded]"
    return value


def _clean(value: object, path: str) -> object:
    """The value as it will be hashed; AuditError for anything without one canonical form."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > 2**53 - 1:
            raise AuditError(f"integer at {path} is outside the interoperable range")
        return value
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, float):
        # Integers only: floats are the main cross-implementation hazard of canonical JSON.
        raise AuditError(f"float at {path}: audit entries hold integers only")
    if isinstance(value, dict):
        cleaned = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key.isascii():
                raise AuditError(f"key {key!r} at {path}: keys are ASCII strings")
            cleaned[key] = _clean(item, f"{path}.{key}")
        return cleaned
    if isinstance(value, list | tuple):
        return [_clean(item, f"{path}[{index}]") for index, item in enumerate(value)]
    raise AuditError(f"{type(value).__name__} at {path} is not JSON (format times with audit.iso)")


def build_data(entry_type: str, data: Mapping[str, object]) -> dict[str, object]:
    try:
        keys = DATA_KEYS[entry_type]
    except KeyError:
        raise AuditError(f"unknown audit entry type {entry_type!r}") from None
    unknown = set(data) - set(keys)
    if unknown:
        raise AuditError(f"unknown data keys for {entry_type}: {sorted(unknown)}")
    return {key: _clean(data.get(key), f"data.{key}") for key in keys}


def _actor(actor: Mapping[str, str]) -> dict[str, str]:
    kind, ident = actor.get("kind"), actor.get("id")
    if not isinstance(kind, str) or not isinstance(ident, str) or not kind or not ident:
        raise AuditError("an actor has a non-empty kind and id")
    if len(kind) > MAX_ACTOR_CHARS or len(ident) > MAX_ACTOR_CHARS:
        raise AuditError("actor kind or id too long")
    return {"kind": _text(kind), "id": _text(ident)}


_HEAD_SQL = {
    "postgresql": (
        "SELECT seq, head_hash, current_setting('transaction_isolation') "
        "FROM operations_audithead WHERE log = %s FOR UPDATE"
    ),
    "sqlite": "SELECT seq, head_hash, 'read committed' FROM operations_audithead WHERE log = %s",
}
_CREATE_HEAD_SQL = {
    "postgresql": (
        "INSERT INTO operations_audithead (log, seq, head_hash) VALUES (%s, 0, %s) ON CONFLICT (log) DO NOTHING"
    ),
    "sqlite": "INSERT OR IGNORE INTO operations_audithead (log, seq, head_hash) VALUES (%s, 0, %s)",
}
# The head check reads the entry in a later statement than the lock on purpose: after waiting for
# the lock, PostgreSQL re-reads the locked row but would evaluate anything else in that statement
# against its older snapshot, missing the entry the previous holder just committed. In READ
# COMMITTED a new statement sees it.
_STORED_HASH_SQL = "SELECT entry_hash FROM operations_auditentry WHERE log = %s AND seq = %s"
# PostgreSQL: the head check, the insert and the head update in one round trip while the lock is
# held (the lock is held through COMMIT, so round trips under it bound the append rate).
_POSTGRES_WRITE_SQL = """
WITH checked AS (
    SELECT 1 FROM operations_auditentry WHERE log = %(log)s AND seq = %(head_seq)s AND entry_hash = %(prev)s
    UNION ALL
    SELECT 1 WHERE %(head_seq)s = 0 AND %(prev)s = %(genesis)s
), inserted AS (
    INSERT INTO operations_auditentry (log, seq, prev_hash, entry_hash, body, at, type, operation_id)
    SELECT %(log)s, %(seq)s, %(prev)s, %(hash)s, %(body)s, %(at)s, %(type)s, %(operation_id)s
    WHERE EXISTS (SELECT 1 FROM checked)
    RETURNING id
), moved AS (
    UPDATE operations_audithead SET seq = %(seq)s, head_hash = %(hash)s
    WHERE log = %(log)s AND EXISTS (SELECT 1 FROM inserted)
)
SELECT id FROM inserted
"""


def _lock_head(log: str) -> tuple[int, str]:
    """Lock the chain head row for this transaction and return (seq, head_hash)."""
    vendor = connection.vendor
    if vendor not in _HEAD_SQL:
        raise AuditError(f"audit append is not implemented for {vendor}")
    with connection.cursor() as cursor:
        for _ in range(2):
            cursor.execute(_HEAD_SQL[vendor], [log])
            row = cursor.fetchone()
            if row is not None:
                break
            cursor.execute(_CREATE_HEAD_SQL[vendor], [log, GENESIS_PREV])
        else:
            raise AuditError("the audit head row could not be created")
    seq, head_hash, isolation = row
    if isolation != "read committed":
        # Under REPEATABLE READ or SERIALIZABLE the head read after the lock wait would come from
        # a stale snapshot: refuse rather than risk a fork.
        raise AuditError(f"audit append needs READ COMMITTED, not {isolation}")
    return seq, head_hash


def _head_mismatch(head_seq: int) -> AuditError:
    return AuditError(
        f"the audit head (seq {head_seq}) disagrees with the stored chain; nothing is appended until "
        "`manage.py audit_verify` passes"
    )


def _write(entry: AuditEntry, *, head_seq: int) -> AuditEntry:
    """Insert the entry and move the head, after checking the head names the stored last entry."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                _POSTGRES_WRITE_SQL,
                {
                    "log": entry.log,
                    "head_seq": head_seq,
                    "prev": entry.prev_hash,
                    "genesis": GENESIS_PREV,
                    "seq": entry.seq,
                    "hash": entry.entry_hash,
                    "body": entry.body,
                    "at": entry.at,
                    "type": entry.type,
                    "operation_id": entry.operation_id,
                },
            )
            row = cursor.fetchone()
        if row is None:
            raise _head_mismatch(head_seq)
        entry.pk = row[0]
        entry._state.adding = False
        entry._state.db = connection.alias
        return entry
    with connection.cursor() as cursor:
        cursor.execute(_STORED_HASH_SQL, [entry.log, head_seq])
        stored = cursor.fetchone()
    stored_hash = stored[0] if stored is not None else None
    expected = None if head_seq == 0 else entry.prev_hash
    if stored_hash != expected or (head_seq == 0 and entry.prev_hash != GENESIS_PREV):
        raise _head_mismatch(head_seq)
    entry.save(force_insert=True)
    AuditHead.objects.filter(log=entry.log).update(seq=entry.seq, head_hash=entry.entry_hash)
    return entry


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
    if operation_id is not None and (not isinstance(operation_id, str) or len(operation_id) > OPERATION_ID_CHARS):
        raise AuditError("operation_id must be a string of at most 32 characters")
    log = settings.AUDIT_LOG_NAME
    full_data = build_data(entry_type, data)
    actor_obj = _actor(actor)
    when = at or timezone.now()
    at_text = iso(when)
    head_seq, head_hash = _lock_head(log)
    seq = head_seq + 1
    body = canonical(
        {
            "v": VERSION,
            "log": log,
            "seq": seq,
            "prev": head_hash,
            "at": at_text,
            "type": entry_type,
            "actor": actor_obj,
            "operation_id": operation_id,
            "data": full_data,
        }
    )
    if len(body) > MAX_BODY_BYTES:
        raise AuditError(f"{entry_type} entry of {len(body)} bytes exceeds {MAX_BODY_BYTES}")
    entry = AuditEntry(
        log=log,
        seq=seq,
        prev_hash=head_hash,
        entry_hash=entry_hash(body),
        body=body,
        at=when,
        type=entry_type,
        operation_id=operation_id or "",
    )
    return _write(entry, head_seq=head_seq)


SYSTEM_CONTROLLER = {"kind": "system", "id": "controller"}


def user_actor(user: object) -> dict[str, str]:
    return {"kind": "user", "id": str(getattr(user, "get_username", lambda: str(user))())}


@dataclass(frozen=True)
class NewEntry:
    """One entry for `append_many`: the arguments `append` takes."""

    entry_type: str
    actor: Mapping[str, str]
    operation_id: str | None
    data: Mapping[str, object]
    at: datetime | None = None


_MANY_ROW = "(%s, %s::bigint, %s, %s, %s::bytea, %s::timestamptz, %s, %s)"


def append_many(*, entries: Sequence[NewEntry]) -> list[AuditEntry]:
    """Append several entries in order under one lock of the head: one INSERT on PostgreSQL.

    Same rules as `append`: inside the business transaction, as its last writes; fails closed.
    """
    if not connection.in_atomic_block:
        raise AuditError("audit.append_many must run inside the decision's transaction")
    if connection.vendor != "postgresql" or len(entries) < 2:
        return [
            append(entry_type=e.entry_type, actor=e.actor, operation_id=e.operation_id, data=e.data, at=e.at)
            for e in entries
        ]
    log = settings.AUDIT_LOG_NAME
    prepared = []
    for e in entries:
        if e.operation_id is not None and (
            not isinstance(e.operation_id, str) or len(e.operation_id) > OPERATION_ID_CHARS
        ):
            raise AuditError("operation_id must be a string of at most 32 characters")
        when = e.at or timezone.now()
        prepared.append((e, build_data(e.entry_type, e.data), _actor(e.actor), when, iso(when)))
    head_seq, head_hash = _lock_head(log)
    rows, params, prev = [], [], head_hash
    for offset, (e, data, actor, when, at_text) in enumerate(prepared):
        seq = head_seq + 1 + offset
        body = canonical(
            {
                "v": VERSION,
                "log": log,
                "seq": seq,
                "prev": prev,
                "at": at_text,
                "type": e.entry_type,
                "actor": actor,
                "operation_id": e.operation_id,
                "data": data,
            }
        )
        if len(body) > MAX_BODY_BYTES:
            raise AuditError(f"{e.entry_type} entry of {len(body)} bytes exceeds {MAX_BODY_BYTES}")
        row = AuditEntry(
            log=log,
            seq=seq,
            prev_hash=prev,
            entry_hash=entry_hash(body),
            body=body,
            at=when,
            type=e.entry_type,
            operation_id=e.operation_id or "",
        )
        rows.append(row)
        params += [log, seq, prev, row.entry_hash, body, when, e.entry_type, row.operation_id]
        prev = row.entry_hash
    sql = f"""
WITH checked AS (
    SELECT 1 FROM operations_auditentry WHERE log = %s AND seq = %s AND entry_hash = %s
    UNION ALL
    SELECT 1 WHERE %s = 0 AND %s = %s
), inserted AS (
    INSERT INTO operations_auditentry (log, seq, prev_hash, entry_hash, body, at, type, operation_id)
    SELECT * FROM (VALUES {", ".join([_MANY_ROW] * len(rows))}) AS v
    WHERE EXISTS (SELECT 1 FROM checked)
    RETURNING id, seq
), moved AS (
    UPDATE operations_audithead SET seq = %s, head_hash = %s WHERE log = %s AND EXISTS (SELECT 1 FROM inserted)
)
SELECT id, seq FROM inserted
"""
    head = [log, head_seq, head_hash, head_seq, head_hash, GENESIS_PREV]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*head, *params, rows[-1].seq, rows[-1].entry_hash, log])
        ids = dict((seq, pk) for pk, seq in cursor.fetchall())
    if len(ids) != len(rows):
        raise _head_mismatch(head_seq)
    for row in rows:
        row.pk = ids[row.seq]
        row._state.adding = False
        row._state.db = connection.alias
    return rows
