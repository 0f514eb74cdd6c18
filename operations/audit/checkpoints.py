"""Signed checkpoints of the audit chain (docs/DESIGN.md section 8).

A checkpoint is a C2SP signed note over the log name, its size (number of entries), the head
hash and the time, signed with Ed25519. Line 3 of the note is the hash of entry `size` (a
hash-chain head), not an RFC 6962 Merkle root: tlog-checkpoint tooling must not read it as one.

The chain alone detects edits, deletions and reordering but not a truncated tail or a consistent
rewrite; the signature over (size, head) does, for anyone holding a checkpoint. So the signer:

- verifies the segment since the last checkpoint before signing (contiguity, links, the stored
  bytes re-hashed, the stored columns agreeing with the bytes) and the last checkpoint itself;
- never signs a size smaller than one it signed before, and signs nothing when verification fails;
- signs every AUDIT_CHECKPOINT_INTERVAL_S seconds even when nothing was appended, so a missing
  recent checkpoint is itself evidence (STALE in the offline verifier).

The private key (Ed25519, PKCS#8 PEM) is read from AUDIT_SIGNING_KEY_FILE and never logged,
stored, exported or shown; only its verifier key line (`manage.py audit_keys`) leaves this module.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, models, transaction
from django.utils import timezone

from operations.audit import verify as av
from operations.models import AuditCheckpoint, AuditEntry, AuditHead, ProcessHeartbeat

logger = logging.getLogger("pollerdash.audit.signer")

# Entries read per query while verifying: bounded memory whatever the segment length.
VERIFY_CHUNK = 2000
SIGN_ATTEMPTS = 3
# An export without the key in this process closes at the newest stored checkpoint, if this fresh.
EXPORT_CHECKPOINT_MAX_AGE_INTERVALS = 2


class CheckpointError(Exception):
    """No checkpoint could be signed or found (no key, unreadable key, database trouble)."""


class CheckpointRefused(CheckpointError):
    """Verification of the chain failed: nothing was signed. `failure` says what and where."""

    def __init__(self, failure: av.VerifyFailure) -> None:
        where = f" at seq {failure.seq}" if failure.seq is not None else ""
        hint = ""
        if failure.reason == av.UNKNOWN_KEY:
            hint = " (after a key rotation, list the earlier key lines in AUDIT_VERIFIER_KEYS_FILE)"
        super().__init__(f"audit chain verification failed{where}: {failure.reason}: {failure.detail}{hint}")
        self.failure = failure


# --- keys ------------------------------------------------------------------------------------------------


def key_name() -> str:
    return settings.AUDIT_LOG_NAME


def _resolve(path: str) -> Path:
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else Path(settings.BASE_DIR) / candidate


def key_file() -> Path | None:
    configured = settings.AUDIT_SIGNING_KEY_FILE
    return _resolve(configured) if configured else None


def load_signing_key(path: Path | None = None) -> Ed25519PrivateKey:
    """The Ed25519 private key from a PKCS#8 PEM file. Errors never quote the file's content."""
    path = path or key_file()
    if path is None:
        raise CheckpointError("AUDIT_SIGNING_KEY_FILE is not set: no key to sign checkpoints with")
    try:
        pem = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read the audit signing key {path}: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise CheckpointError(f"{path} is not an unencrypted PKCS#8 PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    if os.name == "posix" and path.stat().st_mode & 0o077:
        logger.warning("the audit signing key %s is readable by other users; chmod 600 it", path)
    return key


def signing_key_available() -> bool:
    path = key_file()
    return path is not None and os.access(path, os.R_OK)


def public_raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def verifier_key(key: Ed25519PrivateKey) -> av.VerifierKey:
    raw = public_raw(key)
    return av.VerifierKey(key_name(), av.key_id_for(key_name(), raw), raw)


def generate_key_file(path: Path) -> av.VerifierKey:
    """Write a new Ed25519 key (PKCS#8 PEM, mode 0600); refuses to overwrite an existing file."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CheckpointError(f"{path} exists; refusing to overwrite a signing key") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    return verifier_key(key)


def trusted_keys(signing: Ed25519PrivateKey | None = None) -> list[av.VerifierKey]:
    """Keys whose checkpoints this installation accepts: the current key and AUDIT_VERIFIER_KEYS_FILE
    (earlier keys after a rotation)."""
    keys: list[av.VerifierKey] = []
    if signing is None and signing_key_available():
        signing = load_signing_key()
    if signing is not None:
        keys.append(verifier_key(signing))
    extra = settings.AUDIT_VERIFIER_KEYS_FILE
    if extra:
        try:
            keys += av.parse_keys(_resolve(extra).read_text())
        except (OSError, av.UsageError) as exc:
            raise CheckpointError(f"AUDIT_VERIFIER_KEYS_FILE: {exc}") from None
    return keys


# --- reading the chain ----------------------------------------------------------------------------------


def latest_checkpoint(log: str | None = None) -> AuditCheckpoint | None:
    return (
        AuditCheckpoint.objects.filter(log=log or settings.AUDIT_LOG_NAME)
        .order_by("-size", "-signed_at", "-pk")
        .first()
    )


@dataclass(frozen=True)
class StoredEntry:
    seq: int
    prev_hash: str
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
    return bytes(body)  # type: ignore[arg-type]


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
            yield StoredEntry(seq, prev_hash, digest, stored_bytes(body), entry_type, operation_id, at)
        if len(rows) < VERIFY_CHUNK:
            return
        cursor = rows[-1][0]


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


def verify_segment(*, log: str, anchor: AuditCheckpoint | None, keys: list[av.VerifierKey]) -> Segment:
    """Verify everything appended after `anchor` (the whole chain when None); raises VerifyFailure."""
    verifier = av.ChainVerifier(keys=keys, log=log, scope="range", strict=True, allow_unsigned_tail=True)
    if anchor is not None:
        note = verify_anchor(anchor, keys)
        verifier.head_seq, verifier.head = note.size, note.head
    for row in iter_entries(log=log, after=verifier.head_seq):
        feed_stored_entry(verifier, row)
    return Segment(size=verifier.head_seq, head=verifier.head, entries=verifier.entries)


# --- signing ------------------------------------------------------------------------------------------


def sign_checkpoint(*, key: Ed25519PrivateKey | None = None, now: datetime | None = None) -> AuditCheckpoint:
    """Verify the new segment, then sign and store a checkpoint of the current head.

    Raises CheckpointRefused (nothing signed) when verification fails, CheckpointError otherwise.
    Several signers (the signer process, a web process exporting) may race: each re-checks under
    a lock that no newer checkpoint appeared, so sizes and times never go backwards."""
    key = key or load_signing_key()
    keys = trusted_keys(key)
    log = settings.AUDIT_LOG_NAME
    for _ in range(SIGN_ATTEMPTS):
        anchor = latest_checkpoint(log)
        try:
            segment = verify_segment(log=log, anchor=anchor, keys=keys)
        except av.VerifyFailure as failure:
            raise CheckpointRefused(failure) from None
        with transaction.atomic():
            _lock_signing(log)
            newest = latest_checkpoint(log)
            if _pk(newest) != _pk(anchor):
                continue  # another signer got there first: verify from its checkpoint instead
            when = now or timezone.now()
            if anchor is not None and when < anchor.signed_at:
                when = anchor.signed_at  # a skewed clock must not make checkpoint times go backwards
            body = av.note_body(origin=log, size=segment.size, head=segment.head, time=when)
            kid = av.key_id_for(key_name(), public_raw(key))
            note = body + "\n" + av.signature_line(name=key_name(), key_id=kid, signature=key.sign(body.encode()))
            return AuditCheckpoint.objects.create(
                log=log,
                size=segment.size,
                head_hash=segment.head,
                signed_at=when,
                key_id=kid.hex(),
                note=note,
            )
    raise CheckpointError("other signers kept signing; try again")


def _pk(checkpoint: AuditCheckpoint | None) -> int | None:
    return None if checkpoint is None else checkpoint.pk


def _lock_signing(log: str) -> None:
    """Serialise signers. SQLite's IMMEDIATE transactions already hold the database write lock."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"pollerdash/checkpoint/{log}"])


def checkpoint_for_export(*, now: datetime | None = None) -> AuditCheckpoint:
    """The checkpoint that closes an export: signed now when this process can read the key, else
    the signer's newest one if it is fresh (the export then ends at that size)."""
    if signing_key_available():
        return sign_checkpoint(now=now)
    newest = latest_checkpoint()
    interval = timedelta(seconds=settings.AUDIT_CHECKPOINT_INTERVAL_S)
    if newest is None or (now or timezone.now()) - newest.signed_at > EXPORT_CHECKPOINT_MAX_AGE_INTERVALS * interval:
        raise CheckpointError(
            "this process cannot read the audit signing key and the newest checkpoint is missing or stale: "
            "is the signer (manage.py audit_checkpoint --loop) running?"
        )
    return newest


# --- the signer process --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TickResult:
    signed: AuditCheckpoint | None
    error: str | None


class Signer:
    """`manage.py audit_checkpoint --loop`: a checkpoint every interval, a heartbeat every tick.

    A verification failure signs nothing, is logged at ERROR on every interval (so alerting on
    the log keeps firing) and shows on the heartbeat row and the system panel until fixed."""

    def __init__(self, *, interval_s: int | None = None, clock: Callable[[], datetime] = timezone.now) -> None:
        self.interval = timedelta(seconds=interval_s or settings.AUDIT_CHECKPOINT_INTERVAL_S)
        self.clock = clock
        self.name = f"signer@{socket.gethostname()}:{os.getpid()}"
        self.started_at = clock()
        self.next_due: datetime | None = None
        self.last_error: str | None = None
        self.last: AuditCheckpoint | None = None
        self.key = load_signing_key()  # fail at start-up, not a minute later

    def tick(self) -> TickResult | None:
        """Sign when due; always beat. Returns None when nothing was due."""
        now = self.clock()
        result = None
        if self.next_due is None or now >= self.next_due:
            result = self._sign(now)
            self.next_due = now + self.interval
        self._beat(now)
        return result

    def _sign(self, now: datetime) -> TickResult:
        try:
            checkpoint = sign_checkpoint(key=self.key, now=now)
        except CheckpointError as exc:
            self.last_error = str(exc)
            logger.error("audit checkpoint NOT signed: %s", exc)
            return TickResult(signed=None, error=self.last_error)
        except DatabaseError as exc:
            self.last_error = f"database error: {exc}"
            logger.error("audit checkpoint NOT signed: %s", self.last_error)
            close_old_connections()
            return TickResult(signed=None, error=self.last_error)
        except Exception as exc:  # noqa: BLE001 - the signer outlives any row it cannot read; it says so
            self.last_error = f"unexpected {type(exc).__name__}: {exc}"
            logger.exception("audit checkpoint NOT signed")
            return TickResult(signed=None, error=self.last_error)
        self.last_error = None
        self.last = checkpoint
        logger.info("audit checkpoint signed: size %s", checkpoint.size)
        return TickResult(signed=checkpoint, error=None)

    def _beat(self, now: datetime) -> None:
        info = {
            "ok": self.last_error is None,
            "error": self.last_error,
            "interval_s": int(self.interval.total_seconds()),
            "last_size": self.last.size if self.last else None,
            "last_signed_at": av.format_time(self.last.signed_at) if self.last else None,
        }
        try:
            ProcessHeartbeat.objects.update_or_create(
                name=self.name,
                defaults={"kind": "signer", "last_seen_at": now, "info": info},
                create_defaults={"kind": "signer", "started_at": self.started_at, "last_seen_at": now, "info": info},
            )
        except DatabaseError as exc:
            logger.error("signer heartbeat failed: %s", exc)
            close_old_connections()

    def seconds_until_due(self) -> float:
        if self.next_due is None:
            return 0.0
        return max(0.0, (self.next_due - self.clock()).total_seconds())

    def run(self, *, sleep: Callable[[float], object], should_stop: Callable[[], bool]) -> None:
        while not should_stop():
            self.tick()
            # Wake at least every few seconds so a stop request and the heartbeat stay prompt.
            sleep(min(self.seconds_until_due(), 5.0) or 0.05)


# --- the whole chain in the database (manage.py audit_verify) ------------------------------------------


def verify_chain(*, keys: list[av.VerifierKey]) -> dict[str, object]:
    """Verify every stored entry (bytes, links, columns) and every stored checkpoint (signature,
    place, head), streaming in chunks; then the head row. Raises VerifyFailure on the first problem.
    Entries after the newest checkpoint are normal here (the signer signs each minute): counted."""
    log = settings.AUDIT_LOG_NAME
    verifier = av.ChainVerifier(keys=keys, log=log, scope="full", strict=True, allow_unsigned_tail=True)
    pending = _iter_checkpoints(log)
    checkpoint = next(pending, None)
    while checkpoint is not None and checkpoint[0] == 0:
        verifier.checkpoint(checkpoint[1], number=0)
        checkpoint = next(pending, None)
    for row in iter_entries(log=log, after=0):
        feed_stored_entry(verifier, row)
        while checkpoint is not None and checkpoint[0] <= row.seq:
            verifier.checkpoint(checkpoint[1], number=row.seq)
            checkpoint = next(pending, None)
    if checkpoint is not None:
        # A checkpoint signed a size the stored chain does not reach: entries were removed.
        verifier.checkpoint(checkpoint[1], number=verifier.head_seq)
    result = verifier.finish()
    head = AuditHead.objects.filter(log=log).values_list("seq", "head_hash").first()
    if head is not None and head != (verifier.head_seq, verifier.head):
        raise av.VerifyFailure(
            av.LINK_BREAK,
            f"the head row (seq {head[0]}) disagrees with the stored chain (seq {verifier.head_seq})",
            seq=head[0],
        )
    return result


def _iter_checkpoints(log: str) -> Iterator[tuple[int, str]]:
    """(size, note) of every stored checkpoint in (size, insertion) order, in bounded chunks."""
    last = (-1, 0)
    while True:
        rows = list(
            AuditCheckpoint.objects.filter(log=log)
            .filter(models.Q(size__gt=last[0]) | models.Q(size=last[0], pk__gt=last[1]))
            .order_by("size", "pk")
            .values_list("size", "pk", "note")[:VERIFY_CHUNK]
        )
        for size, _pk, note in rows:
            yield size, note
        if len(rows) < VERIFY_CHUNK:
            return
        last = (rows[-1][0], rows[-1][1])
