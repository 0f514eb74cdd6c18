"""The offline verifier against a genuine version-1 export and every way of tampering with it.

Version-1 exports (the hash chain) are no longer written, but must still verify: the sample is a
real one kept in tests/audit/golden (written by the version-1 exporter as conftest.sample_export
then described, its signing key thrown away). Each tamper case edits its bytes the way an attacker
with the file - or with the database and without the signing key - would, and the verifier must
exit 1 naming the reason. The same cases against version 2: test_audit_tree_verifier.py.
"""

from __future__ import annotations

import base64
import json
import random
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from operations.audit import verify as av
from tests.audit.helpers import Sample, edit, entry_hash, join, relink, verify_bytes
from tests.support import T0

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def keys_file() -> Path:
    return GOLDEN / "v1-export.keys"


@pytest.fixture
def sample_export(keys_file: Path) -> Sample:
    key = av.parse_keys(keys_file.read_text())[0]
    return Sample(data=(GOLDEN / "v1-export.jsonl").read_bytes(), closed_at=T0 + timedelta(seconds=241), key=key)


# Line numbers (0-based) in the sample export.
HEADER, E1, E2, E3, E4, CP4, E5, E6, E7, E8, CP8, E9, E10, E11, CP11 = range(15)


def test_a_genuine_export_verifies(sample_export, verify):
    lines = sample_export.lines
    assert len(lines) == 15
    assert [line.startswith(b'{"checkpoint":') for line in lines].count(True) == 3
    status, result = verify(sample_export.data, "--covered-until", "2026-12-01T10:04:01Z")
    assert status == 0, result
    assert result["ok"] is True and result["entries"] == 11 and result["checkpoints"] == 3
    assert result["last_seq"] == 11 and result["covered_until"] == "2026-12-01T10:04:01.000000Z"
    assert result["head"] == entry_hash(lines[E11])


def expect(verify, data: bytes, reason: str, seq: int | None, *args: str) -> dict:
    status, result = verify(data, *args)
    assert (status, result.get("reason"), result.get("seq")) == (1, reason, seq), result
    return result


def test_edit_a_field(sample_export, verify):
    lines = sample_export.lines
    lines[E2] = edit(lines[E2], decision="succeeded")
    expect(verify, join(lines), av.HASH_MISMATCH, 2)


def test_edit_the_last_entry_before_a_checkpoint(sample_export, verify):
    lines = sample_export.lines
    lines[E8] = edit(lines[E8], http_status=200)
    expect(verify, join(lines), av.HASH_MISMATCH, 8)


def test_edit_and_rehash_one_entry(sample_export, verify):
    # Edit entry 2 and repair the link to it: the break moves on to the next link.
    lines = sample_export.lines
    lines[E2] = edit(lines[E2], decision="succeeded")
    lines[E3] = relink(lines[E3], entry_hash(lines[E2]))
    expect(verify, join(lines), av.HASH_MISMATCH, 3)


def test_forge_the_first_entry_after_a_checkpoint(sample_export, verify):
    # A segment's first entry must link to the signed head before it.
    lines = sample_export.lines
    lines[E5] = relink(lines[E5], "a" * 64)
    expect(verify, join(lines), av.LINK_BREAK, 5)


def test_delete_a_middle_line(sample_export, verify):
    lines = sample_export.lines
    del lines[E6]
    expect(verify, join(lines), av.SEQ_GAP, 7)


def test_swap_two_lines(sample_export, verify):
    lines = sample_export.lines
    lines[E6], lines[E7] = lines[E7], lines[E6]
    expect(verify, join(lines), av.SEQ_GAP, 7)


def test_duplicate_a_line(sample_export, verify):
    lines = sample_export.lines
    lines.insert(E6, lines[E6])
    expect(verify, join(lines), av.SEQ_GAP, 6)


def test_delete_the_entry_a_checkpoint_covers(sample_export, verify):
    lines = sample_export.lines
    del lines[E8]
    expect(verify, join(lines), av.SEQ_GAP, 8)


def test_truncate_the_tail(sample_export, verify):
    lines = sample_export.lines[: E10 + 1]
    expect(verify, join(lines), av.UNSIGNED_TAIL, 9)


def test_truncate_mid_line(sample_export, verify):
    expect(verify, sample_export.data[:-40], av.PARSE, None)


