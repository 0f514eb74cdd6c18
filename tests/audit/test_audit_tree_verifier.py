"""Version 2: the log as an RFC 9162 Merkle tree, its exports, proofs and every way of tampering.

The sample (conftest.sample_export) is a real full export: lines are numbered below. Each tamper
case edits its bytes as an attacker with the file would, and the verifier must exit 1 naming the
reason; operation exports must hold nothing of other operations but hashes.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from operations.audit import checkpoints, integrate
from operations.audit import verify as av
from operations.audit.export import ExportError, stream_export
from operations.audit.verify import files as av_files
from operations.models import AuditCheckpoint, AuditEntry, AuditHead
from tests.audit.helpers import OP_A, OP_B, append_entries, edit, join
from tests.support import T0

pytestmark = pytest.mark.django_db

HEADER, CP0, E1, E2, E3, E4, CP4, E5, E6, E7, E8, C8, CP8, E9, E10, E11, C11, CP11 = range(18)
GOLDEN = Path(__file__).parent / "golden"


def expect(verify, data: bytes, reason: str, *args: str) -> dict:
    status, result = verify(data, *args)
    assert (status, result.get("reason")) == (1, reason), result
    return result


def test_a_genuine_full_export_verifies_with_its_switch_and_consistency_proofs(sample_export, verify):
    lines = sample_export.lines
    assert json.loads(lines[HEADER])["header"]["format"] == "pollerdash-audit-export/2"
    assert av.parse_note(json.loads(lines[CP0])["checkpoint"]).chain == av.GENESIS_PREV
    assert json.loads(lines[C8])["consistency"]["from"] == 4 and json.loads(lines[C11])["consistency"]["to"] == 11
    status, result = verify(sample_export.data, "--strict", "--covered-until", "2026-12-01T10:04:01Z")
    assert status == 0, result
    assert (result["entries"], result["checkpoints"], result["size"]) == (11, 4, 11)
    bodies = [bytes(b) for b in AuditEntry.objects.order_by("seq").values_list("body", flat=True)]
    assert [lines[i] for i in (E1, E2, E3, E4, E5, E6, E7, E8, E9, E10, E11)] == bodies


def test_edited_deleted_swapped_duplicated_entries(sample_export, verify):
    lines = sample_export.lines
    expect(verify, join(lines[:E2] + [edit(lines[E2], decision="succeeded")] + lines[E2 + 1 :]), av.HASH_MISMATCH)
    expect(verify, join(lines[:E6] + lines[E6 + 1 :]), av.SEQ_GAP)
    expect(verify, join(lines[:E5] + [lines[E6], lines[E5]] + lines[E7:]), av.HASH_MISMATCH)
    expect(verify, join(lines[:E6] + [lines[E5]] + lines[E6:]), av.CHECKPOINT_MISMATCH)


def test_truncated_tails_and_crlf(sample_export, verify):
    lines = sample_export.lines
    expect(verify, join(lines[: CP8 + 1]), av.CHECKPOINT_MISMATCH)  # the header names size 11
    expect(verify, sample_export.data[:-10], av.PARSE)
    expect(verify, sample_export.data.replace(b"\n", b"\r\n"), av.PARSE)
    expect(verify, join(lines + [lines[E11]]), av.UNSIGNED_TAIL)


def test_the_first_fault_in_file_order_is_named_whatever_the_read_block_size(sample_export, verify, monkeypatch):
    """The verifier reads a megabyte at a time; a fault is reported at its line, after every line
    before it was checked - also when lines and faults straddle the blocks' edges."""
    lines = sample_export.lines
    edited = join(lines[:E2] + [edit(lines[E2], decision="succeeded")] + lines[E2 + 1 :])
    cases = {
        "genuine": sample_export.data,
        "edited": edited,
        "edited, then a CR after its checkpoint": edited.replace(lines[E9] + b"\n", lines[E9] + b"\r\n"),
        "a CR in an entry": join(lines[:E6] + [lines[E6] + b"\r"] + lines[E6 + 1 :]),
        "a blank line": join(lines[:E7] + [b""] + lines[E7:]),
        "a line over 1 MiB": join(lines[:E3] + [b"x" * (av.MAX_LINE_BYTES + 1)] + lines[E3:]),
        "a line of 1 MiB exactly": join(lines[:E3] + [b"x" * av.MAX_LINE_BYTES] + lines[E3:]),
        "cut mid-line": sample_export.data[:-10],
        "an unsigned tail": join([*lines, lines[E11]]),
    }
    whole = {name: verify(data) for name, data in cases.items()}
    assert whole["genuine"][0] == 0, whole["genuine"]
    assert {name: (status, result.get("reason"), result.get("line")) for name, (status, result) in whole.items()} == {
        "genuine": (0, None, None),
        "edited": (1, av.HASH_MISMATCH, CP4 + 1),
        "edited, then a CR after its checkpoint": (1, av.HASH_MISMATCH, CP4 + 1),
        "a CR in an entry": (1, av.PARSE, E6 + 1),
        "a blank line": (1, av.PARSE, E7 + 1),
        "a line over 1 MiB": (1, av.PARSE, E3 + 1),
        "a line of 1 MiB exactly": (1, av.PARSE, E3 + 1),  # read whole, then not an entry
        "cut mid-line": (1, av.PARSE, CP11 + 1),
        "an unsigned tail": (1, av.UNSIGNED_TAIL, CP11 + 2),
    }
    assert "longer than" not in whole["a line of 1 MiB exactly"][1]["detail"]
    for block in (1, 7, 100, 1000, 300_000):
        monkeypatch.setattr(av_files, "_BLOCK_BYTES", block)
        # A line is re-joined block by block: a 1 MiB one, a byte at a time, would take hours.
        names = [name for name in cases if block > 1000 or "MiB" not in name]
        assert {name: verify(cases[name]) for name in names} == {name: whole[name] for name in names}, block


