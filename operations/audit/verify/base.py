"""Shared definitions of the offline verifier: reason codes, times, keys, signed notes, canonical lines."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

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
# Version 2: entries are RFC 9162 leaves (docs/DESIGN.md section 8); the body has no seq or prev.
EXPORT_FORMAT_V2 = "pollerdash-audit-export/2"
HEADER_V2_CONSTANTS = {"canon": "rfc8785", "hash": "sha256", "tree": "rfc9162"}
# `from`: the tree size before the first entry (0, or where an earlier archive ends: a full export
# then opens with that size's `{"frontier": ...}`, the right edge of the tree the archive holds).
HEADER_V2_KEYS = frozenset(
    {"format", "log", "scope", "operation_id", "exported_at", "size", "from"} | set(HEADER_V2_CONSTANTS)
)
# Version 3 (operation and range exports only; full exports stay version 2): the selected entries
# verbatim, each group of them followed by one batch inclusion proof (`{"batch": {"size", "seqs",
# "hashes"}}`) that shares nodes between the entries; hashes in base64. Same header fields as 2.
EXPORT_FORMAT_V3 = "pollerdash-audit-export/3"
# A batch proves at most this many entries: what the verifier holds in memory at once.
BATCH_MAX_ENTRIES = 4096
ENTRY_V2_KEYS = frozenset({"v", "log", "at", "type", "actor", "operation_id", "data"})
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
BAD_PROOF = "BAD_PROOF"
INCONSISTENT = "INCONSISTENT"
UNWITNESSED = "UNWITNESSED"

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
    head: str  # hex: the chain head (version 1) or the tree root (version 2) at `size`
    time: datetime
    time_text: str
    body: str  # the signed text, final LF included
    signatures: tuple[Signature, ...]
    # Only on the switch checkpoint: the version-1 chain head at `size`, whose `head` is the tree root.
    chain: str | None = None


def note_body(*, origin: str, size: int, head: str, time: datetime, chain: str | None = None) -> str:
    """The text a checkpoint signs: origin, size, base64 head, time (and, on the switch checkpoint,
    `chain <base64 chain head>`); each line LF-terminated."""
    if not origin or "\n" in origin or origin != origin.strip():
        raise ValueError("bad origin")
    for value in (head, chain or head):
        if not _HEX64_RE.match(value):
            raise ValueError("head must be 64 lowercase hex digits")
    head_b64 = base64.b64encode(bytes.fromhex(head)).decode()
    extra = "" if chain is None else f"chain {base64.b64encode(bytes.fromhex(chain)).decode()}\n"
    return f"{origin}\n{size}\n{head_b64}\ntime {format_time(time)}\n{extra}"


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
    if len(lines) not in (4, 5):
        raise ValueError(f"a checkpoint has 4 lines (origin, size, head, time) or 5 (chain), not {len(lines)}")
    origin, size_text, head_b64, time_line = lines[:4]
    chain = None
    if len(lines) == 5:
        if not lines[4].startswith("chain "):
            raise ValueError("the fifth line is not 'chain <base64 hash>'")
        chain_raw = _strict_b64decode(lines[4][6:])
        if len(chain_raw) != 32:
            raise ValueError("the chain line is not a 32-byte hash")
        chain = chain_raw.hex()
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
    return Note(origin, int(size_text), head_raw.hex(), when, time_text, body, tuple(signatures), chain)


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
