"""Which stored checkpoint rows the signer really made (docs/DESIGN.md section 8).

Checkpoint rows stay insertable by the application role: the signer is one of its processes (on its
own host, README "The signer's key on its own host"), and a third database role only for it would be
one more credential to deploy for what a signature already proves. So a row is trusted only for
what it proves itself: it is *genuine* when its note parses, its columns say what its note says
(log, size, root, time, and the chain head of the switch), and a trusted key's signature verifies.
Anything else - a malformed note, a note under a row claiming another size or time, a signature
that does not verify - is skipped and reported, never taken as the newest checkpoint: one forged
row must not stop signing or every export for good (issue 24), nor lead the signer to sign a
smaller tree than a genuine earlier checkpoint.

A process without any trusted key (no signing key, no AUDIT_VERIFIER_KEYS_FILE) cannot check a
signature; it checks the rest and, when it picks the newest checkpoint, that the row is plausible
(no bigger than the integrated tree, its root the stored tree's at its size, not from the future).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from operations.audit import tree
from operations.audit import verify as av
from operations.models import AuditCheckpoint, AuditTree

# Rows examined for one choice before giving up: each costs one signature check (about 0.1 ms), and
# past this many forged rows above the newest genuine one something is attacking the table.
EXAMINE_LIMIT = 10_000
_PAGE = 100
FUTURE_SLACK = timedelta(minutes=5)


class TooManySkipped(Exception):
    """More rows than EXAMINE_LIMIT in a row did not verify: nothing was chosen."""


@dataclass(frozen=True)
class Skipped:
    pk: int
    size: int
    reason: str
    detail: str

    def __str__(self) -> str:
        return f"checkpoint row {self.pk} (size {self.size}): {self.reason}: {self.detail}"


def problem(row: AuditCheckpoint, *, keys: list[av.VerifierKey], plausible: bool = False) -> Skipped | None:
    """Why `row` is not a checkpoint the signer made, or None when it is genuine."""
    try:
        note = av.parse_note(row.note)
    except ValueError as exc:
        return Skipped(row.pk, row.size, av.PARSE, f"its note does not parse: {exc}")
    columns = (row.log, row.size, row.head_hash, row.signed_at, row.chain_head)
    if columns != (note.origin, note.size, note.head, note.time, note.chain or "") or (note.chain and not row.tree):
        return Skipped(row.pk, row.size, av.CHECKPOINT_MISMATCH, "its row says otherwise than its note")
    if keys:
        try:
            av.check_note_signature(note, keys)
        except av.VerifyFailure as exc:
            return Skipped(row.pk, row.size, exc.reason, exc.detail)
    elif plausible:
        return _implausible(row)
    return None


def _implausible(row: AuditCheckpoint) -> Skipped | None:
    integrated = AuditTree.objects.filter(log=row.log).values_list("size", flat=True).first() or 0
    if row.size > integrated:
        return Skipped(row.pk, row.size, av.SEQ_GAP, f"it claims {row.size} entries; the tree holds {integrated}")
    if row.signed_at > timezone.now() + FUTURE_SLACK:
        return Skipped(row.pk, row.size, av.CHECKPOINT_MISMATCH, "it is signed in the future")
    if row.tree:
        try:
            root = tree.root_at(log=row.log, size=row.size).hex()
        except tree.TreeError as exc:
            return Skipped(row.pk, row.size, av.SEQ_GAP, str(exc))
        if root != row.head_hash:
            return Skipped(row.pk, row.size, av.HASH_MISMATCH, "its root is not the stored tree's")
    return None


def first_genuine(
    candidates: QuerySet[AuditCheckpoint],
    *,
    keys: list[av.VerifierKey],
    skipped: list[Skipped] | None = None,
    plausible: bool = False,
) -> AuditCheckpoint | None:
    """The first genuine row of `candidates` (in their order); the rows passed over go to `skipped`."""
    for offset in range(0, EXAMINE_LIMIT, _PAGE):
        page = list(candidates[offset : offset + _PAGE])
        for row in page:
            found = problem(row, keys=keys, plausible=plausible)
            if found is None:
                return row
            if skipped is not None and all(seen.pk != found.pk for seen in skipped):
                skipped.append(found)
        if len(page) < _PAGE:
            return None
    raise TooManySkipped(
        f"the {EXAMINE_LIMIT} newest candidate checkpoint rows all fail to verify: the checkpoint table is "
        "being flooded with forged rows"
    )


def newest(*, log: str, keys: list[av.VerifierKey], skipped: list[Skipped] | None = None) -> AuditCheckpoint | None:
    """The log's newest genuine checkpoint: the largest size, then the latest time."""
    candidates = AuditCheckpoint.objects.filter(log=log).order_by("-size", "-signed_at", "-pk")
    return first_genuine(candidates, keys=keys, skipped=skipped, plausible=True)
