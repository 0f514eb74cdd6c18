"""Retention of the audit log (`manage.py archive --before DATE`, docs/DESIGN.md section 8).

An archive is a sealed range: a full format-2 export of the entries after the previous archive up
to a signed tree checkpoint (the seal) older than DATE, with their checkpoints and consistency
proofs, opening with the tree's right edge where the previous archive ended. It is written to a
temporary file, verified there (signatures, every root, the seal's root against the stored tree),
saved through a Django storage backend (a local directory by default, `STORAGES["audit_archive"]`
when configured: django-storages for S3-compatible stores), read back and compared byte for byte by
SHA-256, and recorded in the log itself: an AuditArchive row (the ledger, which on PostgreSQL only
the owner may add to) and an `audit.archived` entry with the same fields, committed together.

Only then are its entries removed (`prune_archived`), and only for a range the log vouches for
(operations.audit.ledger): its `audit.archived` entry integrated and inside the tree a genuine
checkpoint signed (`await_records` signs, or waits for the signer), and the archive read back from
its storage once more and verified - whichever backend holds it - just before. The removal goes
through the guarded database function pollerdash_audit_prune, which checks the record again,
PRUNE_CHUNK entries per short transaction: a million-row DELETE in one transaction would hold its
row locks, WAL and the per-row trigger's work in one piece while the dispatcher polls. Every state
between two chunks is a valid log: the entries archived but not yet removed are simply still
there (full exports, the signer and `audit_verify` start at the archived size; an operation export
proves them like any other entry), and the next `prune_archived` (every `manage.py archive` runs
it) removes what an interrupted one left. The tree's nodes and the checkpoints stay, so every proof
for an entry still in the database stays valid, and `pollerdash-audit-verify ARCHIVES... EXPORT`
checks the archives and a newer full export together.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from django.conf import settings
from django.core.files import File
from django.core.files.storage import FileSystemStorage, InvalidStorageError, Storage, storages
from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from operations.audit import checkpoints, database, export, genuine, integrate, ledger, tree
from operations.audit import entries as audit
from operations.audit import verify as av
from operations.audit.chaincheck import stored_bytes
from operations.audit.verify import merkle
from operations.models import AuditArchive, AuditCheckpoint, AuditEntry

ARCHIVER = {"kind": "system", "id": "archiver"}
T = TypeVar("T")
# Entries removed per transaction: about 0.1 s of work each, so no lock, snapshot or WAL burst of
# the prune is long enough to show in dispatch lag (bench/retention.py).
PRUNE_CHUNK = 10_000
# How often `await_records` looks for the signer's checkpoint (it signs every interval, 60 s).
WAIT_POLL_S = 1.0
# Module-level so a test can stand in for the signer while the archiver waits.
sleep = time.sleep


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


def _seal(
    *, log: str, start: int, before: datetime, signed: AuditCheckpoint, keys: list[av.VerifierKey]
) -> AuditCheckpoint | None:
    """The newest genuine plain tree checkpoint whose entries after `start` were all written before
    `before` (a checkpoint row that does not verify is passed over, not sealed at)."""
    first_recent = (
        AuditEntry.objects.filter(log=log, seq__gt=start, seq__isnull=False, at__gte=before).aggregate(seq=Min("seq"))[
            "seq"
        ]
        or signed.size + 1
    )
    limit = min(first_recent - 1, signed.size)
    candidates = AuditCheckpoint.objects.filter(
        log=log, tree=True, chain_head="", size__gt=start, size__lte=limit, pk__lte=signed.pk
    ).order_by("-size", "-pk")
    try:
        return genuine.first_genuine(candidates, judge=genuine.Judge(log=log, keys=keys))
    except genuine.TooManySkipped as exc:
        raise ArchiveError(str(exc)) from None


def _keys() -> list[av.VerifierKey]:
    keys = checkpoints.trusted_keys()
    if not keys:
        raise ArchiveError(
            "no key to verify the archive with: set AUDIT_VERIFIER_KEYS_FILE to the verifier key lines "
            "(manage.py audit_keys on the signer's host prints them)"
        )
    return keys


def _verify_file(path: Path, *, seal: AuditCheckpoint, start: int, keys: list[av.VerifierKey]) -> dict[str, object]:
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
    except Exception as exc:  # every backend has its own exception classes
        raise ArchiveError(f"the archive storage failed, nothing removed: {type(exc).__name__}: {exc}") from None


def _read_back(storage: Storage, name: str) -> tuple[str, int]:
    with storage.open(name, "rb") as stored:
        return _digest(stored)


def _digest(handle: object) -> tuple[str, int]:
    sha, count = hashlib.sha256(), 0
    # Typing: any binary file object Storage.open hands back; Django types it as File[Any] without read.
    for chunk in iter(lambda: handle.read(1 << 20), b""):  # type: ignore[attr-defined]
        sha.update(chunk)
        count += len(chunk)
    return sha.hexdigest(), count


class _Hashing:
    """A binary reader that hashes and counts what passes through it: the stored archive is
    verified and digested in one read."""

    def __init__(self, raw: object) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        # Typing: raw is the binary file Storage.open handed back (see _digest).
        chunk: bytes = self.raw.read(size)  # type: ignore[attr-defined]
        self.sha.update(chunk)
        self.count += len(chunk)
        return chunk

    def drain(self) -> tuple[str, int]:
        while self.read(1 << 20):
            pass
        return self.sha.hexdigest(), self.count


def _check_stored(storage: Storage, row: AuditArchive, *, keys: list[av.VerifierKey]) -> None:
    """Read the archive back from its storage, whatever the backend, and check it is what was
    recorded (digest and length) and a sealed range of exactly the recorded entries, signed by a
    trusted key and closing at the recorded root; ArchiveError, nothing removed, otherwise."""

    def read() -> tuple[dict[str, object] | av.VerifyFailure, tuple[str, int]]:
        with storage.open(row.name, "rb") as stored:
            hashing = _Hashing(stored)
            try:
                # Typing: _Hashing is a binary reader (read only), which is all verify_export uses of a BinaryIO.
                result: dict[str, object] | av.VerifyFailure = av.verify_export(hashing, keys=keys)  # type: ignore[arg-type]
            except av.VerifyFailure as failure:
                result = failure
            return result, hashing.drain()

    try:
        result, digest = read()
    except Exception as exc:  # every backend has its own exception classes
        raise ArchiveError(
            f"cannot read the archive {row.name} back from its storage ({type(exc).__name__}: {exc}); nothing "
            "removed (an archive written with --to DIR is read from the same --to DIR)"
        ) from None
    problems = []
    if digest != (row.sha256, row.size_bytes):
        problems.append("reads back differently from what was recorded")
    if isinstance(result, av.VerifyFailure):
        problems.append(f"does not verify ({result.reason}: {result.detail})")
    elif (result["size"], result["root"], result["from"]) != (row.last_seq, row.root, row.first_seq - 1):
        problems.append(f"does not hold entries {row.first_seq}-{row.last_seq} sealed at the recorded root")
    if problems:
        raise ArchiveError(f"the stored archive {row.name} " + " and ".join(problems) + "; nothing removed")


def _signed_record(record: ledger.Record, *, log: str, keys: list[av.VerifierKey]) -> bool:
    """Whether the `audit.archived` entry is in the tree a genuine checkpoint signed: covered by
    its size, with an inclusion proof from the stored nodes that leads to its signed root."""
    try:
        newest = checkpoints.latest_genuine_checkpoint(log, keys=keys)
    except checkpoints.CheckpointError as exc:
        raise ArchiveError(str(exc)) from None
    if record.seq is None or newest is None or not newest.tree or newest.size < record.seq:
        return False
    proof = tree.inclusion_proof(log=log, seq=record.seq, size=newest.size)
    leaf = merkle.leaf_hash(stored_bytes(record.body))
    if not merkle.verify_inclusion(
        index=record.seq - 1, size=newest.size, leaf=leaf, proof=proof, root=bytes.fromhex(newest.head_hash)
    ):
        raise ArchiveError(f"the audit.archived entry {record.seq} is not in the signed tree; nothing removed")
    return True


@dataclass(frozen=True)
class Pruned:
    removed: int
    # Set when a range stays because no checkpoint signs its audit.archived entry yet.
    waiting: str | None = None


def prune_archived(*, log: str | None = None, chunk: int = PRUNE_CHUNK, storage: Storage | None = None) -> Pruned:
    """Remove the stored entries that archives already hold, `chunk` at a time, oldest first, each
    chunk its own transaction. Idempotent: it also finishes a prune that was interrupted.

    Only ranges the log vouches for (operations.audit.ledger), and for each range first: its
    `audit.archived` entry in a genuine signed checkpoint (else it stops and says it waits for the
    signer), and the archive read back from `storage` and verified (else ArchiveError)."""
    log = log or settings.AUDIT_LOG_NAME
    found = ledger.read(log)
    lowest = AuditEntry.objects.filter(log=log, seq__isnull=False, seq__lte=found.upto).aggregate(seq=Min("seq"))["seq"]
    if lowest is None:
        return Pruned(0)
    allowed, who = database.may_prune()
    if not allowed:
        raise NotTheOwner(who)
    keys = _keys()
    storage = storage or archive_storage()
    removed = 0
    for vouched in found.vouched:
        row, record = vouched.row, vouched.record
        if row.last_seq < lowest:
            continue
        if record is None or not _signed_record(record, log=log, keys=keys):
            seq = "pending" if record is None else f"seq {record.seq}"
            return Pruned(
                removed,
                f"entries {max(lowest, row.first_seq)}-{row.last_seq} stay until the signer's checkpoint covers "
                f"their audit.archived entry ({seq}); the next run removes them",
            )
        _check_stored(storage, row, keys=keys)
        after = max(lowest, row.first_seq) - 1
        while after < row.last_seq:
            step = min(row.last_seq, after + chunk)
            removed += database.prune(log=log, after=after, upto=step)
            after = step
        lowest = row.last_seq + 1
    return Pruned(removed)


class NotTheOwner(ArchiveError):
    """This database role may not record archives or remove archived entries (PostgreSQL)."""

    def __init__(self, who: str) -> None:
        super().__init__(
            f"this database role, {who}, may not record archives or remove audit entries: run the same "
            "command with DATABASE_URL naming the database owner (the role `manage.py migrate` runs as)"
        )


def await_records(*, log: str | None = None, wait_s: float) -> bool:
    """Bring every archive's `audit.archived` entry into a signed checkpoint before the prune needs
    it: integrate what is pending, then sign where this host holds the key, else wait up to
    `wait_s` seconds for the signer's next checkpoint (the owner's host, which runs the archive,
    should not hold the key). Whether they all are signed."""
    log = log or settings.AUDIT_LOG_NAME
    try:
        integrate.integrate_all(log=log)
    except integrate.IntegrationError as exc:
        raise ArchiveError(f"audit integration stopped: {exc}") from None
    records = [vouched.record.seq for vouched in ledger.read(log).vouched if vouched.record is not None]
    needed = max((seq for seq in records if seq is not None), default=0)
    if not needed:
        return True
    if checkpoints.signing_key_available():
        return checkpoints.sign_checkpoint().size >= needed
    keys = _keys()
    for attempt in range(int(wait_s / WAIT_POLL_S) + 1):
        newest = checkpoints.latest_genuine_checkpoint(log, keys=keys)
        if newest is not None and newest.size >= needed:
            return True
        if attempt * WAIT_POLL_S < wait_s:
            sleep(WAIT_POLL_S)
    return False


def archive_before(*, before: datetime, storage: Storage | None = None) -> Archived | None:
    """Archive, verify and record the entries older than `before`; None when there are none. Removes
    nothing: `prune_archived` does, once the record is committed and signed."""
    if before.tzinfo is None:
        raise ArchiveError("--before needs a time zone")
    keys = _keys()
    log = settings.AUDIT_LOG_NAME
    try:
        # Earlier archives' entries must be integrated for the ledger to vouch for them.
        integrate.integrate_all(log=log)
    except integrate.IntegrationError as exc:
        raise ArchiveError(f"audit integration stopped: {exc}") from None
    # Signed here only where this host holds the key; elsewhere (the owner's host, which must not
    # hold it: docs/deployment.md) the signer's newest checkpoint is the latest possible seal.
    signed = checkpoints.checkpoint_for_export()
    found = ledger.read(log)
    start = found.upto
    seal = _seal(log=log, start=start, before=before, signed=signed, keys=keys)
    if seal is None:
        return None
    if found.problems or found.pending:
        raise ArchiveError(
            "the archive ledger has rows the log does not (yet) record: "
            + "; ".join(found.problems + [f"archive row {row.pk} awaits integration" for row in found.pending])
        )
    allowed, who = database.may_record()
    if not allowed:
        raise NotTheOwner(who)
    storage = storage or archive_storage()
    name = f"{log.replace('/', '_')}-{start + 1:012d}-{seal.size:012d}.jsonl"
    fd, temp = tempfile.mkstemp(prefix="audit-archive-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as handle:
            for line in export.full_lines(export.range_plan(closing=seal, start=start, keys=keys)):
                handle.write(line)
        _verify_file(Path(temp), seal=seal, start=start, keys=keys)
        with open(temp, "rb") as handle:
            sha, size_bytes = _digest(handle)
            handle.seek(0)
            saved = _stored(lambda: storage.save(name, File(handle, name=name)))
    finally:
        os.unlink(temp)
    if _stored(lambda: _read_back(storage, saved)) != (sha, size_bytes):
        raise ArchiveError(f"{saved} reads back differently from what was written; nothing removed")
    row = AuditArchive(
        log=log,
        first_seq=start + 1,
        last_seq=seal.size,
        name=saved,
        sha256=sha,
        size_bytes=size_bytes,
        root=seal.head_hash,
        archived_at=timezone.now(),
    )
    with transaction.atomic():
        row.save()
        audit.append(entry_type=ledger.RECORD_TYPE, actor=ARCHIVER, operation_id=None, data=ledger.record_data(row))
    return Archived(saved, start + 1, seal.size, sha, size_bytes)
