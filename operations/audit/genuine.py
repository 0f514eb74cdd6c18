"""Which stored checkpoint rows the signer really made (docs/DESIGN.md section 8).

Checkpoint rows stay insertable by the application role: the signer is one of its processes (on its
own host, README "The signer's key on its own host"), and a third database role only for it would be
one more credential to deploy for what a signature already proves. So a row is trusted only for
what it proves itself: it is *genuine* when its note parses, its columns say what its note says
(log, size, root, time, and the chain head of the switch), its kind (chain or tree checkpoint, the
one column no signature covers) fits its place around the switch, and a trusted key's signature
verifies. Anything else - a malformed note, a note under a row claiming another size, time or kind,
a signature that does not verify - is skipped and reported, never taken as the newest checkpoint: one forged
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


class Judge:
    """Decides which rows of one log are genuine. The row's `tree` flag is the one column no
    signature covers, so the kind of a row is checked against the log's switch checkpoint (whose
    note signs both the chain head and the tree root): chain (version-1) checkpoints come up to the
    switch's size, tree checkpoints from it, and at that size each carries the switch's own head.
    The switch is looked up once per Judge."""

    def __init__(self, *, log: str, keys: list[av.VerifierKey], plausible: bool = False) -> None:
        self.log = log
        self.keys = keys
        self.plausible = plausible
        self._switch: AuditCheckpoint | None = None
        self._looked_up = False

    def problem(self, row: AuditCheckpoint, *, signature: bool = True) -> Skipped | None:
        """Why `row` is not a checkpoint the signer made, or None when it is genuine. Without
        `signature` the caller checks the signature itself (the database verifier does, once)."""
        found = self._note(row, signature=signature) or self._kind(row)
        if found is None and self.plausible and not self.keys:
            found = _implausible(row)
        return found

    def _note(self, row: AuditCheckpoint, *, signature: bool) -> Skipped | None:
        try:
            note = av.parse_note(row.note)
        except ValueError as exc:
            return Skipped(row.pk, row.size, av.PARSE, f"its note does not parse: {exc}")
        columns = (row.log, row.size, row.head_hash, row.signed_at, row.chain_head)
        if columns != (note.origin, note.size, note.head, note.time, note.chain or "") or (note.chain and not row.tree):
            return Skipped(row.pk, row.size, av.CHECKPOINT_MISMATCH, "its row says otherwise than its note")
        if signature and self.keys:
            try:
                av.check_note_signature(note, self.keys)
            except av.VerifyFailure as exc:
                return Skipped(row.pk, row.size, exc.reason, exc.detail)
        return None

    def switch(self) -> AuditCheckpoint | None:
        if not self._looked_up:
            self._looked_up = True
            candidates = AuditCheckpoint.objects.filter(log=self.log, tree=True).exclude(chain_head="").order_by("pk")
            self._switch = next((row for row in candidates[:_PAGE] if self._note(row, signature=True) is None), None)
        return self._switch

    def _kind(self, row: AuditCheckpoint) -> Skipped | None:
        if row.chain_head:
            return None  # the switch: its note itself says it is one
        switch = self.switch()
        if switch is None:
            fits = not row.tree  # before the switch there are chain checkpoints only
        elif row.tree:
            fits = row.size > switch.size or (row.size == switch.size and row.head_hash == switch.head_hash)
        else:
            fits = row.size < switch.size or (row.size == switch.size and row.head_hash == switch.chain_head)
        if fits:
            return None
        kind = "a tree" if row.tree else "a chain (version 1)"
        return Skipped(
            row.pk, row.size, av.CHECKPOINT_MISMATCH, f"its row calls it {kind} checkpoint; its note is not one"
        )


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
    judge: Judge,
    skipped: list[Skipped] | None = None,
) -> AuditCheckpoint | None:
    """The first genuine row of `candidates` (in their order); the rows passed over go to `skipped`."""
    for offset in range(0, EXAMINE_LIMIT, _PAGE):
        page = list(candidates[offset : offset + _PAGE])
        for row in page:
            found = judge.problem(row)
            if found is None:
                return row
            add_skipped(skipped, found)
        if len(page) < _PAGE:
            return None
    raise TooManySkipped(
        f"the {EXAMINE_LIMIT} newest candidate checkpoint rows all fail to verify: the checkpoint table is "
        "being flooded with forged rows"
    )


def add_skipped(skipped: list[Skipped] | None, found: Skipped) -> None:
    """Add a passed-over row to `skipped`, once."""
    if skipped is not None and all(seen.pk != found.pk for seen in skipped):
        skipped.append(found)


def newest(*, log: str, keys: list[av.VerifierKey], skipped: list[Skipped] | None = None) -> AuditCheckpoint | None:
    """The log's newest genuine checkpoint: the largest size, then the latest time."""
    candidates = AuditCheckpoint.objects.filter(log=log).order_by("-size", "-signed_at", "-pk")
    return first_genuine(candidates, judge=Judge(log=log, keys=keys, plausible=True), skipped=skipped)
