"""Verifying the stored tree before a tree checkpoint is signed, and the whole log in the database.

The signer trusts neither the integrator's nodes nor the columns: it replays the leaf hashes of
the stored entry bytes since the last tree checkpoint onto that checkpoint's right edge (itself
checked against the signed root), and signs only if the stored nodes give the same root.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from operations.audit import genuine, ledger, tree
from operations.audit import verify as av
from operations.audit.chaincheck import StoredEntry, feed_stored_entry, iter_entries, stored_bytes
from operations.audit.integrate import chain_size
from operations.audit.verify import merkle
from operations.models import AuditCheckpoint, AuditEntry, AuditHead, AuditTree


@dataclass(frozen=True)
class TreeSegment:
    size: int
    root: str
    entries: int


def verify_tree_anchor(checkpoint: AuditCheckpoint, keys: list[av.VerifierKey]) -> av.Note:
    """A stored tree checkpoint: well-formed, signed by a trusted key, agreeing with its row, and
    the stored nodes at its size still give its root."""
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
    try:
        root = tree.root_at(log=checkpoint.log, size=checkpoint.size)
    except tree.TreeError as exc:
        raise av.VerifyFailure(av.SEQ_GAP, str(exc), seq=checkpoint.size) from None
    if root.hex() != note.head:
        detail = f"the stored tree of size {checkpoint.size} no longer gives its signed root"
        raise av.VerifyFailure(av.HASH_MISMATCH, detail, seq=checkpoint.size)
    if checkpoint.size > ledger.archived_upto(checkpoint.log):
        # The entry at the signed size must still be there with its bytes: a log cut back to an
        # earlier size, or the last signed entry edited, stops the signer here.
        body = AuditEntry.objects.filter(log=checkpoint.log, seq=checkpoint.size).values_list("body", flat=True).first()
        if body is None:
            detail = f"entry {checkpoint.size}, covered by a checkpoint, is missing"
            raise av.VerifyFailure(av.SEQ_GAP, detail, seq=checkpoint.size)
        leaf = tree.nodes(log=checkpoint.log, wanted=[(0, checkpoint.size - 1)])[(0, checkpoint.size - 1)]
        if merkle.leaf_hash(stored_bytes(body)) != leaf:
            detail = f"entry {checkpoint.size} no longer hashes to its signed leaf"
            raise av.VerifyFailure(av.HASH_MISMATCH, detail, seq=checkpoint.size)
    return note


def check_stored_entry(checker: av.TreeVerifier, row: StoredEntry, *, chained: int) -> bytes:
    """The leaf hash of one stored row; its bytes and copied columns checked (version 2 here: the
    chain verifier checks version-1 rows)."""
    leaf = merkle.leaf_hash(row.body)
    if row.seq is not None and row.seq <= chained:
        return leaf
    body = checker.check_entry(row.body, row.seq)
    if (
        body.get("v") != 2
        or row.entry_hash != leaf.hex()
        or row.type != body.get("type")
        or row.operation_id != (body.get("operation_id") or "")
        or av.format_time(row.at) != body.get("at")
    ):
        raise av.VerifyFailure(
            av.HASH_MISMATCH, f"the stored columns of entry {row.seq} disagree with its hashed bytes", seq=row.seq
        )
    return leaf


def verify_tree_segment(*, log: str, anchor: AuditCheckpoint | None, keys: list[av.VerifierKey]) -> TreeSegment:
    """Replay the leaves after `anchor` (a tree checkpoint; the whole log when None) up to the
    integrated size; raises VerifyFailure when the entries or the stored nodes disagree."""
    size = AuditTree.objects.filter(log=log).values_list("size", flat=True).first() or 0
    chained = chain_size(log)
    if size < chained:
        raise av.VerifyFailure(av.SEQ_GAP, f"the tree holds {size} of the {chained} chained entries", seq=size + 1)
    if anchor is None:
        edge = merkle.CompactRange()
    else:
        verify_tree_anchor(anchor, keys)
        edge = tree.frontier(log=log, size=anchor.size)
    checker = av.TreeVerifier(keys=keys, log=log, scope="full", strict=True)
    start = edge.size
    for row in iter_entries(log=log, after=start, upto=size):
        if row.seq != edge.size + 1:
            raise av.VerifyFailure(av.SEQ_GAP, f"entry {edge.size + 1} is missing", seq=edge.size + 1)
        edge.push(check_stored_entry(checker, row, chained=chained))
    if edge.size != size:
        raise av.VerifyFailure(av.SEQ_GAP, f"entries {edge.size + 1}-{size} are missing", seq=edge.size + 1)
    root = edge.root()
    try:
        stored = tree.root_at(log=log, size=size)
    except tree.TreeError as exc:
        raise av.VerifyFailure(av.SEQ_GAP, str(exc), seq=size) from None
    if stored != root:
        raise av.VerifyFailure(av.HASH_MISMATCH, "the stored tree nodes disagree with the entries", seq=size)
    return TreeSegment(size=size, root=root.hex(), entries=size - start)


def verify_log(*, log: str, keys: list[av.VerifierKey], checkpoints: Iterator[AuditCheckpoint]) -> dict[str, object]:
    """Every stored entry (bytes, chain links, columns) and every stored checkpoint (signature,
    place, head or root), streaming; `checkpoints` in (size, insertion) order. Entries after the
    newest checkpoint and pending ones are normal here: counted.

    Checkpoint rows that are not the signer's (operations.audit.genuine) are passed over, so one
    forged row does not hide what the rest of the log says, and reported after everything else
    verified; so are archive ledger rows the log does not record (operations.audit.ledger)."""
    verifier = av.TreeVerifier(keys=keys, log=log, scope="full", strict=True, require_consistency=False)
    verifier.allow_unsigned_tail = True
    assert verifier.chain is not None
    verifier.chain.allow_unsigned_tail = True
    chained = chain_size(log)
    archives = ledger.read(log)
    start = archives.upto
    if start:
        # Entries up to `start` are in archive files (verified when written, and by the offline
        # verifier with the archives); here the log continues from the tree's stored right edge.
        verifier.tree = tree.frontier(log=log, size=start)
        verifier.switched = True
    feed = _CheckpointFeed(verifier=verifier, judge=genuine.Judge(log=log, keys=keys), rows=checkpoints)
    feed.open_at(start=start)
    _replay_entries(verifier=verifier, log=log, start=start, chained=chained, feed=feed)
    _refuse_leftovers(verifier=verifier, log=log, start=start, skipped=feed.skipped, archives=archives)
    newest = verifier.last_note
    return {
        "ok": True,
        "entries": verifier.entries,
        "checkpoints": verifier.checkpoints,
        "log": log,
        "size": verifier.tree.size,
        "switched": verifier.switched,
        "covered_until": newest.time_text if newest else None,
        "unsigned_tail": 0 if verifier.first_unsigned is None else verifier.tree.size - verifier.first_unsigned + 1,
    }


@dataclass
class _CheckpointFeed:
    """The stored checkpoint rows, handed to the verifier as the entries reach their sizes; a row
    that is not the signer's is set aside in `skipped`."""

    verifier: av.TreeVerifier
    judge: genuine.Judge
    rows: Iterator[AuditCheckpoint]
    line: int = 0  # the entry read last, where a checkpoint's failure is reported
    skipped: list[genuine.Skipped] = field(default_factory=list)
    upcoming: AuditCheckpoint | None = None

    def __post_init__(self) -> None:
        self.upcoming = next(self.rows, None)

    def open_at(self, *, start: int) -> None:
        """The rows before the first stored entry after `start` (the archived size): fed when the
        log starts at entry 1, passed over in the archive but for the tree's at its size."""
        while self.upcoming is not None and (self.upcoming.size == 0 or self.upcoming.size < start):
            if not start:
                self.feed(self.upcoming)
            self.upcoming = next(self.rows, None)
        if start:
            # Of the checkpoints at the archived size, only the tree's: the chain and the switch are archived.
            while self.upcoming is not None and self.upcoming.size == start:
                if self.upcoming.tree and not self.upcoming.chain_head:
                    self.feed(self.upcoming)
                self.upcoming = next(self.rows, None)

    def upto(self, size: int | None) -> None:
        """Every row up to `size`; every row left when None."""
        while self.upcoming is not None and (size is None or self.upcoming.size <= size):
            self.feed(self.upcoming)
            self.upcoming = next(self.rows, None)

    def feed(self, row: AuditCheckpoint) -> None:
        # The signature is the verifier's to check (once); a row that fails it, like one whose note
        # is malformed or disagrees with its columns, changed nothing in the verifier yet.
        found = self.judge.problem(row, signature=False)
        if found is None:
            try:
                self.verifier.checkpoint(row.note, number=self.line)
            except av.VerifyFailure as exc:
                if exc.reason not in (av.BAD_SIGNATURE, av.UNKNOWN_KEY):
                    raise
                found = genuine.Skipped(row.pk, row.size, exc.reason, exc.detail)
        if found is not None:
            self.skipped.append(found)


