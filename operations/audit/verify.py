"""pollerdash-audit-verify: check an audit export offline (docs/DESIGN.md section 8).

    pollerdash-audit-verify EXPORT.jsonl --keys KEYS [--covered-until T] [--pin CHECKPOINT ...] [--strict]

This module imports only the standard library and `cryptography` (for Ed25519), so an incident
reviewer can copy this one file next to an export and run it anywhere Python 3.11+ runs, with no
Django, no database and no pollerdash install. pollerdash itself imports the note, key and chain
primitives from here, so the signer, `manage.py audit_verify` and this tool share one definition.

What an export holds (one UTF-8 JSON document per LF-terminated line, no BOM, no CR):

1. a header line ``{"header": {"format": "pollerdash-audit-export/1", ...}}`` (unsigned, so every
   field of it is checked against what follows);
2. audit entry bodies, verbatim (the exact RFC 8785 bytes that were hashed), in ``seq`` order;
3. ``{"checkpoint": "<signed note>"}`` lines right after the entry whose ``seq`` equals the note's
   size; the last line is the checkpoint signed when the export was made.

Entry hash: ``SHA-256(b"pollerdash/audit/entry/v1\\n" + line)``; each entry's ``prev`` is the hash
of the entry before it (64 zeros for ``seq`` 1). A checkpoint is a C2SP signed note::

    <log name>
    <size: number of entries covered>
    <base64 of the 32-byte hash of entry `size`: a hash-chain head, NOT an RFC 6962 Merkle root>
    time <RFC 3339 UTC, 6 fractional digits>

    — <key name> <base64(4-byte key id || 64-byte Ed25519 signature)>

Key id = ``SHA-256(name || 0x0A || 0x01 || raw public key)[:4]``. A keys file holds one verifier
key per line, ``<name>+<hex key id>+<base64(0x01 || raw public key)>``, optionally followed by
``not_before=T`` / ``not_after=T`` (a key is trusted for checkpoints whose time lies in that window,
with two hours of slack either side); ``#`` starts a comment.

Exports of one operation, or of a time window, hold segments of the chain: each segment opens at
seq 1 or right after a signed checkpoint (its head is the anchor of the segment's first ``prev``)
and closes with a signed checkpoint, so no entry inside a segment can be altered, dropped or
reordered. Which segments were selected is not signed: completeness for one operation is proven
by a full export.

Reason codes (the first failure is reported, with its ``seq`` and line number):

- PARSE: not a well-formed export (BOM, CR, blank line, no final LF, bad JSON, duplicate keys,
  trailing bytes, over-long line, unknown field, a header that does not match the content)
- SEQ_GAP: an entry is missing, duplicated or out of order
- HASH_MISMATCH: entry ``seq`` does not hash to the value committed for it (the ``prev`` of the
  entry after it, or the head of the checkpoint of that size): its bytes were altered
- LINK_BREAK: the first entry of a segment does not link to its anchor (genesis or a checkpoint)
- BAD_SIGNATURE: a checkpoint carries a signature of a trusted key that does not verify
- UNKNOWN_KEY: a checkpoint has no signature of any trusted key (valid at its time)
- CHECKPOINT_MISMATCH: a checkpoint is out of place or contradicts another (wrong log, smaller
  size, older time, two heads for one size) or the header's closing checkpoint is not the last one
- UNSIGNED_TAIL: entries after the last checkpoint (nothing vouches for them)
- STALE: ``--covered-until T`` and the newest checkpoint is older than T minus one interval (60 s)
- PIN_MISMATCH: a ``--pin`` checkpoint does not verify, or the export does not contain its size
  with the same head (the export was truncated or rewritten)

Exit status: 0 valid, 1 tampered or inconsistent, 2 usage or I/O error. One JSON line on stdout.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import BinaryIO

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ENTRY_TAG = b"pollerdash/audit/entry/v1\n"
GENESIS_PREV = "0" * 64
EXPORT_FORMAT = "pollerdash-audit-export/1"
HEADER_CONSTANTS = {"canon": "rfc8785", "hash": "sha256", "entry_tag": ENTRY_TAG.decode().strip()}
HEADER_KEYS = frozenset(
    {"format", "log", "scope", "operation_id", "exported_at", "first_seq", "last_seq", "prev_of_first"}
    | set(HEADER_CONSTANTS)
)
SCOPES = ("full", "range", "operation")
ENTRY_KEYS = frozenset({"v", "log", "seq", "prev", "at", "type", "actor", "operation_id", "data"})
ACTOR_KEYS = frozenset({"kind", "id"})
# One line is one entry or one note; pollerdash caps an entry body far below this.
MAX_LINE_BYTES = 1 << 20
# --covered-until tolerates one checkpoint interval: the signer signs every 60 s.
COVERAGE_GRACE = timedelta(seconds=60)
# A key's validity window is widened by this much (clock skew, rotation boundaries).
KEY_SLACK = timedelta(hours=2)
SIGNATURE_DASH = "\u2014 "
ALGORITHM_ED25519 = b"\x01"

PARSE = "PARSE"
SEQ_GAP = "SEQ_GAP"
HASH_MISMATCH = "HASH_MISMATCH"
LINK_BREAK = "LINK_BREAK"
BAD_SIGNATURE = "BAD_SIGNATURE"
UNKNOWN_KEY = "UNKNOWN_KEY"
CHECKPOINT_MISMATCH = "CHECKPOINT_MISMATCH"
UNSIGNED_TAIL = "UNSIGNED_TAIL"
STALE = "STALE"
PIN_MISMATCH = "PIN_MISMATCH"

EXIT_OK, EXIT_TAMPERED, EXIT_USAGE = 0, 1, 2

_TIME_RE = re.compile(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z")
_SIZE_RE = re.compile(r"\A(0|[1-9][0-9]{0,17})\Z")
_HEX64_RE = re.compile(r"\A[0-9a-f]{64}\Z")
_KEY_NAME_RE = re.compile(r"\A[!-*,-~]+\Z")  # printable ASCII without space and '+'


class VerifyFailure(Exception):
    """The first thing wrong with an export: a reason code, where, and a sentence."""

    def __init__(self, reason: str, detail: str, *, seq: int | None = None, line: int | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.seq = seq
        self.line = line

    def as_dict(self) -> dict[str, object]:
        return {"ok": False, "reason": self.reason, "seq": self.seq, "line": self.line, "detail": self.detail}


class UsageError(Exception):
    """Bad arguments, an unreadable file or an unusable keys file (exit status 2)."""


# --- times -------------------------------------------------------------------------------------------


def format_time(value: datetime) -> str:
    """RFC 3339 UTC with exactly six fractional digits, as inside entries and notes."""
    if value.tzinfo is None:
        raise ValueError("naive datetime")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """The strict inverse of format_time."""
    if _TIME_RE.match(text):
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    raise ValueError(f"not a UTC time with six fractional digits: {text[:40]!r}")


def parse_cli_time(text: str) -> datetime:
    """RFC 3339 from a person: 'Z' or an offset required, fractions optional."""
    value = datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone (add Z or +00:00)")
    return value.astimezone(UTC)


# --- keys ----------------------------------------------------------------------------------------------


def key_id_for(name: str, public_raw: bytes) -> bytes:
    """C2SP signed-note key id of an Ed25519 key: SHA-256(name || LF || 0x01 || pubkey)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + ALGORITHM_ED25519 + public_raw).digest()[:4]


