"""Witnesses: cosign only a checkpoint consistent with the last one cosigned (C2SP tlog-cosignature);
the verifier requires K of the given witness keys and counts no other; /system/ says who fell behind."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from operations.audit import checkpoints, witness
from operations.audit import verify as av
from operations.audit.export import stream_export
from operations.audit.health import audit_protection_checks
from operations.models import AuditCheckpoint, AuditCosignature
from tests.audit.helpers import OP_A, append_entries
from tests.support import T0

pytestmark = pytest.mark.django_db


@pytest.fixture
def witness_a(tmp_path):
    path = tmp_path / "witness-a.pem"
    out = StringIO()
    call_command("audit_witness", "--name", "witness-a", "--generate-key", str(path), stdout=out)
    keys = tmp_path / "witness-a.keys"
    keys.write_text(out.getvalue())
    return path, tmp_path / "witness-a.state", keys


def cosign(witness_files, name: str = "witness-a") -> str:
    key, state, _ = witness_files
    out = StringIO()
    call_command("audit_witness", "--name", name, "--key", str(key), "--state", str(state), stdout=out)
    return out.getvalue()


def test_the_cosignature_follows_c2sp_tlog_cosignature(signing_key, clock, witness_a):
    append_entries(3)
    checkpoint = checkpoints.sign_checkpoint()
    assert "cosigned checkpoint of size 3 as witness-a" in cosign(witness_a)
    key = av.parse_witness_keys(witness_a[2].read_text())[0]
    _, hex_id, encoded = key.line.split("+", 2)
    raw = base64.b64decode(encoded)
    assert raw[:1] == b"\x04" and hex_id == hashlib.sha256(b"witness-a\n\x04" + raw[1:]).digest()[:4].hex()
    note = av.parse_note(witness.cosigned_note(checkpoint))
    sig = next(s for s in note.signatures if s.name == "witness-a")
    timestamp = int.from_bytes(sig.signature[:8], "big")
    assert timestamp == int(T0.timestamp())
    message = f"cosignature/v1\ntime {timestamp}\n{note.body}".encode()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    Ed25519PublicKey.from_public_bytes(raw[1:]).verify(sig.signature[8:], message)  # raises if wrong
    assert av.witnesses_of(note, [key]) == {"witness-a"}
    assert av.check_note_signature(note, [signing_key]) == signing_key  # the log's signature still reads


def test_a_witness_refuses_a_rewritten_or_shrunk_log(signing_key, clock, witness_a):
    append_entries(3)
    checkpoints.sign_checkpoint()
    cosign(witness_a)
    append_entries(2, start=4)
    clock.move_to(T0 + timedelta(minutes=1), tick=False)
    checkpoints.sign_checkpoint()
    assert "size 5" in cosign(witness_a)  # consistent: 3 -> 5
    # The key holder signs another tree of size 6 that does not extend the one the witness saw.
    key = checkpoints.load_signing_key()
    body = av.note_body(origin="pollerdash/audit", size=6, head="ab" * 32, time=T0 + timedelta(minutes=2))
    kid = av.key_id_for("pollerdash/audit", checkpoints.public_raw(key))
    note = body + "\n" + av.signature_line(name="pollerdash/audit", key_id=kid, signature=key.sign(body.encode()))
    append_entries(1, start=6)
    from operations.audit import integrate

    integrate.integrate_all()
    AuditCheckpoint.objects.create(
        log="pollerdash/audit", size=6, head_hash="ab" * 32, tree=True, signed_at=T0 + timedelta(minutes=2),
        key_id=kid.hex(), note=note,
    )  # fmt: skip
    with pytest.raises(CommandError, match="NOT COSIGNED: the tree of size 6 is not consistent") as refused:
        cosign(witness_a)
    assert refused.value.returncode == 1
    assert AuditCosignature.objects.count() == 2
    assert json.loads(witness_a[1].read_text())["note"].split("\n")[1] == "5"  # it still remembers size 5


def test_the_verifier_requires_k_witnesses_and_ignores_unknown_ones(signing_key, clock, witness_a, tmp_path, verify):
    append_entries(3, operation_id=OP_A)
    checkpoints.sign_checkpoint()
    cosign(witness_a)
    stranger = (tmp_path / "stranger.pem", tmp_path / "stranger.state", tmp_path / "stranger.keys")
    out = StringIO()
    call_command("audit_witness", "--name", "stranger", "--generate-key", str(stranger[0]), stdout=out)
    stranger[2].write_text(out.getvalue())
    cosign(stranger, "stranger")
    idle = tmp_path / "idle.keys"  # a witness the reviewer trusts that never cosigned
    out = StringIO()
    call_command("audit_witness", "--name", "idle", "--generate-key", str(tmp_path / "idle.pem"), stdout=out)
    idle.write_text(out.getvalue())
    append_entries(2, operation_id=OP_A, start=4)
    clock.move_to(T0 + timedelta(minutes=1), tick=False)
    full = b"".join(stream_export())
    scoped = b"".join(stream_export(operation_id=OP_A))
    for data in (full, scoped):
        status, result = verify(data, "--witness-key", str(witness_a[2]))
        assert status == 0 and result["witnessed_size"] == 3, result
        # Two required of two trusted, and only one of them cosigned: not enough.
        status, result = verify(
            data, "--witness-key", str(witness_a[2]), "--witness-key", str(idle), "--witnesses-required", "2"
        )
        assert (status, result["reason"]) == (1, av.UNWITNESSED), result
        both = verify(data, "--witness-key", str(witness_a[2]), "--witness-key", str(stranger[2]))
        assert both[0] == 0
        status, result = verify(
            data, "--witness-key", str(witness_a[2]), "--witness-key", str(stranger[2]), "--witnesses-required", "2"
        )
        assert status == 0, result
    # A witness key the reviewer does not trust counts for nothing.
    other = tmp_path / "other.keys"
    other.write_text(av.witness_key("witness-a", b"\x01" * 32).line + "\n")
    status, result = verify(scoped, "--witness-key", str(other))
    assert (status, result["reason"]) == (1, av.UNWITNESSED)
    # A cosignature that claims a trusted witness but does not verify is tampering.
    lines = scoped.split(b"\n")
    note = json.loads(lines[1])["checkpoint"]
    sig_line = note.rstrip("\n").split("\n")[-1]
    name, blob = sig_line[2:].split(" ")
    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1
    lines[1] = av.checkpoint_line(note.replace(blob, base64.b64encode(bytes(raw)).decode()))[:-1]
    status, result = verify(b"\n".join(lines), "--witness-key", str(witness_a[2]), "--witness-key", str(stranger[2]))
    assert (status, result["reason"]) == (1, av.BAD_SIGNATURE)


def test_the_system_panel_says_when_a_witness_falls_behind(signing_key, clock, witness_a, settings):
    settings.AUDIT_WITNESS_NAMES = "witness-a"
    append_entries(1)
    checkpoints.sign_checkpoint()
    checks = {c.name: c for c in audit_protection_checks()}
    assert (
        checks["audit witness witness-a"].ok is False
        and "cosigned nothing yet" in checks["audit witness witness-a"].message
    )
    cosign(witness_a)
    assert {c.name: c for c in audit_protection_checks()}["audit witness witness-a"].ok is True
    clock.move_to(T0 + timedelta(minutes=11), tick=False)
    late = {c.name: c for c in audit_protection_checks()}["audit witness witness-a"]
    assert late.ok is False and "behind" in late.message


def test_a_witness_passes_over_a_forged_newest_checkpoint(signing_key, clock, witness_a):
    # Anyone who may write the database may insert a checkpoint row; the witness cosigns the newest
    # one the log's key signed instead of stopping at the forged one for good (issue 24).
    append_entries(3)
    genuine = checkpoints.sign_checkpoint()
    bigger = genuine.note.replace("\n3\n", "\n1000\n", 1)
    AuditCheckpoint.objects.create(
        log="pollerdash/audit", size=1000, head_hash=genuine.head_hash, tree=True, signed_at=genuine.signed_at,
        key_id=genuine.key_id, note=bigger,
    )  # fmt: skip
    assert "cosigned checkpoint of size 3 as witness-a" in cosign(witness_a)
    assert AuditCosignature.objects.get().checkpoint_id == genuine.pk
