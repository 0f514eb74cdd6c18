"""Signed checkpoints of the audit log (docs/DESIGN.md section 8).

A checkpoint is a C2SP signed note over the log name, its size (number of entries), a hash and
the time, signed with Ed25519. Since version 2 the hash line is the RFC 9162 root of the Merkle
tree of the first `size` entries (a tlog-checkpoint); older checkpoints carry the hash of entry
`size` of the version-1 chain instead. The switch checkpoint, the first tree checkpoint, carries
both: the tree root on line 3 and the chain head on a `chain` line.

The tree (or chain) alone detects edits, deletions and reordering but not a truncated tail or a
consistent rewrite; the signature over (size, root) does, for anyone holding a checkpoint. So the
signer:

- verifies from the newest *genuine* checkpoint (operations.audit.genuine): rows anyone who can
  write the database inserted, whose signature or columns do not hold, are passed over and reported;
- integrates what is pending, then verifies the part since the last checkpoint before signing
  (the stored bytes re-hashed into the tree from the last signed root's right edge, the stored
  columns agreeing with the bytes, the stored nodes giving the same root) and the last checkpoint;
- never signs a size smaller than one it signed before, and signs nothing when verification fails;
- signs every AUDIT_CHECKPOINT_INTERVAL_S seconds even when nothing was appended, so a missing
  recent checkpoint is itself evidence (STALE in the offline verifier): the signer process,
  operations.audit.signer.

The private key (Ed25519, PKCS#8 PEM) is read from AUDIT_SIGNING_KEY_FILE and never logged,
stored, exported or shown; only its verifier key line (`manage.py audit_keys`) leaves this module.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from operations.audit import chaincheck, genuine, integrate, tree, treecheck
from operations.audit import verify as av
from operations.audit.chaincheck import StoredEntry, iter_entries, stored_bytes
from operations.audit.verify import merkle
from operations.infrastructure import fastsql
from operations.models import AuditCheckpoint

__all__ = ["StoredEntry", "iter_entries", "stored_bytes"]  # for exports, tests and benches

logger = logging.getLogger("pollerdash.audit.signer")

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


# --- reading ---------------------------------------------------------------------------------------------


def latest_genuine_checkpoint(
    log: str | None = None, *, keys: list[av.VerifierKey], skipped: list[genuine.Skipped] | None = None
) -> AuditCheckpoint | None:
    """The newest checkpoint the signer made (operations.audit.genuine): rows that do not verify
    with `keys` are passed over and added to `skipped`, never taken as the newest."""
    try:
        return genuine.newest(log=log or settings.AUDIT_LOG_NAME, keys=keys, skipped=skipped)
    except genuine.TooManySkipped as exc:
        raise CheckpointError(str(exc)) from None


# --- signing ------------------------------------------------------------------------------------------


def sign_checkpoint(
    *,
    key: Ed25519PrivateKey | None = None,
    now: datetime | None = None,
    skipped: list[genuine.Skipped] | None = None,
) -> AuditCheckpoint:
    """Integrate what is pending, verify the new part of the log, then sign and store a checkpoint
    of the tree at its integrated size.

    The first time (no tree checkpoint yet), the switch checkpoint is signed first: the size of
    the version-1 chain, the tree root at that size, and the chain head on its `chain` line - one
    signature tying the old chain to the tree. Raises CheckpointRefused (nothing signed) when
    verification fails, CheckpointError otherwise. Several signers (the signer process, a web
    process exporting) may race: each re-checks under a lock that no newer checkpoint appeared,
    so sizes and times never go backwards. It verifies from the newest *genuine* checkpoint:
    checkpoint rows that do not verify are passed over and added to `skipped` (the signer
    reports them), so it never signs a smaller tree than a checkpoint it made before."""
    key = key or load_signing_key()
    keys = trusted_keys(key)
    log = settings.AUDIT_LOG_NAME
    try:
        integrate.integrate_all(log=log)
    except integrate.IntegrationError as exc:
        raise CheckpointError(f"audit integration stopped: {exc}") from None
    for _ in range(SIGN_ATTEMPTS + 1):
        anchor = latest_genuine_checkpoint(log, keys=keys, skipped=skipped)
        try:
            if anchor is None or not anchor.tree:
                body_args = _switch(log=log, anchor=anchor, keys=keys)
            else:
                segment = treecheck.verify_tree_segment(log=log, anchor=anchor, keys=keys)
                body_args = {"size": segment.size, "head": segment.root, "chain": None}
        except av.VerifyFailure as failure:
            raise CheckpointRefused(failure) from None
        except tree.TreeError as exc:
            raise CheckpointError(str(exc)) from None
        with transaction.atomic():
            # Signers one at a time (SQLite's IMMEDIATE transactions are one at a time anyway).
            fastsql.named_lock(f"pollerdash/checkpoint/{log}")
            if _pk(latest_genuine_checkpoint(log, keys=keys)) != _pk(anchor):
                continue  # another signer got there first: verify from its checkpoint instead
            # Typing: body_args are the verified tree's size and root hash, built above for _store's keywords.
            signed = _store(log=log, key=key, anchor=anchor, now=now, **body_args)  # type: ignore[arg-type]
        if signed.chain_head:
            continue  # the switch is signed: now the tree at its integrated size
        return signed
    raise CheckpointError("other signers kept signing; try again")


def _switch(*, log: str, anchor: AuditCheckpoint | None, keys: list[av.VerifierKey]) -> dict[str, object]:
    """What the switch checkpoint signs: the verified chain's size and head, and the tree root at
    that size (replayed from the stored bytes)."""
    chained = integrate.chain_size(log)
    segment = chaincheck.verify_segment(log=log, anchor=anchor, keys=keys, upto=chained)
    if segment.size != chained:
        raise av.VerifyFailure(av.SEQ_GAP, f"the chain holds {segment.size} of {chained} entries", seq=segment.size)
    edge = merkle.CompactRange()
    for row in chaincheck.iter_entries(log=log, after=0, upto=chained):
        edge.push(merkle.leaf_hash(row.body))
    if edge.size != chained or tree.root_at(log=log, size=chained) != edge.root():
        raise av.VerifyFailure(av.HASH_MISMATCH, "the stored tree disagrees with the chained entries", seq=chained)
    return {"size": chained, "head": edge.root().hex(), "chain": segment.head}


def _store(
    *,
    log: str,
    key: Ed25519PrivateKey,
    anchor: AuditCheckpoint | None,
    now: datetime | None,
    size: int,
    head: str,
    chain: str | None,
) -> AuditCheckpoint:
    when = now or timezone.now()
    if anchor is not None and when < anchor.signed_at:
        when = anchor.signed_at  # a skewed clock must not make checkpoint times go backwards
    if anchor is not None and anchor.tree and size < anchor.size:
        raise CheckpointError(f"refusing to sign size {size} after size {anchor.size}")
    body = av.note_body(origin=log, size=size, head=head, time=when, chain=chain)
    kid = av.key_id_for(key_name(), public_raw(key))
    note = body + "\n" + av.signature_line(name=key_name(), key_id=kid, signature=key.sign(body.encode()))
    return AuditCheckpoint.objects.create(
        log=log,
        size=size,
        head_hash=head,
        tree=True,
        chain_head=chain or "",
        signed_at=when,
        key_id=kid.hex(),
        note=note,
    )


def _pk(checkpoint: AuditCheckpoint | None) -> int | None:
    return None if checkpoint is None else checkpoint.pk


def checkpoint_for_export(
    *, now: datetime | None = None, skipped: list[genuine.Skipped] | None = None
) -> AuditCheckpoint:
    """The checkpoint that closes an export: signed now when this process can read the key, else
    the signer's newest genuine one if it is fresh (the export then ends at that size). Rows passed
    over as not genuine go to `skipped`."""
    if signing_key_available():
        return sign_checkpoint(now=now, skipped=skipped)
    newest = latest_genuine_checkpoint(keys=trusted_keys(), skipped=skipped)
    interval = timedelta(seconds=settings.AUDIT_CHECKPOINT_INTERVAL_S)
    if newest is None or (now or timezone.now()) - newest.signed_at > EXPORT_CHECKPOINT_MAX_AGE_INTERVALS * interval:
        raise CheckpointError(
            "this process cannot read the audit signing key and the newest checkpoint is missing or stale: "
            "is the signer (manage.py audit_checkpoint --loop) running?"
        )
    return newest


# --- the whole log in the database (manage.py audit_verify) --------------------------------------------


def verify_chain(*, keys: list[av.VerifierKey]) -> dict[str, object]:
    """Verify every stored entry and checkpoint, streaming; raises VerifyFailure on the first problem."""
    log = settings.AUDIT_LOG_NAME
    return treecheck.verify_log(log=log, keys=keys, checkpoints=chaincheck.iter_checkpoints(log))