def verifier_key_line(name: str, public_raw: bytes) -> str:
    if not _KEY_NAME_RE.match(name):
        raise ValueError(f"key name {name!r} must be printable ASCII without spaces or '+'")
    encoded = base64.b64encode(ALGORITHM_ED25519 + public_raw).decode()
    return f"{name}+{key_id_for(name, public_raw).hex()}+{encoded}"


@dataclass(frozen=True)
class VerifierKey:
    name: str
    key_id: bytes
    public_raw: bytes
    not_before: datetime | None = None
    not_after: datetime | None = None

    @property
    def line(self) -> str:
        return verifier_key_line(self.name, self.public_raw)

    def valid_at(self, when: datetime) -> bool:
        if self.not_before is not None and when < self.not_before - KEY_SLACK:
            return False
        return not (self.not_after is not None and when > self.not_after + KEY_SLACK)

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_raw).verify(signature, message)
        except InvalidSignature:
            return False
        return True


def parse_verifier_key(text: str) -> VerifierKey:
    """One keys-file line: `name+hexid+base64 [not_before=T] [not_after=T]`."""
    fields = text.split()
    if not fields:
        raise ValueError("empty key line")
    parts = fields[0].split("+", 2)  # base64 may itself contain '+'; the name may not
    if len(parts) != 3:
        raise ValueError("a verifier key is name+keyid+base64")
    name, hex_id, encoded = parts
    if not _KEY_NAME_RE.match(name):
        raise ValueError(f"bad key name {name!r}")
    try:
        blob = _strict_b64decode(encoded)
    except ValueError as exc:
        raise ValueError(f"key {name}: {exc}") from None
    if len(blob) != 33 or blob[:1] != ALGORITHM_ED25519:
        raise ValueError(f"key {name}: not an Ed25519 verifier key (0x01 followed by 32 bytes)")
    public_raw = blob[1:]
    if not re.fullmatch(r"[0-9a-f]{8}", hex_id) or bytes.fromhex(hex_id) != key_id_for(name, public_raw):
        raise ValueError(f"key {name}: key id {hex_id!r} does not match the key")
    bounds: dict[str, datetime] = {}
    for extra in fields[1:]:
        label, eq, value = extra.partition("=")
        if not eq or label not in ("not_before", "not_after") or label in bounds:
            raise ValueError(f"key {name}: unknown option {extra!r} (not_before=T, not_after=T)")
        bounds[label] = parse_cli_time(value)
    return VerifierKey(name, bytes.fromhex(hex_id), public_raw, bounds.get("not_before"), bounds.get("not_after"))


