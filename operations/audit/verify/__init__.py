"""pollerdash-audit-verify: check an audit export offline (docs/DESIGN.md section 8).

    pollerdash-audit-verify EXPORT.jsonl --keys KEYS [--covered-until T] [--pin CHECKPOINT ...] [--strict]

This package imports only the standard library and `cryptography` (for Ed25519), so an incident
reviewer can copy this one directory next to an export and run it (`python verify/ EXPORT ...`)
anywhere Python 3.11+ runs, with no Django, no database and no pollerdash install. pollerdash
itself imports the note, key, chain and tree primitives from here, so the signer,
`manage.py audit_verify` and this tool share one definition.

Three export formats are read. Version 2 (`pollerdash-audit-export/2`, written since the audit log
became a Merkle tree: full exports, and operation and range exports with one inclusion proof per
entry) and version 3 (`pollerdash-audit-export/3`: operation and range exports whose entries are
proven by batch inclusion proofs) are described in tree.py and docs/DESIGN.md section 8; version 1
follows.

What a version-1 export holds (one UTF-8 JSON document per LF-terminated line, no BOM, no CR):

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
- SEQ_GAP: an entry is missing, duplicated or out of order (version 3: a batch proof names more or
  fewer entries than precede it, or proves entries before ones already proven)
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
  with the same head (the export was truncated or rewritten), or (version 2) no consistency proof
  links it to the export's checkpoints
- BAD_PROOF: (versions 2 and 3) an inclusion or batch proof does not lead from the entries to the
  signed root (an entry or hash altered, entries reordered or replaced), or entries lack their proof
- INCONSISTENT: (version 2) a consistency proof between two checkpoints does not verify
- UNWITNESSED: (version 2) ``--witnesses-required K`` and no checkpoint carries K valid
  cosignatures of the ``--witness-key`` keys (a cosignature by any other key counts for nothing)

Exit status: 0 valid, 1 tampered or inconsistent, 2 usage or I/O error. One JSON line on stdout.
"""

from __future__ import annotations

from . import merkle
from .base import (
    ACTOR_KEYS,
    ALGORITHM_ED25519,
    BAD_PROOF,
    BAD_SIGNATURE,
    BATCH_MAX_ENTRIES,
    CHECKPOINT_MISMATCH,
    COVERAGE_GRACE,
    ENTRY_KEYS,
    ENTRY_TAG,
    ENTRY_V2_KEYS,
    EXIT_OK,
    EXIT_TAMPERED,
    EXIT_USAGE,
    EXPORT_FORMAT,
    EXPORT_FORMAT_V2,
    EXPORT_FORMAT_V3,
    GENESIS_PREV,
    HASH_MISMATCH,
    HEADER_CONSTANTS,
    HEADER_KEYS,
    HEADER_V2_CONSTANTS,
    HEADER_V2_KEYS,
    INCONSISTENT,
    KEY_SLACK,
    LINK_BREAK,
    MAX_LINE_BYTES,
    PARSE,
    PIN_MISMATCH,
    SCOPES,
    SEQ_GAP,
    SIGNATURE_DASH,
    STALE,
    UNKNOWN_KEY,
    UNSIGNED_TAIL,
    UNWITNESSED,
    Note,
    Signature,
    UsageError,
    VerifierKey,
    VerifyFailure,
    check_note_signature,
    checkpoint_line,
    compact_json,
    format_time,
    header_line,
    key_id_for,
    note_body,
    parse_cli_time,
    parse_keys,
    parse_note,
    parse_time,
    parse_verifier_key,
    signature_line,
    verifier_key_line,
)
from .chain import (
    ChainVerifier,
    parse_json_line,
)
from .cli import (
    build_parser,
    main,
    run,
)
from .files import (
    iter_lines,
    load_keys,
    read_pin,
    verify_export,
)
from .tree import TreeVerifier
from .witness import WitnessKey, cosignature_line, cosigned_message, parse_witness_keys, witness_key, witnesses_of

__all__ = [
    "ACTOR_KEYS",
    "ALGORITHM_ED25519",
    "BAD_PROOF",
    "BAD_SIGNATURE",
    "BATCH_MAX_ENTRIES",
    "CHECKPOINT_MISMATCH",
    "COVERAGE_GRACE",
    "ChainVerifier",
    "ENTRY_KEYS",
    "ENTRY_TAG",
    "ENTRY_V2_KEYS",
    "EXIT_OK",
    "EXIT_TAMPERED",
    "EXIT_USAGE",
    "EXPORT_FORMAT",
    "EXPORT_FORMAT_V2",
    "EXPORT_FORMAT_V3",
    "GENESIS_PREV",
    "HASH_MISMATCH",
    "HEADER_CONSTANTS",
    "HEADER_KEYS",
    "HEADER_V2_CONSTANTS",
    "HEADER_V2_KEYS",
    "INCONSISTENT",
    "KEY_SLACK",
    "LINK_BREAK",
    "MAX_LINE_BYTES",
    "Note",
    "PARSE",
    "PIN_MISMATCH",
    "SCOPES",
    "SEQ_GAP",
    "SIGNATURE_DASH",
    "TreeVerifier",
    "UNWITNESSED",
    "WitnessKey",
    "cosignature_line",
    "cosigned_message",
    "parse_witness_keys",
    "witness_key",
    "witnesses_of",
    "STALE",
    "Signature",
    "UNKNOWN_KEY",
    "UNSIGNED_TAIL",
    "UsageError",
    "VerifierKey",
    "VerifyFailure",
    "build_parser",
    "check_note_signature",
    "checkpoint_line",
    "compact_json",
    "format_time",
    "header_line",
    "iter_lines",
    "key_id_for",
    "load_keys",
    "main",
    "merkle",
    "note_body",
    "parse_cli_time",
    "parse_json_line",
    "parse_keys",
    "parse_note",
    "parse_time",
    "parse_verifier_key",
    "read_pin",
    "run",
    "signature_line",
    "verifier_key_line",
    "verify_export",
]
