"""Reading and verifying the stored version-1 hash chain (the entries before the switch to the tree).

Shared by the signer (operations.audit.checkpoints), the tree check and `manage.py audit_verify`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db import models

from operations.audit import verify as av
from operations.models import AuditCheckpoint, AuditEntry

# Entries read per query while verifying: bounded memory whatever the segment length.
VERIFY_CHUNK = 2000


# --- reading the log ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredEntry:
    seq: int
    prev_hash: str | None
    entry_hash: str
    body: bytes
    type: str
    operation_id: str
    at: datetime


def stored_bytes(body: object) -> bytes:
    """The body column as bytes. Only audit.append writes it (always bytes), but someone editing the
    table by hand may leave text behind (SQLite stores whatever it is given): that must read as
    tampering, which the hash check then reports, not crash the verifier or the signer."""
    if isinstance(body, str):
        return body.encode("utf-8", errors="surrogateescape")
    # Typing: the driver returns bytes or memoryview for a bytea column.
    return bytes(body)  # type: ignore[call-overload]


def iter_entries(*, log: str, after: int, upto: int | None = None) -> Iterator[StoredEntry]:
    """Stored entries in seq order, in bounded chunks (keyset pagination)."""
    cursor = after
    while True:
        query = AuditEntry.objects.filter(log=log, seq__gt=cursor).order_by("seq")
        if upto is not None:
            query = query.filter(seq__lte=upto)
        rows = list(
            query.values_list("seq", "prev_hash", "entry_hash", "body", "type", "operation_id", "at")[:VERIFY_CHUNK]
        )
        for seq, prev_hash, digest, body, entry_type, operation_id, at in rows:
            # Typing: the query reads integrated entries only: seq IS NOT NULL.
            yield StoredEntry(seq, prev_hash, digest, stored_bytes(body), entry_type, operation_id, at)  # type: ignore[arg-type]
        if len(rows) < VERIFY_CHUNK:
            return
        # Typing: the query reads integrated entries only: seq IS NOT NULL.
        cursor = rows[-1][0]  # type: ignore[assignment]


def feed_stored_entry(verifier: av.ChainVerifier, row: StoredEntry) -> None:
    """Verify one stored row: its bytes in the chain, and its copied columns against the bytes
    (stories and operation exports select rows by those columns, so they must not drift)."""
    expected_prev = verifier.head
    verifier.entry(row.body, number=row.seq)
    body = verifier.last_entry or {}
    if (
        verifier.head != row.entry_hash
        or row.prev_hash != expected_prev
        or verifier.head_seq != row.seq
        or row.type != body.get("type")
        or row.operation_id != (body.get("operation_id") or "")
        or av.format_time(row.at) != body.get("at")
    ):
        raise av.VerifyFailure(
            av.HASH_MISMATCH,
            f"the stored columns of entry {row.seq} disagree with its hashed bytes",
            seq=row.seq,
            line=row.seq,
        )


def verify_anchor(checkpoint: AuditCheckpoint, keys: list[av.VerifierKey]) -> av.Note:
    """The stored checkpoint's note is well-formed, signed by a trusted key, agrees with its row,
    and its head is the stored hash of entry `size` (whose bytes still hash to it)."""
    try:
        note = av.parse_note(checkpoint.note)
    except ValueError as exc:
        raise av.VerifyFailure(av.PARSE, f"stored checkpoint {checkpoint.pk}: {exc}", seq=checkpoint.size) from None
    if keys:
        av.check_note_signature(note, keys)
    if (note.origin, note.size, note.head) != (checkpoint.log, checkpoint.size, checkpoint.head_hash):
        raise av.VerifyFailure(
            av.CHECKPOINT_MISMATCH, f"stored checkpoint {checkpoint.pk} disagrees with its note", seq=checkpoint.size
        )
    if checkpoint.size == 0:
        if note.head != av.GENESIS_PREV:
            raise av.VerifyFailure(av.CHECKPOINT_MISMATCH, "the empty log's head is not genesis", seq=0)
        return note
    row = AuditEntry.objects.filter(log=checkpoint.log, seq=checkpoint.size).values_list("entry_hash", "body").first()
    if row is None:
        raise av.VerifyFailure(
            av.SEQ_GAP, f"entry {checkpoint.size}, covered by a checkpoint, is missing", seq=checkpoint.size
        )
    digest, body = row
    if digest != note.head or hashlib.sha256(av.ENTRY_TAG + stored_bytes(body)).hexdigest() != note.head:
        raise av.VerifyFailure(
            av.HASH_MISMATCH, f"entry {checkpoint.size} no longer hashes to its signed head", seq=checkpoint.size
        )
    return note


@dataclass(frozen=True)
class Segment:
    size: int
    head: str
    entries: int


def verify_segment(
    *, log: str, anchor: AuditCheckpoint | None, keys: list[av.VerifierKey], upto: int | None = None
) -> Segment:
    """Verify the chain after `anchor` (from seq 1 when None) up to `upto`; raises VerifyFailure."""
    verifier = av.ChainVerifier(keys=keys, log=log, scope="range", strict=True, allow_unsigned_tail=True)
    if anchor is not None:
        note = verify_anchor(anchor, keys)
        verifier.head_seq, verifier.head = note.size, note.head
    for row in iter_entries(log=log, after=verifier.head_seq, upto=upto):
        feed_stored_entry(verifier, row)
    return Segment(size=verifier.head_seq, head=verifier.head, entries=verifier.entries)


def iter_checkpoints(log: str) -> Iterator[AuditCheckpoint]:
    """Every stored checkpoint row in (size, insertion) order, in bounded chunks."""
    last = (-1, 0)
    while True:
        rows = list(
            AuditCheckpoint.objects.filter(log=log)
            .filter(models.Q(size__gt=last[0]) | models.Q(size=last[0], pk__gt=last[1]))
            .order_by("size", "pk")[:VERIFY_CHUNK]
        )
        yield from rows
        if len(rows) < VERIFY_CHUNK:
            return
        last = (rows[-1].size, rows[-1].pk)