def parse_keys(text: str) -> list[VerifierKey]:
    keys = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            keys.append(parse_verifier_key(line))
        except ValueError as exc:
            raise UsageError(f"keys file line {number}: {exc}") from None
    if not keys:
        raise UsageError("the keys file holds no verifier key")
    return keys


def _strict_b64decode(text: str) -> bytes:
    """Standard base64 with padding, and only its one canonical spelling (no spare bits)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None
    if base64.b64encode(raw).decode() != text:
        raise ValueError("not canonical base64")
    return raw


# --- signed notes ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signature:
    name: str
    key_id: bytes
    signature: bytes


@dataclass(frozen=True)
class Note:
    origin: str
    size: int
    head: str  # hex of the chain head (entry hash of `size`, or 64 zeros for an empty log)
    time: datetime
    time_text: str
    body: str  # the signed text, final LF included
    signatures: tuple[Signature, ...]


def note_body(*, origin: str, size: int, head: str, time: datetime) -> str:
    """The text a checkpoint signs: origin, size, base64 head, time; each line LF-terminated."""
    if not origin or "\n" in origin or origin != origin.strip():
        raise ValueError("bad origin")
    if not _HEX64_RE.match(head):
        raise ValueError("head must be 64 lowercase hex digits")
    head_b64 = base64.b64encode(bytes.fromhex(head)).decode()
    return f"{origin}\n{size}\n{head_b64}\ntime {format_time(time)}\n"


def signature_line(*, name: str, key_id: bytes, signature: bytes) -> str:
    return f"{SIGNATURE_DASH}{name} {base64.b64encode(key_id + signature).decode()}\n"


def parse_note(text: str) -> Note:
    """Strict C2SP signed-note parsing of a pollerdash checkpoint; ValueError says what is wrong."""
    if not text.endswith("\n"):
        raise ValueError("a note ends with a newline")
    body_end = text.find("\n\n")
    if body_end < 0:
        raise ValueError("no blank line between the note text and its signatures")
    body = text[: body_end + 1]
    lines = body[:-1].split("\n")
    if len(lines) != 4:
        raise ValueError(f"a checkpoint has 4 lines (origin, size, head, time), not {len(lines)}")
    origin, size_text, head_b64, time_line = lines
    if not origin or origin != origin.strip():
        raise ValueError("bad origin line")
    if not _SIZE_RE.match(size_text):
        raise ValueError("bad size line")
    head_raw = _strict_b64decode(head_b64)
    if len(head_raw) != 32:
        raise ValueError("the head line is not a 32-byte hash")
    if not time_line.startswith("time "):
        raise ValueError("the fourth line is not 'time <RFC 3339>'")
    time_text = time_line[5:]
    when = parse_time(time_text)
    signatures = []
    for raw in text[body_end + 2 : -1].split("\n"):
        if not raw.startswith(SIGNATURE_DASH):
            raise ValueError("a signature line starts with an em dash and a space")
        name, space, encoded = raw[len(SIGNATURE_DASH) :].partition(" ")
        if not space or not _KEY_NAME_RE.match(name):
            raise ValueError("bad signature line")
        blob = _strict_b64decode(encoded)
        if len(blob) < 5:
            raise ValueError("signature too short")
        signatures.append(Signature(name, blob[:4], blob[4:]))
    if not signatures:
        raise ValueError("the note is not signed")
    return Note(origin, int(size_text), head_raw.hex(), when, time_text, body, tuple(signatures))


def check_note_signature(note: Note, keys: Sequence[VerifierKey]) -> VerifierKey:
    """The trusted key that signed the note; VerifyFailure(BAD_SIGNATURE | UNKNOWN_KEY) otherwise.

    Signatures of keys we do not know are ignored (signed-note rule), so cosigners can be added;
    a signature of a key we trust that does not verify fails the whole note."""
    message = note.body.encode()
    trusted = None
    for sig in note.signatures:
        for key in keys:
            if key.name != sig.name or key.key_id != sig.key_id or not key.valid_at(note.time):
                continue
            if len(sig.signature) != 64 or not key.verify(message, sig.signature):
                detail = f"the signature of key {key.name}+{key.key_id.hex()} does not verify"
                raise VerifyFailure(BAD_SIGNATURE, detail)
            trusted = trusted or key
    if trusted is None:
        names = ", ".join(f"{s.name}+{s.key_id.hex()}" for s in note.signatures)
        raise VerifyFailure(UNKNOWN_KEY, f"no trusted key (valid at {note.time_text}) signed this checkpoint: {names}")
    return trusted


# --- canonical lines written by the exporter --------------------------------------------------------------


def compact_json(value: object) -> bytes:
    """Sorted keys, no whitespace, UTF-8: RFC 8785 for documents with ASCII keys and no floats."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def checkpoint_line(note: str) -> bytes:
    return compact_json({"checkpoint": note}) + b"\n"


