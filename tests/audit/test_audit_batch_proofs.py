"""Format 3: operation and range exports proven by batch inclusion proofs, and every way of tampering.

The operation export of OP_A from the sample (conftest.sample_export: OP_A's entries are 1-4, 7
and 8 of 11) is, line by line:

    header, closing checkpoint (size 11), e1, e2, e3, e4, e7, e8, {"batch": ...}

Each tamper case edits its bytes as an attacker with the file would; the verifier must exit 1 and
name the reason.
"""

from __future__ import annotations

import base64
import gzip
import json
from datetime import timedelta

import pytest
from django.core.management import call_command, execute_from_command_line
from django.core.management.base import SystemCheckError

from operations.audit import database, export
from operations.audit import verify as av
from operations.audit.verify import merkle
from operations.audit.verify import tree as av_tree
from tests.audit.helpers import OP_A, OP_B, append_entries, edit, join
from tests.audit.test_audit_tree_verifier import E1, E2, E3, E4, E5, E6, E7, E8, E9, E10, E11, HEADER, expect
from tests.support import T0

pytestmark = pytest.mark.django_db

CLOSING, A1, A2, A3, A4, A7, A8, BATCH = range(1, 9)


def batch_of(line: bytes) -> dict:
    return json.loads(line)["batch"]


def with_batch(lines: list[bytes], **changes: object) -> list[bytes]:
    """The lines with the batch proof's fields changed (still canonical JSON)."""
    body = {**batch_of(lines[BATCH]), **changes}
    return [*lines[:BATCH], av.compact_json({"batch": body}), *lines[BATCH + 1 :]]


@pytest.fixture
def scoped(sample_export) -> list[bytes]:
    return b"".join(export.stream_export(operation_id=OP_A)).split(b"\n")[:-1]


def test_an_operation_export_is_its_entries_and_one_batch_proof_sharing_nodes(sample_export, scoped, verify):
    data = join(scoped)
    status, result = verify(data, "--strict")
    assert status == 0, result
    assert (result["format"], result["scope"], result["operation_id"], result["entries"]) == (
        av.EXPORT_FORMAT_V3,
        "operation",
        OP_A,
        6,
    )
    assert json.loads(scoped[HEADER])["header"]["format"] == "pollerdash-audit-export/3"
    full = sample_export.lines
    assert scoped[A1:BATCH] == [full[i] for i in (E1, E2, E3, E4, E7, E8)]  # OP_A's entries, verbatim
    proof = batch_of(scoped[BATCH])
    assert (proof["size"], proof["seqs"]) == (11, [[1, 4], [7, 8]])
    # Leaves 0-3 and 6-7 of 11: the subtrees of entries 5-6 and 9-11 are all the proof needs.
    leaf = {n: merkle.leaf_hash(full[line]) for n, line in ((5, E5), (6, E6), (9, E9), (10, E10), (11, E11))}
    assert [base64.b64decode(h) for h in proof["hashes"]] == [
        merkle.node_hash(leaf[5], leaf[6]),
        merkle.node_hash(merkle.node_hash(leaf[9], leaf[10]), leaf[11]),
    ]
    # Nothing of OP_B - its id, request ids - is in the file; and it is smaller than format 2's.
    assert OP_B.encode() not in data
    for n in (5, 6, 9, 10, 11):
        assert f"req_{n:04d}".encode() not in data
    older = b"".join(export.stream_export(operation_id=OP_A, version=2))
    assert json.loads(older.split(b"\n")[0])["header"]["format"] == av.EXPORT_FORMAT_V2
    assert verify(older)[0] == 0
    assert len(data) < len(older)


def test_altered_missing_extra_reordered_and_foreign_entries(sample_export, scoped, verify):
    lines = scoped
    expect(verify, join([*lines[:A2], edit(lines[A2], decision="succeeded"), *lines[A3:]]), av.BAD_PROOF)
    expect(verify, join([*lines[:A3], *lines[A4:]]), av.SEQ_GAP)  # an entry deleted
    expect(verify, join([*lines[:A3], lines[A2], *lines[A3:]]), av.SEQ_GAP)  # an entry duplicated
    expect(verify, join([*lines[:A2], lines[A3], lines[A2], *lines[A4:]]), av.BAD_PROOF)  # two swapped
    # Another operation's entry (entry 5, OP_B's) in place of one of OP_A's: named before any proof.
    result = expect(verify, join([*lines[:A7], sample_export.lines[E5], *lines[A8:]]), av.PARSE)
    assert "another operation" in result["detail"]
    # The same, relabelled as OP_A's: it is not the leaf the proof places at seq 7.
    relabelled = sample_export.lines[E5].replace(OP_B.encode(), OP_A.encode())
    expect(verify, join([*lines[:A7], relabelled, *lines[A8:]]), av.BAD_PROOF)
    # The header names OP_B: every entry is of another operation.
    expect(verify, join([lines[HEADER].replace(OP_A.encode(), OP_B.encode()), *lines[1:]]), av.PARSE)


