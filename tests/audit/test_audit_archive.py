"""Retention: `manage.py archive` writes sealed ranges, verifies them, records them in the log, and
only then prunes through the guarded function, in chunks; a prune interrupted between or inside
chunks leaves a log that verifies, and the next run finishes it; proofs for the entries left stay
valid; archives and a newer export verify together; finished work past the retention period goes,
open work stays."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.files.storage import FileSystemStorage
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from django_q.models import Success

from operations.audit import archive, checkpoints, database
from operations.audit import verify as av
from operations.audit.export import ExportError, stream_export
from operations.lifecycle import retention
from operations.models import AuditArchive, AuditCheckpoint, AuditEntry, Escalation, Operation, StatusCheck
from tests.audit.helpers import OP_A, OP_B
from tests.support import T0, job_id

pytestmark = pytest.mark.django_db


def run_archive(before: str, directory) -> str:
    out = StringIO()
    call_command("archive", "--before", before, "--to", str(directory), stdout=out)
    return out.getvalue()


def test_archives_and_a_newer_export_verify_together_and_a_missing_or_altered_range_does_not(
    sample_export, keys_file, tmp_path
):
    store = tmp_path / "archive"
    assert "archived audit entries 1-4" in run_archive("2026-12-01T10:01:00Z", store)  # before entries 5-8
    assert "archived audit entries 5-8" in run_archive("2026-12-01T10:02:00Z", store)  # then up to 8
    # 12 and 13: the two audit.archived entries, each signed before its range was removed.
    assert list(AuditEntry.objects.exclude(seq=None).order_by("seq").values_list("seq", flat=True)) == [
        9, 10, 11, 12, 13,
    ]  # fmt: skip
    assert list(AuditArchive.objects.order_by("last_seq").values_list("first_seq", "last_seq")) == [(1, 4), (5, 8)]
    bodies = AuditEntry.objects.filter(type="audit.archived").order_by("pk").values_list("body", flat=True)
    recorded = [json.loads(bytes(body))["data"] for body in bodies]
    assert [(r["first_seq"], r["last_seq"]) for r in recorded] == [(1, 4), (5, 8)]
    first, second = sorted(store.iterdir())
    newer = tmp_path / "newer.jsonl"
    newer.write_bytes(b"".join(stream_export()))
    assert json.loads(newer.read_bytes().split(b"\n")[0])["header"]["from"] == 8
    keys = keys_file
    status, result = av.run([str(first), str(second), str(newer), "--keys", str(keys)])
    assert status == 0 and result["files"] == 3 and result["entries"] == 11 + 2, result  # +2 audit.archived
    # The newer export alone still verifies (from its frontier), and each archive alone too.
    assert av.run([str(newer), "--keys", str(keys)])[0] == 0
    assert av.run([str(second), "--keys", str(keys)])[0] == 0
    # A missing range: the second archive left out.
    status, result = av.run([str(first), str(newer), "--keys", str(keys)])
    assert (status, result["reason"]) == (1, av.SEQ_GAP)
    # An altered range: one entry of the first archive edited.
    altered = tmp_path / "altered.jsonl"
    altered.write_bytes(first.read_bytes().replace(b'"decision":"wait"', b'"decision":"done"', 1))
    status, result = av.run([str(altered), str(second), str(newer), "--keys", str(keys)])
    assert (status, result["reason"]) == (1, av.HASH_MISMATCH)


def test_proofs_for_entries_left_stay_valid_and_the_database_still_verifies(sample_export, verify, tmp_path, clock):
    run_archive("2026-12-01T10:02:00Z", tmp_path / "archive")
    scoped = b"".join(stream_export(operation_id=OP_B))
    status, result = verify(scoped, "--strict")
    assert status == 0 and result["entries"] == 3, result  # 9-11: 5 and 6 are archived
    with pytest.raises(ExportError):
        stream_export(operation_id=OP_A)  # every entry of OP_A is in the archive now
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert json.loads(out.getvalue())["ok"] is True
    clock.move_to(T0 + timedelta(minutes=10), tick=False)
    assert checkpoints.sign_checkpoint().size == 12  # the audit.archived entry, integrated and signed
    assert "no audit entries old enough" in run_archive("2026-12-01T10:02:00Z", tmp_path / "archive")


def test_a_prune_interrupted_midway_leaves_a_valid_log_and_the_next_run_finishes_it(
    sample_export, keys_file, verify, tmp_path, monkeypatch
):
    store = tmp_path / "archive"
    storage = FileSystemStorage(location=store)
    done = archive.archive_before(before=T0 + timedelta(minutes=2), storage=storage)
    assert (done.first_seq, done.last_seq) == (1, 8)
    checkpoints.sign_checkpoint()  # the audit.archived entry (12), signed: what the prune waits for
    real_prune = database.prune
    chunks: list[int] = []

    def killed_in_second_chunk(*, log: str, after: int, upto: int) -> int:
        chunks.append(upto)
        if len(chunks) == 1:
            return real_prune(log=log, after=after, upto=upto)
        with transaction.atomic():
            real_prune(log=log, after=after, upto=upto)  # deleted inside the chunk's transaction...
            raise DatabaseError("server closed the connection unexpectedly")  # ...which never commits

    monkeypatch.setattr(database, "prune", killed_in_second_chunk)
    with pytest.raises(DatabaseError):
        archive.prune_archived(chunk=3, storage=storage)
    monkeypatch.undo()
    assert chunks == [3, 6]

    def stored() -> list[int]:
        return list(AuditEntry.objects.exclude(seq=None).order_by("seq").values_list("seq", flat=True))

    assert stored() == [4, 5, 6, 7, 8, 9, 10, 11, 12]  # 1-3 went; 4-6 rolled back whole

    # Midway, the database verifies, a full export continues the archive, and the entries archived
    # but still stored are proven like any other.
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert json.loads(out.getvalue())["ok"] is True
    (archived,) = store.iterdir()
    newer = tmp_path / "newer.jsonl"
    newer.write_bytes(b"".join(stream_export()))
    status, result = av.run([str(archived), str(newer), "--keys", str(keys_file)])
    assert status == 0 and result["entries"] == 11 + 1, result  # +1 audit.archived
    status, result = verify(b"".join(stream_export(operation_id=OP_A)), "--strict")
    assert status == 0 and result["entries"] == 3, result  # 4, 7 and 8: not removed yet

    # The next run has nothing new to archive and removes what the interrupted prune left.
    output = run_archive("2026-12-01T10:02:00Z", store)
    assert "no audit entries old enough" in output and "removed 5 archived audit entries" in output
    assert stored() == [9, 10, 11, 12]  # 12: the audit.archived entry
    with pytest.raises(ExportError):
        stream_export(operation_id=OP_A)
    newer.write_bytes(b"".join(stream_export()))
    status, result = av.run([str(archived), str(newer), "--keys", str(keys_file)])
    assert status == 0 and result["entries"] == 12, result
    assert archive.prune_archived(storage=storage).removed == 0


def test_an_archive_that_does_not_read_back_removes_nothing(sample_export, tmp_path, monkeypatch):
    class Lossy(FileSystemStorage):
        def _save(self, name, content):  # Storage's own signature
            return super()._save(name, type(content)(open(tmp_path / "junk", "w+b")))

    (tmp_path / "junk").write_bytes(b"not the archive\n")
    with pytest.raises(archive.ArchiveError, match="reads back differently"):
        archive.archive_before(before=T0 + timedelta(minutes=2), storage=Lossy(location=tmp_path / "lossy"))
    assert AuditEntry.objects.exclude(seq=None).count() == 11 and not AuditArchive.objects.exists()


@pytest.mark.postgres
def test_the_application_role_cannot_prune(sample_export, tmp_path, app_role):
    def as_app(sql: str) -> str:
        return app_role.run(f"SELECT set_config('pollerdash.audit_prune', 'pollerdash/audit', true); {sql}")

    assert "append-only" in as_app("DELETE FROM operations_auditentry WHERE seq <= 4")
    assert "permission denied" in as_app("SELECT pollerdash_audit_prune('pollerdash/audit', 4)")
    assert "permission denied" in as_app("SELECT pollerdash_audit_prune('pollerdash/audit', 4, 2)")
    # The owner may call it, but not for entries no archive holds, whole or one chunk of them.
    for call in ("pollerdash_audit_prune('pollerdash/audit', 4)", "pollerdash_audit_prune('pollerdash/audit', 4, 2)"):
        with pytest.raises(DatabaseError, match="not archived"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SELECT {call}")
    archive.archive_before(before=T0 + timedelta(minutes=1), storage=FileSystemStorage(location=tmp_path))  # 1-4
    checkpoints.sign_checkpoint()
    with pytest.raises(DatabaseError, match="not archived"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pollerdash_audit_prune('pollerdash/audit', 5, 4)")  # a chunk past the archive
    assert "append-only" in as_app("DELETE FROM operations_auditentry WHERE seq <= 4")
    assert AuditEntry.objects.exclude(seq=None).count() == 12


def test_finished_work_past_retention_goes_and_open_work_stays(
    make_operation, drive, clock, settings, tmp_path, signing_key, monkeypatch
):
    settings.RETENTION_DAYS = 90
    monkeypatch.setattr(retention, "TASK_BATCH", 1)  # batches end to end
    done = make_operation(job_id("slow_success", polls=1))
    drive(done)
    still_open = make_operation(job_id("slow_success", polls=50))
    # Finished, but a person still has its card (a card can outlive the job, e.g. a failed callback).
    carded = make_operation(job_id("slow_success", polls=1))
    drive(carded)
    Escalation.objects.create(operation=carded, reason="integration_failure", detail="callback failed", opened_at=T0)
    assert (
        Operation.objects.get(pk=done.pk).status == "succeeded" and StatusCheck.objects.filter(operation=done).exists()
    )
    Success.objects.create(id=uuid.uuid4().hex, name="old", func="x", started=T0, stopped=T0, success=True)
    Success.objects.create(id=uuid.uuid4().hex, name="old-2", func="x", started=T0, stopped=T0, success=True)
    clock.move_to(T0 + timedelta(days=91), tick=False)
    Success.objects.create(
        id=uuid.uuid4().hex, name="new", func="x", started=timezone.now(), stopped=timezone.now(), success=True
    )
    out = StringIO()
    call_command("archive", "--before", "2026-12-01T00:00:00Z", "--to", str(tmp_path), stdout=out)
    assert "removed 1 finished operations" in out.getvalue() and "2 finished task rows" in out.getvalue()
    assert (
        not Operation.objects.filter(pk=done.pk).exists()
        and not StatusCheck.objects.filter(operation_id=done.pk).exists()
    )
    assert Operation.objects.filter(pk=still_open.pk).exists()
    assert Operation.objects.filter(pk=carded.pk).exists() and StatusCheck.objects.filter(operation=carded).exists()
    assert list(Success.objects.values_list("name", flat=True)) == ["new"]
    assert AuditEntry.objects.filter(operation_id=done.pk).exists()


def test_an_archive_needs_no_signing_key_it_seals_at_the_signers_checkpoint(
    sample_export, keys_file, tmp_path, settings
):
    # The host that may prune (the owner's) must not hold the signing key (docs/deployment.md).
    settings.AUDIT_SIGNING_KEY_FILE = ""
    signed = AuditCheckpoint.objects.count()
    with pytest.raises(CommandError, match="AUDIT_VERIFIER_KEYS_FILE"):
        run_archive("2026-12-01T10:02:00Z", tmp_path / "store")  # nothing to verify the archive with
    assert not AuditArchive.objects.exists() and AuditEntry.objects.exclude(seq=None).count() == 11
    settings.AUDIT_VERIFIER_KEYS_FILE = str(keys_file)  # the public key line only
    out = StringIO()
    call_command(
        "archive", "--before", "2026-12-01T10:02:00Z", "--to", str(tmp_path / "store"), "--wait-for-signer", "0",
        stdout=out,
    )  # fmt: skip
    assert "archived audit entries 1-8" in out.getvalue()
    assert AuditCheckpoint.objects.count() == signed  # sealed at a checkpoint the signer had signed
    # Its record (entry 12) is not signed yet, so the entries stay until the signer's next checkpoint.
    assert "entries 1-8 stay until the signer's checkpoint covers their audit.archived entry" in out.getvalue()
    assert list(AuditEntry.objects.exclude(seq=None).values_list("seq", flat=True).order_by("seq"))[:8] == [
        1, 2, 3, 4, 5, 6, 7, 8,
    ]  # fmt: skip


@pytest.mark.postgres
def test_archive_as_the_application_role_writes_nothing_and_says_which_role_to_use(sample_export, tmp_path, app_role):
    # Only the owner records archives (the ledger's trigger), so the application role is stopped
    # before it writes a file no row could ever vouch for.
    store = tmp_path / "store"
    with app_role.session(), pytest.raises(CommandError, match="DATABASE_URL naming the database owner"):
        run_archive("2026-12-01T10:01:00Z", store)
    assert not AuditArchive.objects.exists() and not (store.exists() and any(store.iterdir()))
    assert AuditEntry.objects.filter(seq__lte=4).count() == 4  # nothing removed
    output = run_archive("2026-12-01T10:01:00Z", store)  # the owner
    assert "archived audit entries 1-4" in output and "removed 4 archived audit entries" in output
    # And an archive the owner recorded is not removed by the application role either.
    archive.archive_before(before=T0 + timedelta(minutes=2), storage=FileSystemStorage(location=store))
    checkpoints.sign_checkpoint()
    with app_role.session(), pytest.raises(CommandError, match="PRUNE STOPPED.*database owner"):
        run_archive("2026-12-01T10:02:00Z", store)
    assert AuditEntry.objects.filter(seq__gte=5, seq__lte=8).count() == 4