def header_line(header: dict[str, object]) -> bytes:
    return compact_json({"header": header}) + b"\n"


# --- the chain, one line at a time ------------------------------------------------------------------------


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _reject_float(text: str) -> object:
    raise ValueError("audit documents hold integers only")


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {duplicate!r}")
    return result


_FAST = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_reject_float)
_EXACT = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_reject_float, object_pairs_hook=_unique_pairs)
# The C scanner behind JSONDecoder.decode, without its two whitespace regex passes per line.
_scan_fast = _FAST.scan_once


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
        seq, version, at = obj["seq"], obj["v"], obj["at"]
        if type(seq) is not int or type(version) is not int or version != 1:
            raise self._fail(PARSE, "seq and v are integers; v is 1", seq=self.head_seq + 1)
        if seq != self.head_seq + 1:
            self._exact_check(line, text)
            raise self._fail(SEQ_GAP, f"expected seq {self.head_seq + 1}, found {seq}", seq=seq)
        prev = obj["prev"]
        if prev != self.head:
            self._exact_check(line, text)
            if self.anchored:
                detail = f"prev does not match the segment's anchor at seq {self.head_seq}"
                raise self._fail(LINK_BREAK, detail, seq=seq)
            self._exact_check_previous()
            raise self._fail(
                HASH_MISMATCH,
                f"entry {self.head_seq} does not hash to the prev recorded by entry {seq}",
                seq=self.head_seq,
            )
        operation_id = obj["operation_id"]
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


# --- a whole export file ----------------------------------------------------------------------------------