def test_a_forged_or_altered_batch_proof(scoped, verify):
    proof = batch_of(scoped[BATCH])
    hashes = proof["hashes"]
    forged = base64.b64encode(bytes(32)).decode()
    cases = {
        "a hash replaced": (with_batch(scoped, hashes=[forged, *hashes[1:]]), av.BAD_PROOF),
        "a hash dropped": (with_batch(scoped, hashes=hashes[:-1]), av.BAD_PROOF),
        "a hash added": (with_batch(scoped, hashes=[*hashes, forged]), av.BAD_PROOF),
        "hashes swapped": (with_batch(scoped, hashes=hashes[::-1]), av.BAD_PROOF),
        "seqs moved": (with_batch(scoped, seqs=[[1, 4], [8, 9]]), av.BAD_PROOF),
        "seqs after the closing size": (with_batch(scoped, seqs=[[1, 4], [11, 12]]), av.BAD_PROOF),
        "another tree size": (with_batch(scoped, size=12), av.BAD_PROOF),
        "seqs not canonical": (with_batch(scoped, seqs=[[1, 2], [3, 4], [7, 8]]), av.PARSE),
        "seqs out of order": (with_batch(scoped, seqs=[[7, 8], [1, 4]]), av.PARSE),
        "hashes in hex": (with_batch(scoped, hashes=[base64.b64decode(h).hex() for h in hashes]), av.PARSE),
        "an unknown field": (with_batch(scoped, root="x"), av.PARSE),
        "no batch proof": (scoped[:BATCH], av.BAD_PROOF),
        "the proof before the entries": ([*scoped[:A1], scoped[BATCH], *scoped[A1:BATCH]], av.SEQ_GAP),
        "the proof twice": ([*scoped, scoped[BATCH]], av.SEQ_GAP),
    }
    outcomes = {name: verify(join(lines)) for name, (lines, _) in cases.items()}
    assert {name: (status, result.get("reason")) for name, (status, result) in outcomes.items()} == {
        name: (1, reason) for name, (_, reason) in cases.items()
    }
    assert "batch" in outcomes["no batch proof"][1]["detail"]


def test_format_3_holds_no_per_entry_proofs_and_no_full_export(sample_export, scoped, verify):
    older = b"".join(export.stream_export(operation_id=OP_A, version=2)).split(b"\n")[:-1]
    mixed = [*scoped[:A2], older[3], *scoped[A2:]]  # format 2's inclusion line of entry 1
    assert mixed[A2].startswith(b'{"inclusion":')
    expect(verify, join(mixed), av.PARSE)
    # A full export relabelled format 3; and a format-2 export given a batch proof.
    full = sample_export.lines
    expect(verify, join([full[HEADER].replace(b"export/2", b"export/3"), *full[1:]]), av.PARSE)
    v2_with_batch = [older[HEADER], older[CLOSING], older[2], scoped[BATCH]]
    expect(verify, join(v2_with_batch), av.PARSE)


def test_large_operations_are_proven_in_several_batches(sample_export, verify, monkeypatch):
    monkeypatch.setattr(export, "BATCH", 4)
    lines = b"".join(export.stream_export(operation_id=OP_A)).split(b"\n")[:-1]
    batches = [batch_of(line)["seqs"] for line in lines if line.startswith(b'{"batch":')]
    assert batches == [[[1, 4]], [[7, 8]]]
    assert lines[A4 + 1].startswith(b'{"batch":')
    status, result = verify(join(lines))
    assert status == 0 and result["entries"] == 6, result
    # The second group moved before the first: each group's proof holds, the order does not.
    second = lines[A4 + 2 :]
    first = lines[A1 : A4 + 2]
    expect(verify, join([*lines[:A1], *second, *first]), av.SEQ_GAP)
    # The verifier holds at most BATCH_MAX_ENTRIES entries awaiting a proof.
    monkeypatch.setattr(av_tree, "BATCH_MAX_ENTRIES", 3)
    expect(verify, join(lines), av.PARSE)