def _replay_entries(*, verifier: av.TreeVerifier, log: str, start: int, chained: int, feed: _CheckpointFeed) -> None:
    """The stored entries after `start`, each checkpoint fed once the entries reach its size."""
    assert verifier.chain is not None
    for row in iter_entries(log=log, after=start):
        feed.line += 1
        if row.seq != verifier.tree.size + 1:
            raise av.VerifyFailure(av.SEQ_GAP, f"entry {verifier.tree.size + 1} is missing", seq=verifier.tree.size + 1)
        if row.seq <= chained:
            feed_stored_entry(verifier.chain, row)
            verifier.tree.push(merkle.leaf_hash(row.body))
            verifier.entries += 1
            verifier.first_unsigned = verifier.first_unsigned or row.seq
        else:
            check_stored_entry(verifier, row, chained=chained)
            verifier.entry(row.body, number=feed.line)
        feed.upto(row.seq)
    # A checkpoint signed a size the stored log does not reach: entries were removed.
    feed.upto(None)


def _refuse_leftovers(
    *, verifier: av.TreeVerifier, log: str, start: int, skipped: list[genuine.Skipped], archives: ledger.Ledger
) -> None:
    """What the replay passed over: the head row, checkpoint rows that are not the signer's,
    archive rows the log does not record."""
    assert verifier.chain is not None
    head = AuditHead.objects.filter(log=log).values_list("seq", "head_hash").first()
    if not start and head is not None and head != (verifier.chain.head_seq, verifier.chain.head):
        raise av.VerifyFailure(
            av.LINK_BREAK,
            f"the head row (seq {head[0]}) disagrees with the stored chain (seq {verifier.chain.head_seq})",
            seq=head[0],
        )
    if skipped:
        rows = "; ".join(str(row) for row in skipped[:5])
        raise av.VerifyFailure(
            skipped[0].reason,
            f"{len(skipped)} checkpoint rows are not the signer's (forged, or signed by a key missing from the "
            f"trusted keys): {rows}; everything else verified ({verifier.entries} entries)",
            seq=skipped[0].size,
        )
    if archives.problems:
        raise av.VerifyFailure(
            ledger.UNRECORDED_ARCHIVE,
            "; ".join(archives.problems) + f"; everything else verified ({verifier.entries} entries)",
            seq=None,
        )
