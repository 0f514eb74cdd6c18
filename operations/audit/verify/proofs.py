"""The proof lines of a version-2 or -3 export, and what they prove.

An inclusion, consistency or frontier line is ``{"<kind>": {<integer fields>, "hashes": [hex]}}``;
a format-3 batch line is ``{"batch": {"size", "seqs", "hashes"}}`` with `seqs` as ``[first, last]``
runs and `hashes` base64 (the subtrees merkle.batch_ranges names). Every line is canonical JSON.
"""

from __future__ import annotations

import base64
import binascii
from typing import NamedTuple

from . import merkle
from .base import BAD_PROOF, BATCH_MAX_ENTRIES, SEQ_GAP, Note, VerifyFailure
from .chain import compact_json, parse_json_line

_HEX = frozenset("0123456789abcdef")


def _hashes(value: object) -> list[bytes]:
    if type(value) is not list or not all(type(h) is str and len(h) == 64 and _HEX.issuperset(h) for h in value):
        raise ValueError("hashes are 64 lowercase hex digits")
    return [bytes.fromhex(h) for h in value]


def parse_proof(line: bytes, kind: str, keys: tuple[str, ...]) -> dict[str, object]:
    """A `{"inclusion": {...}}` or `{"consistency": {...}}` line, canonical, with integer fields."""
    obj = parse_json_line(line)
    if type(obj) is not dict or list(obj) != [kind] or type(obj[kind]) is not dict:
        raise ValueError(f'not a {{"{kind}": {{...}}}} line')
    body = obj[kind]
    if sorted(body) != sorted((*keys, "hashes")) or not all(type(body[k]) is int and body[k] >= 0 for k in keys):
        raise ValueError(f"{kind} fields are {', '.join(keys)} (integers) and hashes")
    if compact_json(obj) != line:
        raise ValueError(f"{kind} line is not in canonical form")
    body["hashes"] = _hashes(body["hashes"])
    return body


class Batch(NamedTuple):
    size: int
    seqs: list[int]  # the seqs it proves
    hashes: list[bytes]


def parse_batch(line: bytes) -> Batch:
    """A `{"batch": {...}}` line, canonical."""
    obj = parse_json_line(line)
    if type(obj) is not dict or list(obj) != ["batch"] or type(obj["batch"]) is not dict:
        raise ValueError('not a {"batch": {...}} line')
    body = obj["batch"]
    if sorted(body) != ["hashes", "seqs", "size"] or type(body["size"]) is not int or body["size"] < 1:
        raise ValueError("batch fields are size (an integer), seqs and hashes")
    if compact_json(obj) != line:
        raise ValueError("batch line is not in canonical form")
    return Batch(body["size"], _seq_runs(body["seqs"]), _base64_hashes(body["hashes"]))


def _seq_runs(runs: object) -> list[int]:
    """The seqs of canonical ``[first, last]`` runs: in order, at least one seq apart (touching
    runs are written as one), at most BATCH_MAX_ENTRIES in all."""
    seqs: list[int] = []
    if type(runs) is not list or not runs:
        raise ValueError("seqs is a list of [first, last] runs")
    last = 0
    for run in runs:
        if type(run) is not list or len(run) != 2 or not all(type(n) is int for n in run):
            raise ValueError("seqs is a list of [first, last] runs")
        if not (last + 2 if last else 1) <= run[0] <= run[1]:
            raise ValueError("seq runs are increasing and separate, from seq 1 on")
        if len(seqs) + run[1] - run[0] + 1 > BATCH_MAX_ENTRIES:
            raise ValueError(f"a batch proves at most {BATCH_MAX_ENTRIES} entries")
        seqs.extend(range(run[0], run[1] + 1))
        last = run[1]
    return seqs


def _base64_hashes(hashes: object) -> list[bytes]:
    if type(hashes) is not list or not all(type(h) is str and len(h) == 44 for h in hashes):
        raise ValueError("hashes are base64 strings of 32 bytes")
    try:
        raw = [base64.b64decode(h, validate=True) for h in hashes]
    except binascii.Error:
        raise ValueError("hashes are base64 strings of 32 bytes") from None
    if any(len(digest) != 32 or base64.b64encode(digest).decode() != h for digest, h in zip(raw, hashes, strict=True)):
        raise ValueError("hashes are canonical base64 strings of 32 bytes")
    return raw


def leaf_of(line: bytes) -> bytes:
    return merkle.leaf_hash(line)


def consistent(*, old: Note, new: Note, proof: dict[str, object]) -> bool:
    """Whether a consistency proof leads from the signed root `old` to the signed root `new`."""
    return merkle.verify_consistency(
        old=old.size,
        new=new.size,
        old_root=bytes.fromhex(old.head),
        new_root=bytes.fromhex(new.head),
        # Typing: parse_proof checked hashes is a list of 32-byte values.
        proof=proof["hashes"],  # type: ignore[arg-type]
    )


def leads_to(*, old: Note, new: Note, consistency: dict[int, dict[str, object]]) -> bool:
    """Whether the signed root `old` is `new`'s (same size) or a consistency proof of the export
    (`consistency`, by the size it starts from) leads from it to `new`."""
    if old.size == new.size:
        return old.head == new.head
    proof = consistency.get(old.size)
    return proof is not None and proof["to"] == new.size and consistent(old=old, new=new, proof=proof)


def check_batch(
    *,
    batch: Batch,
    group: list[tuple[bytes, tuple[object, object] | None]],
    closing: Note,
    last_seq: int,
    log: str,
    line: int,
) -> None:
    """That a batch proof places the entries read since the last one (`group`: leaf hash, and a
    version-1 entry's own (seq, log)) in the closing checkpoint's tree, after entry `last_seq`."""

    def fail(reason: str, detail: str, seq: int) -> VerifyFailure:
        return VerifyFailure(reason, detail, seq=seq, line=line)

    size, seqs, hashes = batch

    named = f"entries {seqs[0]}-{seqs[-1]}" if len(seqs) > 1 else f"entry {seqs[0]}"
    if len(seqs) != len(group):
        raise fail(
            SEQ_GAP, f"the batch proof proves {len(seqs)} entries ({named}) but {len(group)} come before it", seqs[0]
        )
    if seqs[0] <= last_seq:
        raise fail(SEQ_GAP, f"entry {seqs[0]} comes after entry {last_seq}", seqs[0])
    for seq, (_, v1) in zip(seqs, group, strict=True):
        if v1 is not None and v1 != (seq, log):
            raise fail(BAD_PROOF, f"the version-1 entry is not entry {seq} of this log", seq)
    if size != closing.size or seqs[-1] > size:
        raise fail(
            BAD_PROOF,
            f"the batch proof is for a tree of size {size}, the closing checkpoint's is {closing.size}",
            seqs[0],
        )
    try:
        root = merkle.batch_root([seq - 1 for seq in seqs], [leaf for leaf, _ in group], hashes, size)
    except ValueError as exc:
        raise fail(BAD_PROOF, f"{named}: {exc}", seqs[0]) from None
    if root.hex() != closing.head:
        detail = (
            f"{named} are not proven in the tree of size {size}: an entry or a hash was altered, "
            "or the entries were reordered or replaced"
        )
        raise fail(BAD_PROOF, detail, seqs[0])
