"""Retention of the audit log (`manage.py archive --before DATE`, docs/DESIGN.md section 8).

An archive is a sealed range: a full format-2 export of the entries after the previous archive up
to a signed tree checkpoint (the seal) older than DATE, with their checkpoints and consistency
proofs, opening with the tree's right edge where the previous archive ended. It is written to a
temporary file, verified there (signatures, every root, the seal's root against the stored tree),
saved through a Django storage backend (a local directory by default, `STORAGES["audit_archive"]`
when configured: django-storages for S3-compatible stores), read back and compared byte for byte by
SHA-256, recorded in the log itself (an `audit.archived` entry and an AuditArchive row, committed
together), and only then are its entries removed (`prune_archived`), through the guarded database
function pollerdash_audit_prune, PRUNE_CHUNK entries per short transaction: a million-row DELETE in
one transaction would hold its row locks, WAL and the per-row trigger's work in one piece while the
dispatcher polls. Every state between two chunks is a valid log: the entries archived but not yet
removed are simply still there (full exports, the signer and `audit_verify` start at the archived
size; an operation export proves them like any other entry), and the next `prune_archived` (every
`manage.py archive` runs it) removes what an interrupted one left. The tree's nodes and the
checkpoints stay, so every proof for an entry still in the database stays valid, and
`pollerdash-audit-verify ARCHIVES... EXPORT` checks the archives and a newer full export together.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from django.conf import settings
from django.core.files import File
from django.core.files.storage import FileSystemStorage, InvalidStorageError, Storage, storages
from django.db import connection, transaction
from django.db.models import Min
from django.utils import timezone

from operations.audit import checkpoints, export, tree
from operations.audit import entries as audit
from operations.audit import verify as av
from operations.models import AuditArchive, AuditCheckpoint, AuditEntry

ARCHIVER = {"kind": "system", "id": "archiver"}
T = TypeVar("T")
# Entries removed per transaction: about 0.1 s of work each, so no lock, snapshot or WAL burst of
# the prune is long enough to show in dispatch lag (bench/retention.py).
PRUNE_CHUNK = 10_000


class ArchiveError(Exception):
    """Nothing was removed: the archive could not be written, read back or verified."""


@dataclass(frozen=True)
class Archived:
    name: str
    first_seq: int
    last_seq: int
    sha256: str
    size_bytes: int


def archive_storage(directory: str | None = None) -> Storage:
    if directory:
        return FileSystemStorage(location=directory)
    try:
        return storages["audit_archive"]
    except InvalidStorageError:
        return FileSystemStorage(location=Path(settings.BASE_DIR) / settings.AUDIT_ARCHIVE_DIR)


def _seal(*, log: str, start: int, before: datetime, signed: AuditCheckpoint) -> AuditCheckpoint | None:
    """The newest plain tree checkpoint whose entries after `start` were all written before `before`."""
    first_recent = (
        AuditEntry.objects.filter(log=log, seq__gt=start, seq__isnull=False, at__gte=before).aggregate(seq=Min("seq"))[
            "seq"
        ]
        or signed.size + 1
    )
    limit = min(first_recent - 1, signed.size)
    return (
        AuditCheckpoint.objects.filter(
            log=log, tree=True, chain_head="", size__gt=start, size__lte=limit, pk__lte=signed.pk
        )
        .order_by("-size", "-pk")
        .first()
    )


def _verify_file(path: Path, *, seal: AuditCheckpoint, start: int) -> dict[str, object]:
    keys = checkpoints.trusted_keys()
    if not keys:
        raise ArchiveError(
            "no key to verify the archive with: set AUDIT_VERIFIER_KEYS_FILE to the verifier key lines "
            "(manage.py audit_keys on the signer's host prints them)"
        )
    try:
        with open(path, "rb") as handle:
            result = av.verify_export(handle, keys=keys, strict=True)
    except av.VerifyFailure as exc:
        raise ArchiveError(f"the archive does not verify: {exc.reason}: {exc.detail}") from None
    if (result["size"], result["root"], result["from"]) != (seal.size, seal.head_hash, start):
        raise ArchiveError("the archive does not close at its seal")
    return result


def _stored(step: Callable[[], T]) -> T:
    """A storage step; whatever the backend raises (an S3 refusal, a full disk, a network error)
    becomes an ArchiveError naming it, so the command stops before removing anything."""
    try:
        return step()
    except ArchiveError:
        raise
    except Exception as exc:  # noqa: BLE001 - every backend has its own exception classes
        raise ArchiveError(f"the archive storage failed, nothing removed: {type(exc).__name__}: {exc}") from None


def _read_back(storage: Storage, name: str) -> tuple[str, int]:
    with storage.open(name, "rb") as stored:
        return _digest(stored)


def _digest(handle: object) -> tuple[str, int]:
    sha, count = hashlib.sha256(), 0
    for chunk in iter(lambda: handle.read(1 << 20), b""):  # type: ignore[attr-defined]
        sha.update(chunk)
        count += len(chunk)
    return sha.hexdigest(), count


def _prune(*, log: str, after: int, upto: int) -> int:
    if connection.vendor != "postgresql":
        removed, _ = AuditEntry.objects.filter(log=log, seq__gt=after, seq__lte=upto).delete()
        return removed
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pollerdash_audit_prune(%s, %s, %s)", [log, upto, after])
        return int(cursor.fetchone()[0])


def prune_archived(*, log: str | None = None, chunk: int = PRUNE_CHUNK) -> int:
    """Remove the stored entries that archives already hold, `chunk` at a time, oldest first, each
    chunk its own transaction; how many. Idempotent: it also finishes a prune that was interrupted."""
    log = log or settings.AUDIT_LOG_NAME
    upto = tree.archived_upto(log)
    lowest = (
        AuditEntry.objects.filter(log=log, seq__isnull=False, seq__lte=upto).aggregate(seq=Min("seq"))["seq"]
        if upto
        else None
    )
    if lowest is None:
        return 0
    removed, after = 0, lowest - 1
    while after < upto:
        step = min(upto, after + chunk)
        removed += _prune(log=log, after=after, upto=step)
        after = step
    return removed


def archive_before(*, before: datetime, storage: Storage | None = None) -> Archived | None:
    """Archive, verify and record the entries older than `before`; None when there are none. Removes
    nothing: `prune_archived` does, once the record is committed."""
    if before.tzinfo is None:
        raise ArchiveError("--before needs a time zone")
    # Signed here only where this host holds the key; elsewhere (the owner's host, which must not
    # hold it: docs/deployment.md) the signer's newest checkpoint is the latest possible seal.
    signed = checkpoints.checkpoint_for_export()
    log = signed.log
    start = tree.archived_upto(log)
    seal = _seal(log=log, start=start, before=before, signed=signed)
    if seal is None:
        return None
    storage = storage or archive_storage()
    name = f"{log.replace('/', '_')}-{start + 1:012d}-{seal.size:012d}.jsonl"
    fd, temp = tempfile.mkstemp(prefix="audit-archive-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as handle:
            for line in export.full_lines(export.range_plan(closing=seal, start=start)):
                handle.write(line)
        _verify_file(Path(temp), seal=seal, start=start)
        with open(temp, "rb") as handle:
            sha, size_bytes = _digest(handle)
            handle.seek(0)
            saved = _stored(lambda: storage.save(name, File(handle, name=name)))
    finally:
        os.unlink(temp)
    if _stored(lambda: _read_back(storage, saved)) != (sha, size_bytes):
        raise ArchiveError(f"{saved} reads back differently from what was written; nothing removed")
    with transaction.atomic():
        AuditArchive.objects.create(
            log=log,
            first_seq=start + 1,
            last_seq=seal.size,
            name=saved,
            sha256=sha,
            size_bytes=size_bytes,
            root=seal.head_hash,
            archived_at=timezone.now(),
        )
        audit.append(
            entry_type="audit.archived",
            actor=ARCHIVER,
            operation_id=None,
            data={
                "first_seq": start + 1,
                "last_seq": seal.size,
                "name": saved,
                "sha256": sha,
                "bytes": size_bytes,
                "root": seal.head_hash,
            },
        )
    return Archived(saved, start + 1, seal.size, sha, size_bytes)
