"""The version-1 hash chain, one line at a time (entries carry seq and prev)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .base import (
    _TIME_RE,
    ACTOR_KEYS,
    CHECKPOINT_MISMATCH,
    COVERAGE_GRACE,
    ENTRY_KEYS,
    ENTRY_TAG,
    GENESIS_PREV,
    HASH_MISMATCH,
    LINK_BREAK,
    PARSE,
    PIN_MISMATCH,
    SCOPES,
    SEQ_GAP,
    STALE,
    UNSIGNED_TAIL,
    Note,
    VerifierKey,
    VerifyFailure,
    check_note_signature,
    compact_json,
    format_time,
    parse_note,
)

# --- the chain, one line at a time ------------------------------------------------------------------------


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _reject_float(text: str) -> object:
    raise ValueError("audit documents hold integers only")


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        # Typing: set.add answers None; `or` uses it to record the key and go on (the first repeat is found).
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {duplicate!r}")
    return result


_FAST = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_reject_float)
_EXACT = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_reject_float, object_pairs_hook=_unique_pairs)
# The C scanner behind JSONDecoder.decode, without its two whitespace regex passes per line.
# Typing: scan_once is set on every JSONDecoder at run time; typeshed leaves it out.
_scan_fast = _FAST.scan_once  # type: ignore[attr-defined]


def parse_json_line(line: bytes) -> object:
    """Strict JSON: valid UTF-8, no duplicate keys, no NaN/Infinity, no floats, nothing after it."""
    return _EXACT.decode(line.decode("utf-8"))


@dataclass(slots=True)
class ChainVerifier:
    """Feed it entry bodies and checkpoint notes in export order; `finish()` returns the summary.

    Every method raises VerifyFailure on the first problem. `scope` says where segments may start:
    "full" exports start at seq 1 and never skip; "range" holds one segment; "operation" any number.
    """

    keys: Sequence[VerifierKey]
    log: str | None = None
    scope: str = "full"
    operation_id: str | None = None
    strict: bool = False
    allow_unsigned_tail: bool = False
    pins: Sequence[Note] = ()

    head_seq: int = 0
    head: str = GENESIS_PREV
    anchored: bool = True  # the position is genesis or a verified checkpoint
    jumped: bool = True  # ...reached at the start or by skipping entries: a new segment opens here
    entries: int = 0
    checkpoints: int = 0
    segments: int = 0
    first_seq: int | None = None
    prev_of_first: str | None = None
    first_unsigned: int | None = None
    last_note: Note | None = None
    last_entry: dict | None = None  # the parsed body of the newest entry, for callers' own checks
    _last_line: bytes | None = None
    _interval_has_operation: bool = False  # since the last checkpoint (operation exports)
    _pins_left: dict[int, Note] = field(default_factory=dict)
    _line: int = 0

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}")
        for pin in self.pins:
            self._pins_left[pin.size] = pin
        self._check_pin()

    # entries --------------------------------------------------------------------------------------

    def entry(self, line: bytes, *, number: int | None = None) -> None:
        """One entry body: the exact stored bytes, without the line feed.

        This is the hot loop of a million-entry verification, hence the flat, cheap checks first
        and the explanations only on the way out."""
        self._line = number or self._line + 1
        obj, text = self._parse(line)
        seq, at = obj["seq"], obj["at"]
        if seq != self.head_seq + 1:
            self._exact_check(line, text)
            raise self._fail(SEQ_GAP, f"expected seq {self.head_seq + 1}, found {seq}", seq=seq)
        prev = obj["prev"]
        if prev != self.head:
            raise self._broken_link(line, text, seq=seq)
        operation_id, actor = obj["operation_id"], obj["actor"]
        if (
            obj["log"] != self.log
            or type(at) is not str
            or len(at) != 27
            or type(obj["type"]) is not str
            or not (operation_id is None or type(operation_id) is str)
            or type(actor["kind"]) is not str
            or type(actor["id"]) is not str
            or (self.strict and not _TIME_RE.match(at))
        ):
            self._check_fields(obj, seq)
        if self.jumped:
            self._open_segment(seq, prev)
            self.jumped = False
        if operation_id == self.operation_id:
            self._interval_has_operation = True
        self._advance(line, obj, seq=seq)

    def _parse(self, line: bytes) -> tuple[dict, str]:
        """The entry's JSON with version 1's fields, and its text (for the exact checks)."""
        try:
            text = line.decode("utf-8")
            obj, end = _scan_fast(text, 0)
        except (UnicodeDecodeError, ValueError, StopIteration) as exc:
            raise self._fail(PARSE, f"entry is not valid JSON: {exc}", seq=self.head_seq + 1) from None
        if end != len(text):
            raise self._fail(PARSE, "bytes after the entry's JSON value", seq=self.head_seq + 1)
        if type(obj) is not dict or obj.keys() != ENTRY_KEYS:
            raise self._fail(PARSE, "not an audit entry (fields differ from v1)", seq=self.head_seq + 1)
        actor, data = obj["actor"], obj["data"]
        if type(actor) is not dict or actor.keys() != ACTOR_KEYS or type(data) is not dict:
            raise self._fail(PARSE, "entry actor or data is malformed", seq=self.head_seq + 1)
        if self.strict:
            self._exact_check(line, text)
        seq, version = obj["seq"], obj["v"]
        if type(seq) is not int or type(version) is not int or version != 1:
            raise self._fail(PARSE, "seq and v are integers; v is 1", seq=self.head_seq + 1)
        return obj, text

    def _broken_link(self, line: bytes, text: str, *, seq: int) -> VerifyFailure:
        """Why entry `seq`'s prev is not the head: a bad line, a wrong anchor or an altered entry before it."""
        self._exact_check(line, text)
        if self.anchored:
            return self._fail(LINK_BREAK, f"prev does not match the segment's anchor at seq {self.head_seq}", seq=seq)
        self._exact_check_previous()
        return self._fail(
            HASH_MISMATCH,
            f"entry {self.head_seq} does not hash to the prev recorded by entry {seq}",
            seq=self.head_seq,
        )

    def _advance(self, line: bytes, obj: dict, *, seq: int) -> None:
        """Entry `seq` is the new head."""
        self.head = hashlib.sha256(ENTRY_TAG + line).hexdigest()
        self.head_seq = seq
        self.last_entry = obj
        self._last_line = line
        self.entries += 1
        if self.anchored:
            self.anchored = False
            self.first_unsigned = seq
        if self._pins_left and seq in self._pins_left:
            self._check_pin()

    def _exact_check(self, line: bytes, text: str, *, seq: int | None = None) -> None:
        """Duplicate keys (and, with --strict, any non-canonical spelling) are a PARSE failure.

        By default this runs only on a line already found wrong: a line whose bytes hash into a
        signed chain is byte for byte what pollerdash wrote - RFC 8785 output, which never has
        duplicate keys - so checking every line would change no verdict, only cost time. The
        signer and `manage.py audit_verify` run strict, so nothing with duplicates gets signed."""
        seq = self.head_seq + 1 if seq is None else seq
        try:
            obj = _EXACT.decode(text)
        except ValueError as exc:
            raise self._fail(PARSE, f"entry is not strict JSON: {exc}", seq=seq) from None
        if self.strict and compact_json(obj) != line:
            raise self._fail(PARSE, "entry is not in canonical form (RFC 8785)", seq=seq)

    def _exact_check_previous(self) -> None:
        if self._last_line is not None:
            self._exact_check(self._last_line, self._last_line.decode("utf-8"), seq=self.head_seq)

    def _check_fields(self, obj: dict, seq: int) -> None:
        """Says which field is wrong (called only when the cheap checks in `entry` failed)."""
        if self.log is None:
            self.log = obj["log"]
        elif obj["log"] != self.log:
            raise self._fail(PARSE, f"entry of another log ({str(obj['log'])[:80]!r})", seq=seq)
        at = obj["at"]
        if type(at) is not str or not _TIME_RE.match(at):
            raise self._fail(PARSE, "at is not a UTC time with six fractional digits", seq=seq)
        if type(obj["type"]) is not str or not obj["type"]:
            raise self._fail(PARSE, "type is not a string", seq=seq)
        operation_id = obj["operation_id"]
        if operation_id is not None and type(operation_id) is not str:
            raise self._fail(PARSE, "operation_id is not a string or null", seq=seq)
        actor = obj["actor"]
        if type(actor["kind"]) is not str or type(actor["id"]) is not str:
            raise self._fail(PARSE, "actor kind and id are strings", seq=seq)

    def _open_segment(self, seq: int, prev: str) -> None:
        self.segments += 1
        if self.scope == "range" and self.segments > 1:
            raise self._fail(SEQ_GAP, "a range export is one contiguous segment", seq=seq)
        if self.first_seq is None:
            self.first_seq, self.prev_of_first = seq, prev

    # checkpoints ----------------------------------------------------------------------------------

    def checkpoint(self, note_text: str, *, number: int | None = None) -> Note:
        self._line = number or self._line + 1
        try:
            note = parse_note(note_text)
        except ValueError as exc:
            raise self._fail(PARSE, f"checkpoint: {exc}", seq=self.head_seq) from None
        try:
            check_note_signature(note, self.keys)
        except VerifyFailure as exc:
            raise self._fail(exc.reason, exc.detail, seq=note.size) from None
        if self.log is None:
            self.log = note.origin
        elif note.origin != self.log:
            raise self._fail(CHECKPOINT_MISMATCH, f"checkpoint of another log ({note.origin[:80]!r})", seq=note.size)
        last = self.last_note
        if last is not None and note.time < last.time:
            raise self._fail(CHECKPOINT_MISMATCH, "checkpoint older than the one before it", seq=note.size)
        if note.size < self.head_seq:
            raise self._fail(CHECKPOINT_MISMATCH, f"checkpoint of size {note.size} after entry {self.head_seq}")
        if self.scope == "operation" and not self.anchored and not self._interval_has_operation:
            # An operation export holds only the checkpoint intervals around its entries, so an
            # interval without one means the header names another operation than the content.
            detail = f"entries up to {self.head_seq} hold no entry of {self.operation_id}"
            raise self._fail(PARSE, detail, seq=note.size)
        if note.size == self.head_seq:
            if note.head != self.head:
                if self.anchored:
                    raise self._fail(CHECKPOINT_MISMATCH, "two signed heads for one size (a fork)", seq=note.size)
                self._exact_check_previous()
                raise self._fail(HASH_MISMATCH, f"entry {note.size} does not hash to the signed head", seq=note.size)
        elif not self.anchored:
            raise self._fail(SEQ_GAP, f"entries {self.head_seq + 1}-{note.size} are missing", seq=self.head_seq + 1)
        elif self.scope == "full":
            raise self._fail(SEQ_GAP, f"entries {self.head_seq + 1}-{note.size} are missing", seq=self.head_seq + 1)
        else:
            # A segment boundary: the next segment (or the closing checkpoint) starts here.
            self.head_seq, self.head = note.size, note.head
            self.jumped = True
        self.anchored = True
        self.first_unsigned = None
        self._interval_has_operation = False
        self.checkpoints += 1
        self.last_note = note
        if self._pins_left and note.size in self._pins_left:
            self._check_pin()
        return note

    # end ------------------------------------------------------------------------------------------

    def finish(self, *, covered_until: datetime | None = None) -> dict[str, object]:
        if self.first_unsigned is not None and not self.allow_unsigned_tail:
            raise self._fail(
                UNSIGNED_TAIL,
                f"entries {self.first_unsigned}-{self.head_seq} come after the last checkpoint",
                seq=self.first_unsigned,
            )
        if self.scope == "operation" and not self.segments:
            raise self._fail(PARSE, f"no entry of {self.operation_id}", seq=self.head_seq)
        newest = self.last_note
        if covered_until is not None and (newest is None or newest.time < covered_until - COVERAGE_GRACE):
            seen = newest.time_text if newest else "none"
            raise self._fail(
                STALE,
                f"newest checkpoint {seen} is older than --covered-until {format_time(covered_until)} "
                f"minus {int(COVERAGE_GRACE.total_seconds())} s",
                seq=self.head_seq,
            )
        if self._pins_left:
            size = min(self._pins_left)
            raise self._fail(PIN_MISMATCH, f"the export does not reach the pinned size {size}", seq=size)
        return {
            "ok": True,
            "entries": self.entries,
            "checkpoints": self.checkpoints,
            "segments": self.segments,
            "log": self.log,
            "first_seq": self.first_seq,
            "last_seq": self.head_seq,
            "head": self.head,
            "covered_until": newest.time_text if newest else None,
            "unsigned_tail": 0 if self.first_unsigned is None else self.head_seq - self.first_unsigned + 1,
        }

    def _check_pin(self) -> None:
        pin = self._pins_left.get(self.head_seq)
        if pin is None:
            return
        if pin.head != self.head:
            detail = f"the pinned head of size {pin.size} differs from the export's"
            raise self._fail(PIN_MISMATCH, detail, seq=pin.size)
        del self._pins_left[self.head_seq]

    def skipped_pins(self) -> None:
        """Pins whose size a segment jump stepped over cannot be checked: the export lacks them."""
        for size in sorted(self._pins_left):
            if size < self.head_seq:
                raise self._fail(PIN_MISMATCH, f"the export does not contain the pinned size {size}", seq=size)

    def _fail(self, reason: str, detail: str, *, seq: int | None = None) -> VerifyFailure:
        return VerifyFailure(reason, detail, seq=seq, line=self._line)
