"""A witness (`manage.py audit_witness`): cosigns the log's newest tree checkpoint, but only after
checking it is consistent with the last checkpoint this witness cosigned.

The witness has its own Ed25519 key (meant for another host and another person than the signer's)
and its own state file, the last checkpoint it cosigned; the database is not trusted for either.
The checkpoint's log signature is checked against the trusted log keys, and its consistency with
the remembered one by an RFC 9162 consistency proof computed from the stored tree and verified
here against the two signed roots. A log that showed two histories, or rewrote one, gets no
cosignature: WitnessRefused says why. Cosignatures are stored beside the checkpoint and ride on it
in exports (C2SP tlog-cosignature lines); `pollerdash-audit-verify --witness-key ...
--witnesses-required K` requires them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from operations.audit import checkpoints, genuine, tree
from operations.audit import verify as av
from operations.audit.verify import merkle
from operations.models import AuditCheckpoint, AuditCosignature


class WitnessRefused(Exception):
    """Nothing was cosigned: the checkpoint is unsigned, forked, smaller, or inconsistent."""


def generate_key(path: Path, name: str) -> av.WitnessKey:
    """A new witness key file (PKCS#8 PEM, mode 0600, never overwritten); its verifier key."""
    key = Ed25519PrivateKey.generate()
    witness = av.witness_key(name, checkpoints.public_raw(key))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise WitnessRefused(f"{path} exists; refusing to overwrite a witness key") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    return witness


@dataclass(frozen=True)
class Cosigned:
    size: int
    root: str
    checkpoint_id: int


def _remembered(state: Path) -> av.Note | None:
    try:
        text = json.loads(state.read_text())["note"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WitnessRefused(f"the witness state {state} is unreadable ({exc}); it is not rewritten") from None
    return av.parse_note(text)


def _remember(state: Path, note_text: str) -> None:
    partial = state.with_name(f".{state.name}.partial")
    partial.write_text(json.dumps({"note": note_text}))
    os.replace(partial, state)


def _check_consistent(last: av.Note, note: av.Note) -> None:
    if last.origin != note.origin:
        raise WitnessRefused(f"the witness follows {last.origin!r}, not {note.origin!r}")
    if note.size < last.size:
        raise WitnessRefused(f"checkpoint of size {note.size} after size {last.size} was cosigned: refused")
    if note.size == last.size:
        if note.head != last.head:
            raise WitnessRefused(f"two roots for size {note.size}: the log forked; refused")
        return
    proof = tree.consistency_proof(log=note.origin, old=last.size, new=note.size)
    ok = merkle.verify_consistency(
        old=last.size,
        new=note.size,
        old_root=bytes.fromhex(last.head),
        new_root=bytes.fromhex(note.head),
        proof=proof,
    )
    if not ok:
        raise WitnessRefused(f"the tree of size {note.size} is not consistent with size {last.size}: refused")


def cosign_newest(*, key: Ed25519PrivateKey, name: str, state: Path, now: datetime | None = None) -> Cosigned:
    """Cosign the newest tree checkpoint of the log after the checks above; remember it. Checkpoint
    rows whose log signature does not verify are passed over (anyone who may write the database
    may insert one), never cosigned, never a reason to stop cosigning genuine ones."""
    keys = checkpoints.trusted_keys()
    if not keys:
        raise WitnessRefused("no log key to check checkpoints with: set AUDIT_VERIFIER_KEYS_FILE")
    candidates = AuditCheckpoint.objects.filter(log=settings.AUDIT_LOG_NAME, tree=True).order_by("-size", "-pk")
    try:
        checkpoint = genuine.first_genuine(candidates, judge=genuine.Judge(log=settings.AUDIT_LOG_NAME, keys=keys))
    except genuine.TooManySkipped as exc:
        raise WitnessRefused(str(exc)) from None
    if checkpoint is None:
        raise WitnessRefused("the log has no tree checkpoint its keys signed yet")
    note = av.parse_note(checkpoint.note)
    last = _remembered(state)
    if last is not None:
        _check_consistent(last, note)
    when = now or timezone.now()
    timestamp = int(when.timestamp())
    raw = checkpoints.public_raw(key)
    line = av.cosignature_line(
        name=name, public_raw=raw, timestamp=timestamp, signature=key.sign(av.cosigned_message(note.body, timestamp))
    )
    AuditCosignature.objects.get_or_create(
        checkpoint=checkpoint,
        witness=name,
        defaults={"key_id": av.witness_key(name, raw).key_id.hex(), "signed_at": when, "line": line},
    )
    _remember(state, checkpoint.note)
    return Cosigned(size=note.size, root=note.head, checkpoint_id=checkpoint.pk)


def cosigned_note(checkpoint: AuditCheckpoint) -> str:
    """The checkpoint's note with every stored cosignature line added (signed-note signatures)."""
    lines = AuditCosignature.objects.filter(checkpoint=checkpoint).order_by("witness").values_list("line", flat=True)
    return checkpoint.note + "".join(lines)


def notes_with_cosignatures(pks: list[int]) -> dict[int, str]:
    """pk -> note text with its cosignatures, for many checkpoints in two queries."""
    notes = dict(AuditCheckpoint.objects.filter(pk__in=pks).values_list("pk", "note"))
    extra: dict[int, str] = {}
    for pk, line in (
        AuditCosignature.objects.filter(checkpoint_id__in=pks).order_by("witness").values_list("checkpoint_id", "line")
    ):
        extra[pk] = extra.get(pk, "") + line
    return {pk: note + extra.get(pk, "") for pk, note in notes.items()}


def newest_witnessed(
    *, log: str, upto: AuditCheckpoint, keys: list[av.VerifierKey], skipped: list[genuine.Skipped] | None = None
) -> AuditCheckpoint | None:
    """The largest genuine tree checkpoint, no later than `upto`, that some witness cosigned."""
    candidates = (
        AuditCheckpoint.objects.filter(log=log, tree=True, pk__lte=upto.pk, size__lte=upto.size)
        .filter(pk__in=AuditCosignature.objects.values("checkpoint_id"))
        .order_by("-size", "-pk")
    )
    try:
        return genuine.first_genuine(candidates, judge=genuine.Judge(log=log, keys=keys), skipped=skipped)
    except genuine.TooManySkipped:
        return None  # the export then carries no witnessed checkpoint; the verifier says UNWITNESSED


@dataclass(frozen=True)
class WitnessLag:
    name: str
    size: int | None
    seconds: float | None


def witness_lags(*, now: datetime) -> list[WitnessLag]:
    """For each expected witness (AUDIT_WITNESS_NAMES): the newest size it cosigned and how long ago."""
    names = [name.strip() for name in settings.AUDIT_WITNESS_NAMES.split(",") if name.strip()]
    newest = dict(
        AuditCosignature.objects.filter(witness__in=names, checkpoint__log=settings.AUDIT_LOG_NAME)
        .values("witness")
        .annotate(last=Max("signed_at"))
        .values_list("witness", "last")
    )
    sizes = dict(
        AuditCosignature.objects.filter(witness__in=names, checkpoint__log=settings.AUDIT_LOG_NAME)
        .values("witness")
        .annotate(size=Max("checkpoint__size"))
        .values_list("witness", "size")
    )
    return [
        WitnessLag(
            name,
            sizes.get(name),
            None if newest.get(name) is None else max(0.0, (now - newest[name]).total_seconds()),
        )
        for name in names
    ]


def behind(lag: WitnessLag) -> bool:
    limit = timedelta(seconds=settings.AUDIT_WITNESS_MAX_LAG_S).total_seconds()
    return lag.seconds is None or lag.seconds > limit