def test_rewritten_entries_under_the_old_checkpoints_and_re_signed_by_another_key(sample_export, verify, tmp_path):
    lines = sample_export.lines
    lines[E2] = edit(lines[E2], decision="succeeded")
    expect(verify, join(lines), av.HASH_MISMATCH)
    foreign = Ed25519PrivateKey.generate()
    note = av.parse_note(json.loads(lines[CP4])["checkpoint"])
    body = av.note_body(origin=note.origin, size=note.size, head="ab" * 32, time=note.time)
    kid = av.key_id_for(note.origin, foreign.public_key().public_bytes_raw())
    signed = body + "\n" + av.signature_line(name=note.origin, key_id=kid, signature=foreign.sign(body.encode()))
    lines[CP4] = av.checkpoint_line(signed)[:-1]
    expect(verify, join(lines), av.UNKNOWN_KEY)


def test_a_forged_consistency_proof(sample_export, verify):
    lines = sample_export.lines
    proof = json.loads(lines[C11])
    proof["consistency"]["hashes"][0] = "00" * 32
    lines[C11] = av.compact_json(proof)
    expect(verify, join(lines), av.INCONSISTENT)


def test_a_format_2_operation_export_holds_only_its_entries_and_hashes_of_the_others(sample_export, verify):
    data = b"".join(stream_export(operation_id=OP_A, version=2))
    status, result = verify(data, "--strict")
    assert status == 0, result
    assert (result["scope"], result["operation_id"], result["entries"]) == ("operation", OP_A, 6)
    # OP_B's entries are 5, 6, 9, 10, 11: nothing of them - id, request ids, reasons - is in the file.
    assert OP_B.encode() not in data
    for n in (5, 6, 9, 10, 11):
        assert f"req_{n:04d}".encode() not in data
    seqs = [json.loads(line)["inclusion"]["seq"] for line in data.split(b"\n") if line.startswith(b'{"inclusion"')]
    assert seqs == [1, 2, 3, 4, 7, 8]
    assert len(data) < len(sample_export.data)


def test_a_forged_inclusion_proof_and_a_relabelled_format_2_operation_export(sample_export, verify):
    lines = b"".join(stream_export(operation_id=OP_A, version=2)).split(b"\n")[:-1]
    forged = list(lines)
    proof = json.loads(forged[3])
    proof["inclusion"]["hashes"][-1] = "11" * 32
    forged[3] = av.compact_json(proof)
    expect(verify, join(forged), av.BAD_PROOF)
    moved = list(lines)
    proof = json.loads(moved[3])
    proof["inclusion"]["seq"] = 5
    moved[3] = av.compact_json(proof)
    expect(verify, join(moved), av.BAD_PROOF)
    edited = list(lines)
    edited[2] = edit(edited[2], decision="succeeded")
    expect(verify, join(edited), av.BAD_PROOF)
    relabelled = list(lines)
    relabelled[0] = relabelled[0].replace(OP_A.encode(), OP_B.encode())
    expect(verify, join(relabelled), av.PARSE)


