"""Version-2 and -3 exports: entries as RFC 9162 leaves, checked against signed tree roots.

A full export replays every leaf into a compact range (O(log n) memory) and compares the root at
each tree checkpoint; version-1 entries before the switch checkpoint are also checked as the hash
chain they were written as. An operation or range export holds the closing checkpoint and proofs
against it - nothing of any other entry but hashes: in format 2 an inclusion proof after each
entry; in format 3, after each group of entries (at most BATCH_MAX_ENTRIES, held in memory until
their proof), one batch proof whose hashes with the entries' leaves recompute the signed root
(merkle.batch_root). The proof lines and what they prove are proofs.py; an entry's fields are
entry_check.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from . import merkle
from .base import (
    BAD_PROOF,
    BATCH_MAX_ENTRIES,
    CHECKPOINT_MISMATCH,
    COVERAGE_GRACE,
    HASH_MISMATCH,
    INCONSISTENT,
    PARSE,
    PIN_MISMATCH,
    SEQ_GAP,
    STALE,
    UNSIGNED_TAIL,
    UNWITNESSED,
    Note,
    VerifierKey,
    VerifyFailure,
    check_note_signature,
    format_time,
    parse_note,
)
from .chain import ChainVerifier
from .entry_check import parse_entry
from .proofs import check_batch, consistent, leads_to, leaf_of, parse_batch, parse_proof
from .witness import WitnessKey, witnesses_of

# RFC 8785 sorts keys: a version-2 entry starts with its actor and ends with "v":2.
_ENTRY_START = b'{"actor":{'
_V2_END = b',"v":2}'


@dataclass(slots=True)
class TreeVerifier:
    """Feed it the lines of a version-2 export after the header; `finish()` returns the summary."""

    keys: Sequence[VerifierKey]
    log: str
    scope: str = "full"
    operation_id: str | None = None
    strict: bool = False
    pins: Sequence[Note] = ()
    # `manage.py audit_verify` reads the database, which holds no consistency proofs (it replays
    # every leaf instead) and may hold entries the signer has not signed yet.
    require_consistency: bool = True
    allow_unsigned_tail: bool = False
    # --witness-key / --witnesses-required: some checkpoint must carry that many cosignatures.
    witness_keys: Sequence[WitnessKey] = ()
    witnesses_required: int = 0
    # Format 3: an operation or range export proves its entries in batches.
    batch: bool = False

    tree: merkle.CompactRange = field(default_factory=merkle.CompactRange)
    chain: ChainVerifier | None = None
    switched: bool = False
    entries: int = 0
    checkpoints: int = 0
    last_note: Note | None = None
    last_tree_note: Note | None = None
    closing: Note | None = None
    first_unsigned: int | None = None
    consistency: dict[int, dict[str, object]] = field(default_factory=dict)
    earlier: list[Note] = field(default_factory=list)  # an operation export's witnessed checkpoints
    witnessed: Note | None = None
    start_frontier: list[str] | None = None  # a full export after an archive: where it starts
    _pending: bytes | None = None  # an operation export's entry awaiting its inclusion proof
    # Format 3: the entries awaiting their batch proof: leaf hash, and a version-1 entry's own
    # (seq, log), which must be the ones the proof places it at.
    _group: list[tuple[bytes, tuple[object, object] | None]] = field(default_factory=list)
    _last_seq: int = 0
    _line: int = 0

    def __post_init__(self) -> None:
        self.chain = ChainVerifier(keys=self.keys, log=self.log, scope="full", strict=self.strict)

    def _fail(self, reason: str, detail: str, *, seq: int | None = None) -> VerifyFailure:
        return VerifyFailure(reason, detail, seq=seq, line=self._line)

    # entries ---------------------------------------------------------------------------------------

    def check_entry(self, line: bytes, seq: int | None) -> dict:
        """The parsed entry (version 1 entries are returned as parsed, for the chain to check)."""
        try:
            return parse_entry(line, log=self.log, strict=self.strict)
        except ValueError as exc:
            raise self._fail(PARSE, str(exc), seq=seq) from None

    def entry(self, line: bytes, *, number: int) -> None:
        self._line = number
        if self.batch:
            self._batched_entry(line)
            return
        if self.scope != "full":
            if self._pending is not None:
                raise self._fail(BAD_PROOF, "an entry without its inclusion proof", seq=self._last_seq + 1)
            self._pending = line
            return
        if self.replay([line], 0, first=number):
            return
        seq = self.tree.size + 1
        obj = self.check_entry(line, seq)
        if obj.get("v") == 1:
            if self.switched:
                raise self._fail(PARSE, "a version-1 entry after the switch to the tree", seq=seq)
            assert self.chain is not None
            self.chain.entry(line, number=number)
        elif not self.switched:
            raise self._fail(CHECKPOINT_MISMATCH, "a version-2 entry before the switch checkpoint", seq=seq)
        self.tree.push(leaf_of(line))
        self.entries += 1
        if self.first_unsigned is None:
            self.first_unsigned = seq

    def replay(self, lines: list[bytes], start: int, *, first: int) -> int:
        """Add the version-2 entries of a full export from ``lines[start:]`` (line `first` is
        ``lines[0]``) up to the first other line; returns that line's index.

        The hot loop of a million-entry export: a version-2 line is hashed as it is, and its bytes
        are bound to the next signed root, so parsing it would change no verdict - a changed byte
        fails there (HASH_MISMATCH), a changed line with no root after it is an UNSIGNED_TAIL.
        --strict, the signer and audit_verify parse every entry instead (`entry`)."""
        if not self.switched or self.strict or self.scope != "full":
            return start
        before = self.tree.size
        end = self.tree.absorb(lines, start, prefix=_ENTRY_START, suffix=_V2_END)
        if end > start:
            self.entries += end - start
            if self.first_unsigned is None:
                self.first_unsigned = before + 1
            self._line = first + end - 1
        return end

    def _batched_entry(self, line: bytes) -> None:
        if self.closing is None:
            raise self._fail(PARSE, "an entry before the closing checkpoint")
        if len(self._group) >= BATCH_MAX_ENTRIES:
            raise self._fail(PARSE, f"more than {BATCH_MAX_ENTRIES} entries without a batch proof")
        obj = self.check_entry(line, None)
        if self.scope == "operation" and obj.get("operation_id") != self.operation_id:
            raise self._fail(PARSE, "an entry of another operation than the header's")
        v1 = (obj.get("seq"), obj.get("log")) if obj.get("v") == 1 else None
        self._group.append((leaf_of(line), v1))

    def batch_line(self, line: bytes, *, number: int) -> None:
        """Format 3: the proof of the entries read since the last one."""
        self._line = number
        try:
            batch = parse_batch(line)
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._fail(PARSE, f"batch line: {exc}", seq=self._last_seq + 1) from None
        closing = self.closing
        if not self.batch or closing is None:
            raise self._fail(PARSE, "a batch proof belongs after entries of a format-3 operation or range export")
        group, self._group = self._group, []
        check_batch(batch=batch, group=group, closing=closing, last_seq=self._last_seq, log=self.log, line=self._line)
        self._last_seq = batch.seqs[-1]
        self.entries += len(group)

    def inclusion(self, line: bytes, *, number: int) -> None:
        self._line = number
        if self.batch:
            raise self._fail(PARSE, "a format-3 export proves its entries in batches, not one by one")
        seq = self._last_seq + 1
        try:
            proof = parse_proof(line, "inclusion", ("seq", "size"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._fail(PARSE, f"inclusion line: {exc}", seq=seq) from None
        entry, self._pending = self._pending, None
        closing = self.closing
        if entry is None or closing is None or self.scope == "full":
            raise self._fail(PARSE, "an inclusion proof belongs after an entry of an operation or range export")
        # Typing: checked to be an int on the next line.
        seq = proof["seq"]  # type: ignore[assignment]
        assert type(seq) is int
        if seq <= self._last_seq:
            raise self._fail(SEQ_GAP, f"entry {seq} comes after entry {self._last_seq}", seq=seq)
        obj = self.check_entry(entry, seq)
        if obj.get("v") == 1 and (obj.get("seq") != seq or obj.get("log") != self.log):
            raise self._fail(BAD_PROOF, f"the version-1 entry is not entry {seq} of this log", seq=seq)
        if self.scope == "operation" and obj.get("operation_id") != self.operation_id:
            raise self._fail(PARSE, f"entry {seq} belongs to another operation than the header's", seq=seq)
        ok = proof["size"] == closing.size and merkle.verify_inclusion(
            index=seq - 1,
            size=closing.size,
            leaf=leaf_of(entry),
            # Typing: parse_proof checked hashes is a list of 32-byte values.
            proof=proof["hashes"],  # type: ignore[arg-type]
            root=bytes.fromhex(closing.head),
        )
        if not ok:
            raise self._fail(BAD_PROOF, f"entry {seq} is not proven in the tree of size {closing.size}", seq=seq)
        self._last_seq = seq
        self.entries += 1

    # checkpoints -----------------------------------------------------------------------------------

    def frontier_line(self, line: bytes, *, number: int, start: int) -> None:
        """`{"frontier": {"size", "hashes"}}`: the tree an earlier archive holds, continued here.
        Nothing vouches for it but the signed roots it must lead to (and the archive itself, when
        verified together)."""
        self._line = number
        try:
            body = parse_proof(line, "frontier", ("size",))
            # Typing: parse_proof checked size is an integer and hashes a list of 32-byte values.
            tree = merkle.CompactRange(body["size"], body["hashes"])  # type: ignore[arg-type]
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._fail(PARSE, f"frontier line: {exc}") from None
        if self.scope != "full" or self.tree.size or self.entries or body["size"] != start or start == 0:
            raise self._fail(PARSE, "a frontier line opens a full export that starts after an archive")
        self.tree = tree
        self.switched = True  # archives end at a tree checkpoint, past the switch
        self.start_frontier = [digest.hex() for digest in tree.hashes()]

    def consistency_line(self, line: bytes, *, number: int) -> None:
        self._line = number
        try:
            proof = parse_proof(line, "consistency", ("from", "to"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._fail(PARSE, f"consistency line: {exc}") from None
        # Typing: parse_proof checked from is an integer.
        self.consistency[proof["from"]] = proof  # type: ignore[index]

    def checkpoint(self, note_text: str, *, number: int) -> None:
        self._line = number
        try:
            note = parse_note(note_text)
        except ValueError as exc:
            raise self._fail(PARSE, f"checkpoint: {exc}", seq=self.tree.size) from None
        if not self.switched and note.chain is None and self.scope == "full":
            assert self.chain is not None
            self.chain.checkpoint(note_text, number=number)
            self._note_seen(note)
            self.first_unsigned = None
            self._check_pins(note.size)
            return
        try:
            check_note_signature(note, self.keys)
        except VerifyFailure as exc:
            raise self._fail(exc.reason, exc.detail, seq=note.size) from None
        if note.origin != self.log:
            raise self._fail(CHECKPOINT_MISMATCH, f"checkpoint of another log ({note.origin[:80]!r})", seq=note.size)
        self._witness(note)
        if self.scope != "full":
            if self.entries or self._pending is not None or self._group:
                raise self._fail(CHECKPOINT_MISMATCH, "checkpoints come before the entries and their proofs")
            if self.closing is not None:
                self.earlier.append(self.closing)
            self.closing = note
            self._note_seen(note)
            return
        if note.chain is not None:
            self._switch(note)
        elif note.size < self.tree.size:
            raise self._fail(CHECKPOINT_MISMATCH, f"checkpoint of size {note.size} after entry {self.tree.size}")
        elif note.size > self.tree.size:
            missing = f"entries {self.tree.size + 1}-{note.size} are missing"
            raise self._fail(SEQ_GAP, missing, seq=self.tree.size + 1)
        if self.tree.root().hex() != note.head:
            raise self._fail(
                HASH_MISMATCH, f"the entries up to {note.size} do not hash to the signed root", seq=note.size
            )
        self._check_consistency(note)
        self._note_seen(note)
        self.last_tree_note = note
        self.first_unsigned = None
        self._check_pins(note.size)

    def _witness(self, note: Note) -> None:
        if self.witness_keys and len(witnesses_of(note, self.witness_keys)) >= max(1, self.witnesses_required):
            if self.witnessed is None or note.size >= self.witnessed.size:
                self.witnessed = note

    def _switch(self, note: Note) -> None:
        assert self.chain is not None
        if self.switched:
            raise self._fail(CHECKPOINT_MISMATCH, "a second switch checkpoint", seq=note.size)
        if note.size != self.chain.head_seq or note.size != self.tree.size:
            raise self._fail(CHECKPOINT_MISMATCH, f"the switch checkpoint (size {note.size}) is out of place")
        if note.chain != self.chain.head:
            raise self._fail(
                HASH_MISMATCH, "the chain head signed at the switch differs from the entries'", seq=note.size
            )
        self.switched = True

    def _check_consistency(self, note: Note) -> None:
        previous = self.last_tree_note
        if previous is None or previous.size in (0, note.size) or not self.require_consistency:
            return
        proof = self.consistency.pop(previous.size, None)
        if proof is None or proof["to"] != note.size or not consistent(old=previous, new=note, proof=proof):
            detail = f"no valid consistency proof from size {previous.size} to {note.size}"
            raise self._fail(INCONSISTENT, detail, seq=note.size)

    def _note_seen(self, note: Note) -> None:
        last = self.last_note
        if last is not None and note.time < last.time:
            raise self._fail(CHECKPOINT_MISMATCH, "checkpoint older than the one before it", seq=note.size)
        self.last_note = note
        self.checkpoints += 1

    def _check_pins(self, size: int) -> None:
        heads = {self.tree.root().hex()}
        if not self.switched and self.chain is not None:
            heads.add(self.chain.head)
        for pin in self.pins:
            if pin.size == size and pin.head not in heads:
                raise self._fail(
                    PIN_MISMATCH, f"the pinned head of size {pin.size} differs from the export's", seq=size
                )

    # end --------------------------------------------------------------------------------------------

    def finish(self, *, covered_until: datetime | None = None) -> dict[str, object]:
        if self._pending is not None:
            raise self._fail(BAD_PROOF, "the last entry has no inclusion proof", seq=self._last_seq + 1)
        if self._group:
            detail = f"the last {len(self._group)} entries have no batch proof"
            raise self._fail(BAD_PROOF, detail, seq=self._last_seq + 1)
        if self.first_unsigned is not None and not self.allow_unsigned_tail:
            detail = f"entries {self.first_unsigned}-{self.tree.size} come after the last checkpoint"
            raise self._fail(UNSIGNED_TAIL, detail, seq=self.first_unsigned)
        newest = self.last_note
        if newest is None:
            raise self._fail(PARSE, "the export holds no checkpoint")
        if self.scope == "full" and not self.switched:
            raise self._fail(CHECKPOINT_MISMATCH, "a version-2 export without its switch checkpoint")
        if self.scope != "full" and self.entries == 0:
            raise self._fail(PARSE, f"no entry of {self.operation_id or 'the range'}")
        if covered_until is not None and newest.time < covered_until - COVERAGE_GRACE:
            raise self._fail(
                STALE,
                f"newest checkpoint {newest.time_text} is older than --covered-until {format_time(covered_until)} "
                f"minus {int(COVERAGE_GRACE.total_seconds())} s",
            )
        self._final_pins(newest)
        for note in self.earlier:
            if not leads_to(old=note, new=newest, consistency=self.consistency):
                detail = f"no valid consistency proof from the checkpoint of size {note.size} to the closing one"
                raise self._fail(INCONSISTENT, detail, seq=note.size)
        if self.witnesses_required and self.witnessed is None:
            detail = f"no checkpoint carries cosignatures of {self.witnesses_required} of the given witnesses"
            raise self._fail(UNWITNESSED, detail)
        return {
            "ok": True,
            "entries": self.entries,
            "checkpoints": self.checkpoints,
            "log": self.log,
            "size": newest.size,
            "root": newest.head,
            "covered_until": newest.time_text,
            "witnessed_size": None if self.witnessed is None else self.witnessed.size,
            "start_frontier": self.start_frontier,
            "frontier": [digest.hex() for digest in self.tree.hashes()] if self.scope == "full" else None,
            "unsigned_tail": 0 if self.first_unsigned is None else self.tree.size - self.first_unsigned + 1,
        }

    def _final_pins(self, newest: Note) -> None:
        """A pin the export did not pass through is checked with a consistency proof to the end."""
        for pin in self.pins:
            if self.scope == "full" and pin.size <= self.tree.size:
                continue  # checked against the replayed tree at its size
            if pin.size > newest.size:
                raise self._fail(PIN_MISMATCH, f"the export does not reach the pinned size {pin.size}", seq=pin.size)
            if pin.size == newest.size:
                if pin.head != newest.head:
                    raise self._fail(PIN_MISMATCH, f"two signed roots for size {pin.size}", seq=pin.size)
                continue
            proof = self.consistency.get(pin.size)
            if proof is None or proof["to"] != newest.size:
                detail = f"no consistency proof from the pinned size {pin.size} (export with --consistency-from)"
                raise self._fail(PIN_MISMATCH, detail, seq=pin.size)
            if not consistent(old=pin, new=newest, proof=proof):
                raise self._fail(
                    PIN_MISMATCH, f"the pinned checkpoint of size {pin.size} is inconsistent", seq=pin.size
                )
