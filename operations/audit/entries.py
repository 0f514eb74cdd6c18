"""The audit log's writer (docs/DESIGN.md section 8): `append` and `append_many` are the only ones.

An entry is written inside the business transaction, so the decision and its entry commit
together or not at all (fail closed): any problem raises, and the caller's transaction - the
decision itself - rolls back. Since version 2 the entry goes in *pending*: a plain INSERT, no lock
shared with any other writer. The integrator (operations.audit.integrate) later gives it its
`seq` and adds it to the Merkle tree; a pending row is as protected as an integrated one (the same
triggers refuse its UPDATE, but for that one assignment of `seq`, and its DELETE).

Entry bytes are RFC 8785 canonical JSON, produced once here and stored verbatim; the verifier
hashes exactly those bytes (never a re-serialisation of columns, which would let a database-side
change of a JSON column go unnoticed). To keep one canonical shape in every language, an entry
holds integers only (no floats), ASCII keys, RFC 3339 times with six fractional digits, and every
key of its type (null when empty). A version-2 body has no `seq` and no `prev`: its place is its
leaf index in the tree, proven by inclusion proofs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from django.conf import settings
from django.db import connection
from django.utils import timezone

from operations.audit import verify as av
from operations.audit.types import DATA_KEYS
from operations.audit.verify import merkle
from operations.infrastructure import fastsql
from operations.models import AuditEntry

VERSION = 2
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
    """RFC 8785 bytes of an entry. Entries hold ASCII keys, integers, strings, null and booleans
    only (`_clean` refuses the rest), and for those RFC 8785 is exactly the standard library's
    sorted compact encoding (tests/audit/test_audit_canonical.py checks this against the rfc8785
    library): its C encoder is several times faster, and every decision pays for this call."""
    try:
        return av.compact_json(entry)
    except (TypeError, ValueError) as exc:
        raise AuditError(f"entry cannot be canonicalised: {exc}") from None


def _text(value: str) -> str:
    # Lone surrogates (from \ud800 escapes in provider JSON) are not UTF-8: replace, don't fail.
    # Most text is short ASCII, which needs neither check (isascii does not copy the string).
    if not value.isascii():
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
    unknown = data.keys() - keys
    if unknown:
        raise AuditError(f"unknown data keys for {entry_type}: {sorted(unknown)}")
    cleaned = {}
    for key in keys:
        value = data.get(key)
        # The common cases inline: most values are text or null, and every decision pays for this.
        cleaned[key] = _text(value) if type(value) is str else value if value is None else _clean(value, f"data.{key}")
    return cleaned


def _actor(actor: Mapping[str, str]) -> dict[str, str]:
    kind, ident = actor.get("kind"), actor.get("id")
    if not isinstance(kind, str) or not isinstance(ident, str) or not kind or not ident:
        raise AuditError("an actor has a non-empty kind and id")
    if len(kind) > MAX_ACTOR_CHARS or len(ident) > MAX_ACTOR_CHARS:
        raise AuditError("actor kind or id too long")
    return {"kind": _text(kind), "id": _text(ident)}


@dataclass(frozen=True)
class NewEntry:
    """One entry to append with `append_many` (the same fields as `append`)."""

    entry_type: str
    actor: Mapping[str, str]
    operation_id: str | None
    data: Mapping[str, object]
    at: datetime | None = None


@dataclass(slots=True)
class Appended:
    """An entry as `append` wrote it: its primary key (what a decision or card activity records) and
    the values of its row. A plain object rather than an AuditEntry instance: building a model
    instance costs more client CPU than anything else in the append but the statement, and every
    decision pays for it while callers only read these attributes (load an AuditEntry for more)."""

    id: int
    log: str
    entry_hash: str
    body: bytes
    at: datetime
    type: str
    operation_id: str

    @property
    def pk(self) -> int:
        return self.id


# A pending entry's row: the INSERT's columns, in this order. `seq` and `prev_hash` are left out:
# null, as a pending version-2 entry has them.
_COLUMNS = ("log", "entry_hash", "body", "at", "type", "operation_id")
_Row = tuple[str, str, bytes, datetime, str, str]


def _pending(entry: NewEntry, *, log: str) -> _Row:
    operation_id = entry.operation_id
    if operation_id is not None and (not isinstance(operation_id, str) or len(operation_id) > OPERATION_ID_CHARS):
        raise AuditError("operation_id must be a string of at most 32 characters")
    when = entry.at or timezone.now()
    body = canonical(
        {
            "v": VERSION,
            "log": log,
            "at": iso(when),
            "type": entry.entry_type,
            "actor": _actor(entry.actor),
            "operation_id": operation_id,
            "data": build_data(entry.entry_type, entry.data),
        }
    )
    if len(body) > MAX_BODY_BYTES:
        raise AuditError(f"{entry.entry_type} entry of {len(body)} bytes exceeds {MAX_BODY_BYTES}")
    return (log, merkle.leaf_hash(body).hex(), body, when, entry.entry_type, operation_id or "")


def append_many(*, entries: Sequence[NewEntry]) -> list[Appended]:
    """Append entries pending integration, with one INSERT. Must run inside the business
    transaction: the entries commit with the decision or not at all. Their `seq` is null until the
    integrator adds them to the tree (operations.audit.integrate)."""
    if not connection.in_atomic_block:
        raise AuditError("audit.append must run inside the decision's transaction")
    log = settings.AUDIT_LOG_NAME
    rows = [_pending(entry, log=log) for entry in entries]
    if not rows:
        return []
    # Both backends return the ids of a multi-row INSERT in VALUES order (what bulk_create relies on).
    return [Appended(row_id, *row) for row, row_id in zip(rows, _insert(rows), strict=True)]


@lru_cache(maxsize=8)  # one-entry appends, and a few batch sizes
def _insert_sql(count: int) -> str:
    placeholders = ", ".join(["(" + ", ".join(["%s"] * len(_COLUMNS)) + ")"] * count)
    return f"INSERT INTO {AuditEntry._meta.db_table} ({', '.join(_COLUMNS)}) VALUES {placeholders} RETURNING id"


def _insert(rows: list[_Row]) -> list[int]:
    """One INSERT ... RETURNING id of the rows; their ids. Plain SQL rather than bulk_create: every
    decision pays for this statement, and the ORM's compilation cost as much as the insert itself;
    on PostgreSQL it goes through psycopg's own cursor (fastsql.fetchall_bound)."""
    adapt_time = connection.ops.adapt_datetimefield_value
    values: list[object] = []
    for log, entry_hash, body, at, entry_type, operation_id in rows:
        values += [log, entry_hash, body, adapt_time(at), entry_type, operation_id]
    return [row_id for (row_id,) in fastsql.fetchall_bound(_insert_sql(len(rows)), values)]


def append(
    *,
    entry_type: str,
    actor: Mapping[str, str],
    operation_id: str | None,
    data: Mapping[str, object],
    at: datetime | None = None,
) -> Appended:
    """Append one entry, pending integration. Must run inside the business transaction."""
    new = NewEntry(entry_type=entry_type, actor=actor, operation_id=operation_id, data=data, at=at)
    return append_many(entries=[new])[0]


SYSTEM_CONTROLLER = {"kind": "system", "id": "controller"}


def user_actor(user: object) -> dict[str, str]:
    return {"kind": "user", "id": str(getattr(user, "get_username", lambda: str(user))())}