def test_a_pinned_checkpoint_is_checked_with_a_consistency_proof(sample_export, verify, tmp_path, clock):
    pin = tmp_path / "witness.checkpoint"
    pin.write_bytes(sample_export.lines[CP8] + b"\n")
    assert verify(sample_export.data, "--pin", str(pin))[0] == 0
    scoped = b"".join(stream_export(operation_id=OP_A))
    expect(verify, scoped, av.PIN_MISMATCH, "--pin", str(pin))  # no proof from size 8 in it
    proven = b"".join(stream_export(operation_id=OP_A, consistency_from=[8]))
    assert verify(proven, "--pin", str(pin))[0] == 0
    # The key holder signs another tree of size 8 (a split view): no proof links it to the export.
    key = checkpoints.load_signing_key()
    note = av.parse_note(json.loads(sample_export.lines[CP8])["checkpoint"])
    body = av.note_body(origin=note.origin, size=8, head="cd" * 32, time=note.time)
    kid = av.key_id_for(note.origin, checkpoints.public_raw(key))
    pin.write_text(body + "\n" + av.signature_line(name=note.origin, key_id=kid, signature=key.sign(body.encode())))
    expect(verify, proven, av.PIN_MISMATCH, "--pin", str(pin))
    expect(verify, sample_export.data, av.PIN_MISMATCH, "--pin", str(pin))


def test_a_time_window_export(sample_export, verify):
    data = b"".join(stream_export(since=T0 + timedelta(seconds=61), until=T0 + timedelta(seconds=62)))
    status, result = verify(data)
    assert status == 0, result
    assert (result["scope"], result["entries"]) == ("range", 4)
    with pytest.raises(ExportError):
        stream_export(since=T0 + timedelta(days=1))


def test_the_database_verification_passes_and_counts_what_is_pending(sample_export, signing_key):
    append_entries(2, operation_id=OP_B, start=12)
    result = checkpoints.verify_chain(keys=[signing_key])
    assert result["ok"] is True and result["size"] == 11 and result["switched"] is True
    assert integrate.lag().pending == 2


def _load_golden_v1() -> list[bytes]:
    """The version-1 sample chain in the database, as a log written before the upgrade holds it."""
    lines = (GOLDEN / "v1-export.jsonl").read_bytes().split(b"\n")[1:-1]
    head = av.GENESIS_PREV
    size = 0
    for line in lines:
        if line.startswith(b'{"checkpoint":'):
            text = json.loads(line)["checkpoint"]
            note = av.parse_note(text)
            AuditCheckpoint.objects.create(
                log=note.origin, size=note.size, head_hash=note.head, signed_at=note.time, key_id="", note=text
            )
            continue
        body = json.loads(line)
        size = body["seq"]
        digest = hashlib.sha256(av.ENTRY_TAG + line).hexdigest()
        AuditEntry.objects.create(
            log=body["log"],
            seq=size,
            prev_hash=body["prev"],
            entry_hash=digest,
            body=line,
            at=av.parse_time(body["at"]),
            type=body["type"],
            operation_id=body["operation_id"] or "",
        )
        head = digest
    AuditHead.objects.create(log="pollerdash/audit", seq=size, head_hash=head)
    return lines


def test_the_switch_from_a_version_1_chain_is_one_signed_checkpoint(db, clock, signing_key, settings, tmp_path, verify):
    keys = tmp_path / "all.keys"
    keys.write_text((GOLDEN / "v1-export.keys").read_text() + signing_key.line + "\n")
    settings.AUDIT_VERIFIER_KEYS_FILE = str(keys)
    _load_golden_v1()
    clock.move_to(T0 + timedelta(minutes=10), tick=False)
    append_entries(2, operation_id=OP_A, start=12)
    closing = checkpoints.sign_checkpoint()
    switch = AuditCheckpoint.objects.get(tree=True, chain_head__gt="")
    assert (switch.size, closing.size) == (11, 13)
    assert av.parse_note(switch.note).chain == AuditHead.objects.get().head_hash
    full = b"".join(stream_export())
    status, result = verify(full, "--strict", keys=keys)
    assert status == 0, result
    assert result["entries"] == 13
    # Version-1 entries get inclusion proofs too: OP_A's old entries and its new ones.
    scoped = b"".join(stream_export(operation_id=OP_A))
    status, result = verify(scoped, keys=keys)
    assert status == 0 and result["entries"] == 8, result
    assert checkpoints.verify_chain(keys=av.load_keys(str(keys)))["ok"] is True