def truncated_to_cp8(sample) -> bytes:
    """Everything after checkpoint 8 dropped and the unsigned header rewritten to match."""
    lines = sample.lines[: CP8 + 1]
    header = json.loads(lines[HEADER])
    note = av.parse_note(json.loads(lines[CP8])["checkpoint"])
    header["header"].update(last_seq=8, exported_at=note.time_text)
    lines[HEADER] = av.compact_json(header)
    return join(lines)


def test_truncate_and_drop_trailing_checkpoints(sample_export, verify):
    data = truncated_to_cp8(sample_export)
    # Without a freshness requirement a consistent shorter log is indistinguishable...
    assert verify(data)[0] == 0
    # ...with one, it is stale: the newest checkpoint left is two minutes older than the export.
    expect(verify, data, av.STALE, 8, "--covered-until", "2026-12-01T10:04:01Z")


def test_truncate_without_fixing_the_header(sample_export, verify):
    lines = sample_export.lines[: CP8 + 1]
    expect(verify, join(lines), av.CHECKPOINT_MISMATCH, 8)


def test_truncation_below_a_pinned_checkpoint(sample_export, verify, tmp_path):
    pin = tmp_path / "witness.checkpoint"
    pin.write_bytes(sample_export.lines[CP11] + b"\n")
    assert verify(sample_export.data, "--pin", str(pin))[0] == 0
    expect(verify, truncated_to_cp8(sample_export), av.PIN_MISMATCH, 11, "--pin", str(pin))


def rechain(lines: list[bytes], start: int) -> list[bytes]:
    """Recompute every prev from entry line `start` on, as an attacker who rewrote history would."""
    out = list(lines)
    previous = None
    for index, line in enumerate(out):
        if index == HEADER or line.startswith(b'{"checkpoint":'):
            continue
        if previous is not None and index > start:
            line = out[index] = relink(line, previous)
        previous = entry_hash(line)
    return out


def test_rechain_the_whole_file_keeping_its_checkpoints(sample_export, verify):
    lines = sample_export.lines
    lines[E2] = edit(lines[E2], decision="succeeded")
    expect(verify, join(rechain(lines, E2)), av.HASH_MISMATCH, 4)


def test_rechain_and_rewrite_the_checkpoint_heads(sample_export, verify):
    lines = rechain(_with(sample_export.lines, E2, decision="succeeded"), E2)
    for index in (CP4, CP8, CP11):
        lines[index] = _rewrite_head(lines[index], entry_hash(lines[index - 1]))
    expect(verify, join(lines), av.BAD_SIGNATURE, 4)


def test_rechain_and_resign_with_a_foreign_key(sample_export, verify, tmp_path):
    foreign = Ed25519PrivateKey.generate()
    lines = rechain(_with(sample_export.lines, E2, decision="succeeded"), E2)
    for index in (CP4, CP8, CP11):
        lines[index] = _resign(lines[index], entry_hash(lines[index - 1]), foreign)
    expect(verify, join(lines), av.UNKNOWN_KEY, 4)
    # The forger's own key line of course verifies the forgery: the trusted keys are the anchor.
    own = tmp_path / "forger.keys"
    own.write_text(_key_line(foreign) + "\n")
    assert verify(join(lines), keys=own)[0] == 0


def test_a_witness_pin_catches_a_consistent_rewrite_by_the_key_holder(sample_export, verify, tmp_path):
    # Even with the real key (attacker A4), a rewrite differs from a checkpoint kept elsewhere.
    pin = tmp_path / "witness.checkpoint"
    pin.write_bytes(sample_export.lines[CP8] + b"\n")
    lines = sample_export.lines
    lines[E2] = edit(lines[E2], decision="succeeded")
    assert verify(join(lines), "--pin", str(pin))[1]["reason"] == av.HASH_MISMATCH


def test_splice_unsigned_entries_after_the_last_checkpoint(sample_export, verify):
    lines = sample_export.lines
    forged = json.loads(lines[E11])
    for seq in (12, 13):
        forged.update(seq=seq, prev=entry_hash(lines[-1] if seq == 13 else lines[E11]))
        lines.append(av.compact_json(forged))
    expect(verify, join(lines), av.UNSIGNED_TAIL, 12)


def test_crlf_line_endings(sample_export, verify):
    expect(verify, sample_export.data.replace(b"\n", b"\r\n"), av.PARSE, None)


def test_byte_order_mark(sample_export, verify):
    expect(verify, b"\xef\xbb\xbf" + sample_export.data, av.PARSE, None)


