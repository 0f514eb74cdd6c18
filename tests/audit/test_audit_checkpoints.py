"""The signer: verifies before it signs, never signs a smaller size, signs on a clock even when idle,
and keeps its key to itself."""

from __future__ import annotations

import base64
import logging
import os
import stat
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from operations.audit import checkpoints, integrate, treecheck
from operations.audit import verify as av
from operations.audit.signer import Signer
from operations.audit.verify import merkle
from operations.models import AuditCheckpoint, AuditEntry, ProcessHeartbeat
from tests.audit.helpers import append_entries
from tests.support import T0

pytestmark = pytest.mark.django_db


def tamper(sql: str, params: list[object]) -> None:
    """Change the audit tables behind the application's back, as a database owner could.

    On PostgreSQL the append-only triggers are switched off for this test's transaction only
    (ALTER TABLE is transactional: the test's rollback switches them back on)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for table in ("operations_auditentry", "operations_auditcheckpoint"):
                cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER {table}_no_change")
        cursor.execute(sql, params)


def edited(row: AuditEntry) -> bytes:
    return bytes(row.body).replace(b'"decision":"wait"', b'"decision":"done"')


def test_a_checkpoint_is_a_signed_note_over_size_tree_root_and_time(signing_key, clock):
    entries = append_entries(3)
    checkpoint = checkpoints.sign_checkpoint()
    note = av.parse_note(checkpoint.note)
    edge = merkle.CompactRange()
    for entry in entries:
        edge.push(merkle.leaf_hash(bytes(entry.body)))
    root = edge.root()
    assert checkpoint.note.startswith(f"pollerdash/audit\n3\n{base64.b64encode(root).decode()}\ntime ")
    assert (note.size, note.head, note.time, note.chain) == (3, root.hex(), T0, None)
    # Before it, the switch: the empty chain's head and the empty tree, one signature.
    switch = av.parse_note(AuditCheckpoint.objects.get(size=0).note)
    assert (switch.chain, switch.head) == (av.GENESIS_PREV, merkle.EMPTY_ROOT.hex())
    assert note.time_text == "2026-12-01T10:00:00.000000Z" and checkpoint.signed_at == T0
    assert av.check_note_signature(note, [signing_key]) == signing_key
    assert checkpoint.key_id == signing_key.key_id.hex()


def test_the_signer_refuses_to_sign_an_edited_entry(signing_key, clock):
    append_entries(2)
    checkpoints.sign_checkpoint()
    append_entries(3, start=3)
    integrate.integrate_all()
    row = AuditEntry.objects.get(seq=4)
    tamper(
        "UPDATE operations_auditentry SET body = %s WHERE id = %s", [bytes(row.body).replace(b"wait", b"done"), row.pk]
    )
    with pytest.raises(checkpoints.CheckpointRefused) as refused:
        checkpoints.sign_checkpoint()
    assert refused.value.failure.reason == av.HASH_MISMATCH and refused.value.failure.seq == 4
    assert AuditCheckpoint.objects.count() == 2  # the switch and size 2


def test_the_signer_refuses_a_gap_in_the_new_segment(signing_key, clock):
    append_entries(2)
    checkpoints.sign_checkpoint()
    append_entries(3, start=3)
    integrate.integrate_all()
    tamper("DELETE FROM operations_auditentry WHERE seq = %s", [4])
    with pytest.raises(checkpoints.CheckpointRefused) as refused:
        checkpoints.sign_checkpoint()
    assert refused.value.failure.reason == av.SEQ_GAP


def test_the_signer_rechecks_the_entry_its_last_checkpoint_signed(signing_key, clock):
    append_entries(2)
    checkpoints.sign_checkpoint()
    row = AuditEntry.objects.get(seq=2)
    tamper("UPDATE operations_auditentry SET body = %s WHERE id = %s", [bytes(row.body) + b" ", row.pk])
    with pytest.raises(checkpoints.CheckpointRefused, match="HASH_MISMATCH"):
        checkpoints.sign_checkpoint()


def test_the_signer_never_signs_a_smaller_size(signing_key, clock):
    append_entries(5)
    checkpoints.sign_checkpoint()
    tamper("DELETE FROM operations_auditentry WHERE seq >= %s", [4])  # the log is now shorter
    with pytest.raises(checkpoints.CheckpointRefused):
        checkpoints.sign_checkpoint()
    assert list(AuditCheckpoint.objects.order_by("pk").values_list("size", flat=True)) == [0, 5]


def test_a_forged_checkpoint_row_is_passed_over_not_trusted_as_the_anchor(signing_key, clock):
    # Anyone who may write the database may insert a checkpoint row: the signer neither trusts it
    # nor stops signing for good because of it (issue 24); it says which rows it passed over.
    append_entries(2)
    good = checkpoints.sign_checkpoint()
    forged = AuditCheckpoint.objects.create(
        log=good.log, size=2, head_hash=good.head_hash, signed_at=T0, key_id="00000000",
        note=good.note.replace("— pollerdash/audit ", "— pollerdash/audit AAAA"),
    )  # fmt: skip
    append_entries(1, start=3)
    skipped: list = []
    signed = checkpoints.sign_checkpoint(skipped=skipped)
    assert signed.size == 3 and [row.pk for row in skipped] == [forged.pk]
    assert skipped[0].reason == av.UNKNOWN_KEY  # its signature line names no key the log trusts


def test_a_racing_signer_cannot_make_the_size_go_backwards(signing_key, clock, monkeypatch):
    checkpoints.sign_checkpoint()  # the switch and size 0
    append_entries(2)
    real = treecheck.verify_tree_segment
    raced = []

    def verify_while_another_signer_signs_more(**kwargs: object) -> treecheck.TreeSegment:
        segment = real(**kwargs)
        if not raced:
            raced.append(True)
            # Between this signer's verification and its signing, another signer signs a longer log.
            append_entries(3, start=3)
            monkeypatch.setattr(treecheck, "verify_tree_segment", real)
            checkpoints.sign_checkpoint()
            monkeypatch.setattr(treecheck, "verify_tree_segment", verify_while_another_signer_signs_more)
        return segment

    monkeypatch.setattr(treecheck, "verify_tree_segment", verify_while_another_signer_signs_more)
    late = checkpoints.sign_checkpoint()
    assert list(AuditCheckpoint.objects.order_by("pk").values_list("size", flat=True)) == [0, 0, 5, 5]
    assert late.size == 5


def test_the_loop_signs_every_interval_even_when_idle(signing_key, clock):
    signer = Signer(interval_s=60)
    stop_at = T0 + timedelta(minutes=5, seconds=30)

    def sleep(seconds: float) -> None:
        clock.shift(timedelta(seconds=seconds))
        if checkpoints.timezone.now() >= T0 + timedelta(minutes=2, seconds=30) and not AuditEntry.objects.exists():
            append_entries(2)

    signer.run(sleep=sleep, should_stop=lambda: checkpoints.timezone.now() >= stop_at)
    signed = list(AuditCheckpoint.objects.order_by("pk").values_list("signed_at", "size"))
    assert signed[0] == (T0, 0)  # the switch, then every minute the tree
    assert [at for at, _ in signed[1:]] == [T0 + timedelta(minutes=m) for m in range(6)]
    assert [size for _, size in signed[1:]] == [0, 0, 0, 2, 2, 2]
    beat = ProcessHeartbeat.objects.get(kind="signer")
    assert beat.info["ok"] is True and beat.info["last_size"] == 2 and beat.last_seen_at >= T0 + timedelta(minutes=5)


def test_the_loop_keeps_running_and_alerting_while_verification_fails(signing_key, clock, caplog):
    append_entries(2)
    signer = Signer(interval_s=60)
    assert signer.tick().signed is not None
    append_entries(1, start=3)
    integrate.integrate_all()
    row = AuditEntry.objects.get(seq=3)
    tamper("UPDATE operations_auditentry SET body = %s WHERE id = %s", [edited(row), row.pk])
    with caplog.at_level(logging.ERROR, logger="pollerdash.audit.signer"):
        for minute in (1, 2):
            clock.move_to(T0 + timedelta(minutes=minute), tick=False)
            result = signer.tick()
            assert result is not None and result.signed is None and "HASH_MISMATCH" in result.error
    assert [r.levelno for r in caplog.records].count(logging.ERROR) == 2
    assert AuditCheckpoint.objects.count() == 2
    beat = ProcessHeartbeat.objects.get(kind="signer")
    assert beat.info["ok"] is False and "HASH_MISMATCH" in beat.info["error"]


def test_audit_checkpoint_once_reports_success_and_failure_loudly(signing_key, clock):
    append_entries(2)
    out = StringIO()
    call_command("audit_checkpoint", "--once", stdout=out)
    assert "signed checkpoint: size 2" in out.getvalue()
    row = AuditEntry.objects.get(seq=2)
    append_entries(1, start=3)
    tamper("UPDATE operations_auditentry SET body = %s WHERE id = %s", [bytes(row.body) + b" ", row.pk])
    err = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("audit_checkpoint", "--once", stdout=StringIO(), stderr=err)
    assert failed.value.returncode == 1
    assert "AUDIT CHECKPOINT NOT SIGNED" in err.getvalue() and "HASH_MISMATCH" in err.getvalue()


def test_without_a_key_nothing_is_signed(settings, tmp_path):
    settings.AUDIT_SIGNING_KEY_FILE = ""
    with pytest.raises(CommandError) as failed:
        call_command("audit_checkpoint", "--once", stdout=StringIO(), stderr=StringIO())
    assert failed.value.returncode == 2 and "AUDIT_SIGNING_KEY_FILE" in str(failed.value)
    settings.AUDIT_SIGNING_KEY_FILE = str(tmp_path / "absent.pem")
    with pytest.raises(checkpoints.CheckpointError, match="cannot read"):
        checkpoints.sign_checkpoint()


def test_audit_keys_generates_a_private_key_file_and_prints_only_the_public_line(tmp_path, settings):
    path = tmp_path / "var" / "new-key.pem"
    out = StringIO()
    call_command("audit_keys", "--generate", str(path), stdout=out)
    line = out.getvalue().strip()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    pem = path.read_text()
    assert pem.startswith("-----BEGIN PRIVATE KEY-----")
    assert av.parse_verifier_key(line).name == "pollerdash/audit"
    settings.AUDIT_SIGNING_KEY_FILE = str(path)
    again = StringIO()
    call_command("audit_keys", stdout=again)
    assert again.getvalue().strip() == line
    secret = "".join(pem.splitlines()[1:-1])
    assert secret not in out.getvalue() + again.getvalue()
    with pytest.raises(CommandError, match="refusing to overwrite"):
        call_command("audit_keys", "--generate", str(path), stdout=StringIO())
    assert path.read_text() == pem
    # Paths that cannot be written say so in one line; an empty name is not "print the key".
    with pytest.raises(CommandError, match="cannot write"):
        call_command("audit_keys", "--generate", str(path / "under-a-file.pem"), stdout=StringIO())
    with pytest.raises(CommandError, match="needs a file name"):
        call_command("audit_keys", "--generate", "", stdout=StringIO())


def test_an_export_without_the_key_closes_at_the_signers_fresh_checkpoint(signing_key, clock, settings):
    append_entries(2)
    signed = checkpoints.sign_checkpoint()
    settings.AUDIT_SIGNING_KEY_FILE = ""  # the web process of a hardened deployment
    append_entries(1, start=3)
    clock.move_to(T0 + timedelta(seconds=90), tick=False)
    assert checkpoints.checkpoint_for_export().pk == signed.pk
    clock.move_to(T0 + timedelta(seconds=121), tick=False)
    with pytest.raises(checkpoints.CheckpointError, match="is the signer"):
        checkpoints.checkpoint_for_export()


def test_the_signer_refuses_what_only_a_forger_writes_even_when_the_hashes_agree(signing_key, clock):
    # The newest entries are not signed yet; a database owner rewrites one consistently (body,
    # hash column) but with duplicate keys - readable two ways. Nothing gets signed.
    append_entries(2)
    checkpoints.sign_checkpoint()
    append_entries(1, start=3)
    integrate.integrate_all()
    row = AuditEntry.objects.get(seq=3)
    forged = bytes(row.body).replace(b'"v":2}', b'"v":2,"v":2}')
    tamper(
        "UPDATE operations_auditentry SET body = %s, entry_hash = %s WHERE id = %s",
        [forged, merkle.leaf_hash(forged).hex(), row.pk],
    )
    with pytest.raises(checkpoints.CheckpointRefused) as refused:
        checkpoints.sign_checkpoint()
    assert refused.value.failure.reason == av.PARSE and "duplicate key" in refused.value.failure.detail
