"""The archive ledger: which archived ranges the log itself vouches for (docs/DESIGN.md section 8).

An AuditArchive row says "entries first..last are in this file, with this digest and this root".
On its own that is a claim anyone able to write the table could make (issue 24: a row the
application role inserted made the owner's routine `archive` delete entries never archived). So a
row counts only when the log records it too: `manage.py archive` appends an `audit.archived` entry
with exactly the row's fields in the same transaction, and that entry is hashed into the tree and
signed like any other. Here:

- `read(log)` walks the rows from the first entry on: a row continues the ledger when it starts
  right after the one before it and its `audit.archived` entry is integrated after its range - or
  no longer stored because a later archive took it (the entries right after the row were removed,
  which only the guarded prune does, and only for a range whose own record it found). The end of
  that walk is where full exports, the signer and `audit_verify` start (`upto`).
- a row whose entry is still pending ends the walk without a problem: the integrator adds it
  within a second. Any other row is a problem (`UNRECORDED_ARCHIVE`): it vouches for nothing,
  moves no export or check past any entry, and is reported by `audit_verify`, the signer and
  /system/.
- `database.may_record()` says whether this database role may add rows (PostgreSQL: the table's
  owner, as the trigger of migration 0026 enforces; SQLite has no roles: anyone who can write the
  file can write every table, and only the checks above stand).

An `audit.archived` entry without a row vouches for nothing either: entries are the application's to
append, rows the owner's to insert, and only both together count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from django.db.models import Min

from operations.models import AuditArchive, AuditEntry

RECORD_TYPE = "audit.archived"
# audit_verify's reason, the signer's heartbeat and /system/ name a row the log does not record so.
UNRECORDED_ARCHIVE = "UNRECORDED_ARCHIVE"


@dataclass(frozen=True)
class Record:
    """An `audit.archived` entry: its place (None while pending) and its exact bytes."""

    pk: int
    seq: int | None
    body: bytes


@dataclass(frozen=True)
class Vouched:
    row: AuditArchive
    # The entry that records the row; None once a later archive took it (it is in that file).
    record: Record | None


@dataclass(frozen=True)
class Ledger:
    upto: int  # entries 1..upto are archived, as the log itself records
    vouched: list[Vouched] = field(default_factory=list)
    pending: list[AuditArchive] = field(default_factory=list)  # recorded by an entry not integrated yet
    problems: list[str] = field(default_factory=list)  # one sentence per row the log does not vouch for

    def report(self) -> str:
        return f"{UNRECORDED_ARCHIVE}: " + "; ".join(self.problems)


def record_data(row: AuditArchive) -> dict[str, object]:
    """What the row's `audit.archived` entry holds as its `data`, exactly."""
    return {
        "first_seq": row.first_seq,
        "last_seq": row.last_seq,
        "name": row.name,
        "sha256": row.sha256,
        "bytes": row.size_bytes,
        "root": row.root,
    }


def _data(body: object, *, log: str) -> dict[str, object] | None:
    """The `data` of a stored `audit.archived` entry; None for bytes that are not one (the type
    column is the appender's word, and anyone who may append may append junk under it)."""
    # Typing: the driver hands a bytea column back as bytes or memoryview.
    raw = body.encode() if isinstance(body, str) else bytes(body)  # type: ignore[call-overload]
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("type") != RECORD_TYPE or entry.get("log") != log:
        return None
    data = entry.get("data")
    return data if isinstance(data, dict) else None


def _describe(row: AuditArchive) -> str:
    return f"archive row {row.pk} (entries {row.first_seq}-{row.last_seq}, {row.name})"


def read(log: str) -> Ledger:
    rows = list(AuditArchive.objects.filter(log=log).order_by("first_seq", "pk"))
    if not rows:
        return Ledger(upto=0)
    records = [
        (Record(pk, seq, bytes(body)), _data(body, log=log))
        for pk, seq, body in AuditEntry.objects.filter(log=log, type=RECORD_TYPE).values_list("pk", "seq", "body")
    ]
    lowest = AuditEntry.objects.filter(log=log, seq__isnull=False).aggregate(seq=Min("seq"))["seq"]
    vouched: list[Vouched] = []
    pending: list[AuditArchive] = []
    problems: list[str] = []
    upto, broken = 0, None
    for position, row in enumerate(rows):
        if broken is not None:
            problems.append(f"{_describe(row)} comes after {broken}, which the log does not vouch for")
            continue
        if row.first_seq != upto + 1 or row.last_seq < row.first_seq:
            problems.append(f"{_describe(row)} does not continue the archives before it (which end at {upto})")
            broken = _describe(row)
            continue
        wanted = record_data(row)
        matching = [record for record, data in records if data == wanted]
        integrated = [record for record in matching if record.seq is not None and record.seq > row.last_seq]
        taken_later = position < len(rows) - 1 and (lowest is None or lowest > row.last_seq + 1)
        if integrated:
            vouched.append(Vouched(row, min(integrated, key=lambda record: record.seq or 0)))
        elif taken_later and not matching:
            vouched.append(Vouched(row, None))
        elif any(record.seq is None for record in matching):
            pending.append(row)
            broken = _describe(row)
            continue
        else:
            problems.append(
                f"{_describe(row)} has no matching {RECORD_TYPE} entry in the log: a forged or damaged archive record"
            )
            broken = _describe(row)
            continue
        upto = row.last_seq
    return Ledger(upto=upto, vouched=vouched, pending=pending, problems=problems)


def archived_upto(log: str) -> int:
    """The size up to which entries were archived (and may have been pruned), as the log records
    it: 0 when nothing was. The tree's nodes still cover those entries; their bodies are in the
    archive files."""
    return read(log).upto