def test_duplicate_json_keys(sample_export, verify):
    lines = sample_export.lines
    lines[E6] = lines[E6].replace(b'"seq":6,', b'"seq":6,"seq":6,')
    result = expect(verify, join(lines), av.PARSE, 6)
    assert "duplicate key" in result["detail"]


def test_trailing_bytes(sample_export, verify):
    expect(verify, sample_export.data + b"{}", av.PARSE, None)
    expect(verify, sample_export.data + b"\n", av.PARSE, None)
    lines = sample_export.lines
    lines[E6] += b" "
    expect(verify, join(lines), av.PARSE, 6)


def test_a_checkpoint_line_must_be_canonical(sample_export, verify):
    lines = sample_export.lines
    lines[CP4] = lines[CP4].replace(b'{"checkpoint":', b'{"checkpoint": ')
    expect(verify, join(lines), av.PARSE, 4)


def test_usage_and_io_errors_exit_2(sample_export, verify, tmp_path, keys_file):
    assert av.run([str(tmp_path / "missing.jsonl"), "--keys", str(keys_file)])[0] == 2
    assert av.run([str(tmp_path / "missing.jsonl")])[0] == 2
    bad_keys = tmp_path / "bad.keys"
    bad_keys.write_text("pollerdash/audit+00000000+AAAA\n")
    status, result = verify(sample_export.data, keys=bad_keys)
    assert status == 2 and "keys file line 1" in result["detail"]


def test_fuzz_one_flipped_byte_never_verifies(sample_export):
    keys = [sample_export.key]
    assert verify_bytes(sample_export.data, keys)["ok"] is True
    rng = random.Random(20261201)
    original = sample_export.data
    for _ in range(2000):
        data = bytearray(original)
        position = rng.randrange(len(data))
        data[position] ^= 1 << rng.randrange(8)
        with pytest.raises(av.VerifyFailure):
            verify_bytes(bytes(data), keys)


def test_the_console_script_runs(sample_export, keys_file, tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_bytes(sample_export.data)
    script = [sys.executable, "-c", "import sys; from operations.audit.verify import main; sys.exit(main())"]
    ok = subprocess.run([*script, str(path), "--keys", str(keys_file)], capture_output=True, timeout=60)
    assert ok.returncode == 0 and json.loads(ok.stdout)["ok"] is True
    path.write_bytes(sample_export.data.replace(b'"decision":"wait"', b'"decision":"done"', 1))
    bad = subprocess.run([*script, str(path), "--keys", str(keys_file)], capture_output=True, timeout=60)
    assert bad.returncode == 1 and json.loads(bad.stdout)["reason"] == av.HASH_MISMATCH


# --- forging helpers ---------------------------------------------------------------------------------


def _with(lines: list[bytes], index: int, **data: object) -> list[bytes]:
    out = list(lines)
    out[index] = edit(out[index], **data)
    return out


def _note_of(line: bytes) -> av.Note:
    return av.parse_note(json.loads(line)["checkpoint"])


def _rewrite_head(line: bytes, head: str) -> bytes:
    note = _note_of(line)
    body = av.note_body(origin=note.origin, size=note.size, head=head, time=note.time)
    signatures = json.loads(line)["checkpoint"][len(note.body) :]
    return av.checkpoint_line(body + signatures)[:-1]


def _resign(line: bytes, head: str, key: Ed25519PrivateKey) -> bytes:
    note = _note_of(line)
    body = av.note_body(origin=note.origin, size=note.size, head=head, time=note.time)
    raw = key.public_key().public_bytes_raw()
    kid = av.key_id_for(note.origin, raw)
    signed = body + "\n" + av.signature_line(name=note.origin, key_id=kid, signature=key.sign(body.encode()))
    return av.checkpoint_line(signed)[:-1]


def _key_line(key: Ed25519PrivateKey) -> str:
    return av.verifier_key_line("pollerdash/audit", key.public_key().public_bytes_raw())


@pytest.mark.django_db
def test_key_ids_follow_the_signed_note_definition(signing_key):
    import hashlib

    expected = hashlib.sha256(b"pollerdash/audit\n\x01" + signing_key.public_raw).digest()[:4]
    assert signing_key.key_id == expected
    name, hex_id, encoded = signing_key.line.split("+", 2)
    assert (name, hex_id) == ("pollerdash/audit", expected.hex())
    assert base64.b64decode(encoded) == b"\x01" + signing_key.public_raw