def iter_lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(line number, line without LF); PARSE on a BOM, CR, blank line, long line or missing LF."""
    readline = stream.readline
    for number, raw in enumerate(iter(lambda: readline(MAX_LINE_BYTES + 1), b""), start=1):
        if raw[-1:] != b"\n":
            if len(raw) > MAX_LINE_BYTES:
                raise VerifyFailure(PARSE, f"line longer than {MAX_LINE_BYTES} bytes", line=number)
            raise VerifyFailure(PARSE, "the file does not end with a line feed (truncated?)", line=number)
        if raw == b"\n":
            raise VerifyFailure(PARSE, "blank line", line=number)
        if b"\r" in raw:
            raise VerifyFailure(PARSE, "carriage return (CRLF line endings are not allowed)", line=number)
        yield number, raw[:-1]


def _parse_header(line: bytes) -> dict[str, object]:
    if line.startswith(b"\xef\xbb\xbf"):
        raise VerifyFailure(PARSE, "byte order mark at the start of the file", line=1)
    try:
        obj = parse_json_line(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerifyFailure(PARSE, f"header is not valid JSON: {exc}", line=1) from None
    if type(obj) is not dict or list(obj) != ["header"] or type(obj["header"]) is not dict:
        raise VerifyFailure(PARSE, 'the first line is not {"header": {...}}', line=1)
    header = obj["header"]
    if header.get("format") != EXPORT_FORMAT:
        raise VerifyFailure(PARSE, f"unknown export format (expected {EXPORT_FORMAT})", line=1)
    if header.keys() != HEADER_KEYS:
        raise VerifyFailure(PARSE, f"header fields differ from {EXPORT_FORMAT}", line=1)
    if compact_json(obj) != line:
        raise VerifyFailure(PARSE, "header is not in canonical form", line=1)
    for key, value in HEADER_CONSTANTS.items():
        if header[key] != value:
            raise VerifyFailure(PARSE, f"header {key} must be {value!r}", line=1)
    scope, operation_id = header["scope"], header["operation_id"]
    if scope not in SCOPES or (operation_id is not None) != (scope == "operation"):
        raise VerifyFailure(PARSE, "header scope and operation_id disagree", line=1)
    if operation_id is not None and (type(operation_id) is not str or not operation_id):
        raise VerifyFailure(PARSE, "header operation_id is not a string", line=1)
    if type(header["log"]) is not str or type(header["exported_at"]) is not str:
        raise VerifyFailure(PARSE, "header log and exported_at are strings", line=1)
    for key in ("first_seq", "last_seq"):
        value = header[key]
        if not (value is None or type(value) is int) or (key == "last_seq" and value is None):
            raise VerifyFailure(PARSE, f"header {key} is not an integer", line=1)
    return header


def _check_header_against(header: dict[str, object], verifier: ChainVerifier) -> None:
    last = verifier.last_note
    if last is None:
        raise VerifyFailure(PARSE, "the export holds no checkpoint", line=verifier._line)
    if header["last_seq"] != last.size or header["exported_at"] != last.time_text:
        raise VerifyFailure(
            CHECKPOINT_MISMATCH,
            f"the header says the export closes at size {header['last_seq']} signed {header['exported_at']}; "
            f"its last checkpoint is size {last.size} signed {last.time_text} (truncated?)",
            seq=last.size,
            line=verifier._line,
        )
    if header["first_seq"] != verifier.first_seq or header["prev_of_first"] != verifier.prev_of_first:
        raise VerifyFailure(PARSE, "the header's first_seq / prev_of_first do not match the entries", line=1)


def verify_export(
    stream: BinaryIO,
    *,
    keys: Sequence[VerifierKey],
    covered_until: datetime | None = None,
    pins: Sequence[Note] = (),
    strict: bool = False,
) -> dict[str, object]:
    """Verify one export read from `stream`; returns the summary or raises VerifyFailure."""
    lines = iter_lines(stream)
    first = next(lines, None)
    if first is None:
        raise VerifyFailure(PARSE, "empty file", line=1)
    header = _parse_header(first[1])
    for pin in pins:
        if pin.origin != header["log"]:
            raise VerifyFailure(PIN_MISMATCH, "the pinned checkpoint belongs to another log", seq=pin.size)
        try:
            check_note_signature(pin, keys)
        except VerifyFailure as exc:
            raise VerifyFailure(PIN_MISMATCH, f"the pinned checkpoint does not verify: {exc.detail}") from None
    verifier = ChainVerifier(
        keys=keys,
        log=str(header["log"]),
        scope=str(header["scope"]),
        operation_id=header["operation_id"],  # type: ignore[arg-type]
        strict=strict,
        pins=pins,
    )
    checkpoint_prefix = b'{"checkpoint":'
    entry = verifier.entry
    for number, line in lines:
        if line.startswith(checkpoint_prefix):
            verifier.checkpoint(_checkpoint_note(line, number, verifier.head_seq), number=number)
            verifier.skipped_pins()
        else:
            entry(line, number=number)
    result = verifier.finish(covered_until=covered_until)
    _check_header_against(header, verifier)
    result["scope"] = header["scope"]
    result["operation_id"] = header["operation_id"]
    return result


def _checkpoint_note(line: bytes, number: int, seq: int) -> str:
    try:
        obj = parse_json_line(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerifyFailure(PARSE, f"checkpoint line is not valid JSON: {exc}", seq=seq, line=number) from None
    if type(obj) is not dict or list(obj) != ["checkpoint"] or type(obj["checkpoint"]) is not str:
        raise VerifyFailure(PARSE, 'a checkpoint line is {"checkpoint": "<note>"}', seq=seq, line=number)
    if checkpoint_line(obj["checkpoint"]) != line + b"\n":
        raise VerifyFailure(PARSE, "checkpoint line is not in canonical form", seq=seq, line=number)
    return obj["checkpoint"]


def read_pin(path: str) -> Note:
    """A pinned checkpoint: the note text itself, or an export's {"checkpoint": ...} line."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(64 * 1024)
    except OSError as exc:
        raise UsageError(f"cannot read --pin {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
        if text.lstrip().startswith("{"):
            obj = parse_json_line(text.strip().encode())
            if type(obj) is not dict or type(obj.get("checkpoint")) is not str:
                raise ValueError('expected {"checkpoint": "<note>"}')
            text = obj["checkpoint"]
        return parse_note(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"--pin {path} is not a checkpoint: {exc}") from None


def load_keys(path: str) -> list[VerifierKey]:
    try:
        with open(path, encoding="utf-8") as handle:
            return parse_keys(handle.read(1 << 20))
    except OSError as exc:
        raise UsageError(f"cannot read --keys {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--keys {path} is not UTF-8 text") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pollerdash-audit-verify",
        description="Verify a pollerdash audit export offline. Exit 0 valid, 1 tampered, 2 usage or I/O error.",
    )
    parser.add_argument("file", help="the export (JSONL); - reads standard input")
    parser.add_argument("--keys", required=True, help="file of trusted verifier keys, one per line")
    parser.add_argument(
        "--covered-until",
        type=parse_cli_time,
        metavar="T",
        help="fail (STALE) unless a checkpoint signed at or after T minus 60 s is present",
    )
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="CHECKPOINT",
        help="a checkpoint kept elsewhere (a witness copy); the export must contain its size and head",
    )
    parser.add_argument("--strict", action="store_true", help="also require every entry in RFC 8785 form")
    return parser


def run(argv: Sequence[str] | None = None, *, stdin: BinaryIO | None = None) -> tuple[int, dict[str, object]]:
    """The command without printing: (exit status, the JSON object it prints)."""
    try:
        args = build_parser().parse_args(argv)
        keys = load_keys(args.keys)
        pins = [read_pin(path) for path in args.pin]
        if args.file == "-":
            stream = stdin or sys.stdin.buffer
            result = verify_export(stream, keys=keys, covered_until=args.covered_until, pins=pins, strict=args.strict)
        else:
            with open(args.file, "rb", buffering=1 << 16) as handle:
                result = verify_export(
                    handle, keys=keys, covered_until=args.covered_until, pins=pins, strict=args.strict
                )
    except UsageError as exc:
        return EXIT_USAGE, {"ok": False, "reason": "USAGE", "detail": str(exc)}
    except OSError as exc:
        return EXIT_USAGE, {"ok": False, "reason": "IO", "detail": f"{exc.strerror or exc}: {exc.filename}"}
    except VerifyFailure as exc:
        return EXIT_TAMPERED, exc.as_dict()
    return EXIT_OK, result


def main(argv: Sequence[str] | None = None) -> int:
    status, result = run(argv)
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