def test_a_time_window_export_in_format_3(sample_export, verify):
    data = b"".join(export.stream_export(since=T0 + timedelta(seconds=61), until=T0 + timedelta(seconds=62)))
    status, result = verify(data)
    assert status == 0, result
    assert (result["format"], result["scope"], result["entries"]) == (av.EXPORT_FORMAT_V3, "range", 4)
    proof = batch_of(data.split(b"\n")[-2])
    assert proof["seqs"] == [[5, 8]]  # four contiguous entries: one run
    edited = data.replace(b"req_0006", b"req_0666")
    expect(verify, edited, av.BAD_PROOF)


def test_a_spread_out_operation_over_a_bigger_tree(db, clock, signing_key, verify, monkeypatch):
    """Every third entry of 90 is OP_A's; the proof's nodes are read a few at a time on SQLite."""
    monkeypatch.setattr(database, "SQLITE_NODES_PER_QUERY", 5)
    for n in range(90):
        append_entries(1, operation_id=OP_A if n % 3 == 1 else OP_B, start=n + 1)
    data = b"".join(export.stream_export(operation_id=OP_A))
    status, result = verify(data, "--strict")
    assert status == 0 and result["entries"] == 30, result
    proof = batch_of(data.split(b"\n")[-2])
    assert proof["seqs"] == [[seq, seq] for seq in range(2, 90, 3)]
    older = b"".join(export.stream_export(operation_id=OP_A, version=2)).split(b"\n")
    separate = [json.loads(line)["inclusion"]["hashes"] for line in older if line.startswith(b'{"inclusion":')]
    assert len(separate) == 30
    # Format 2 repeats the upper nodes in every entry's path; format 3 sends each once.
    assert len(proof["hashes"]) < 0.6 * sum(map(len, separate))
    assert len({h for path in separate for h in path}) >= len(proof["hashes"])


def test_the_command_writes_format_3_and_format_2_on_request(sample_export, tmp_path, verify):
    path = tmp_path / "op.jsonl"
    call_command("audit_export", "--operation", OP_A, "-o", str(path))
    assert verify(path.read_bytes())[1]["format"] == av.EXPORT_FORMAT_V3
    call_command("audit_export", "--operation", OP_A, "--format", "2", "-o", str(path))
    status, result = verify(path.read_bytes())
    assert (status, result["format"], result["entries"]) == (0, av.EXPORT_FORMAT_V2, 6)
    call_command("audit_export", "--format", "3", "-o", str(path))  # a full export stays format 2
    assert verify(path.read_bytes())[1]["format"] == av.EXPORT_FORMAT_V2
    status, result = verify(b"".join(export.stream_export()))
    assert (status, result["entries"]) == (0, 11)


def test_the_export_command_does_not_wait_on_the_sites_start_up_checks(sample_export, tmp_path, verify, settings):
    """A sign-in setting that fails `manage.py check` (nobody could sign in) is no reason to refuse
    an incident reviewer's export: the command skips the site's checks, which import every view."""
    settings.OIDC_ENABLED = False
    settings.PASSWORD_LOGIN_ENABLED = False
    with pytest.raises(SystemCheckError, match="E103"):
        call_command("check")
    path = tmp_path / "op.jsonl"
    execute_from_command_line(["manage.py", "audit_export", "--operation", OP_A, "-o", str(path)])
    assert verify(path.read_bytes())[0] == 0


def test_an_export_written_compressed_verifies_as_it_is(sample_export, tmp_path, verify):
    """`-o FILE.gz` writes gzip; the verifier reads it without a separate step, and a damaged or
    edited compressed file fails like a plain one."""
    path = tmp_path / "op.jsonl.gz"
    call_command("audit_export", "--operation", OP_A, "-o", str(path))
    packed = path.read_bytes()
    assert packed[:2] == b"\x1f\x8b"
    status, result = verify(packed)
    assert (status, result["format"], result["entries"]) == (0, av.EXPORT_FORMAT_V3, 6)
    plain = gzip.decompress(packed)
    assert len(packed) < len(plain)
    expect(verify, packed[:-20], av.PARSE)  # truncated
    lines = plain.split(b"\n")[:-1]
    edited = join([*lines[:A2], edit(lines[A2], decision="succeeded"), *lines[A3:]])
    expect(verify, gzip.compress(edited), av.BAD_PROOF)
