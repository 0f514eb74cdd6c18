"""The archive ledger (issue 24, item 1): an archived range counts only when the log itself records
it - an integrated `audit.archived` entry with the same range, digest and root, in a signed
checkpoint - and on PostgreSQL only the owner writes the ledger, which is append-only. A ledger
row without its entry removes nothing, moves no export or verification past any entry, and is
reported as tampering by `audit_verify`, the signer and /system/.

Each attack runs as the application role of the README (`app_role`) where the database has roles;
the logic checks run on SQLite too, where nothing stops a writer of the database file (said there).
"""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from operations.audit import archive, checkpoints, genuine, health, integrate, ledger
from operations.audit import entries as audit
from operations.audit import verify as av
from operations.audit.export import stream_export
from operations.audit.signer import Signer
from operations.models import AuditArchive, AuditCheckpoint, AuditEntry, ProcessHeartbeat
from tests.audit.helpers import append_entries
from tests.support import T0

pytestmark = pytest.mark.django_db

LOG = "pollerdash/audit"
# The row of the attack: entries 1-11 (all of sample_export's) "archived" in no file at all.
FORGED_ROW = (
    "INSERT INTO operations_auditarchive(log, first_seq, last_seq, name, sha256, size_bytes, root, archived_at) "
    "VALUES ('pollerdash/audit', 1, 11, 'nothing.jsonl', repeat('0', 64), 0, repeat('0', 64), now())"
)


def stored_seqs() -> list[int]:
    return list(AuditEntry.objects.exclude(seq=None).order_by("seq").values_list("seq", flat=True))


def run_archive(*args: str) -> str:
    out = StringIO()
    call_command("archive", *args, stdout=out)
    return out.getvalue()


def audit_verify() -> tuple[int, dict]:
    out = StringIO()
    try:
        call_command("audit_verify", stdout=out)
    except CommandError as exc:
        return exc.returncode, json.loads(out.getvalue())
    return 0, json.loads(out.getvalue())


def forge_row_as_owner(**fields: object) -> AuditArchive:
    """What only the owner can do on PostgreSQL (and anyone who can write the file on SQLite)."""
    values = {
        "log": LOG, "first_seq": 1, "last_seq": 11, "name": "nothing.jsonl", "sha256": "0" * 64,
        "size_bytes": 0, "root": "0" * 64, "archived_at": T0,
    }  # fmt: skip
    values.update(fields)
    return AuditArchive.objects.create(**values)


def record_data(row: AuditArchive) -> dict[str, object]:
    return {
        "first_seq": row.first_seq, "last_seq": row.last_seq, "name": row.name, "sha256": row.sha256,
        "bytes": row.size_bytes, "root": row.root,
    }  # fmt: skip


def fake_record(row: AuditArchive) -> None:
    """An `audit.archived` entry matching `row`, appended the way the application appends entries."""
    with transaction.atomic():
        audit.append(entry_type="audit.archived", actor=archive.ARCHIVER, operation_id=None, data=record_data(row))


# --- the attack of the issue, as the application role -----------------------------------------------------


@pytest.mark.postgres
def test_the_application_role_cannot_write_the_archive_ledger_so_the_owners_archive_removes_nothing(
    sample_export, app_role, tmp_path
):
    assert "only the owner" in app_role.run(FORGED_ROW)
    assert not AuditArchive.objects.exists()
    output = run_archive("--before", "2000-01-01T00:00:00Z", "--to", str(tmp_path / "store"))
    assert "no audit entries old enough" in output and "removed 11" not in output
    assert stored_seqs() == list(range(1, 12))
    status, result = audit_verify()
    assert status == 0 and result["entries"] == 11


@pytest.mark.postgres
def test_the_ledger_is_append_only_and_its_triggers_hold_under_replica_mode(sample_export, app_role, tmp_path):
    archive.archive_before(before=T0 + timedelta(minutes=1), storage=FileSystemStorage(location=tmp_path))
    for statement in (
        "UPDATE operations_auditarchive SET last_seq = 11",
        "UPDATE operations_auditarchive SET sha256 = repeat('0', 64)",
        "DELETE FROM operations_auditarchive",
        "TRUNCATE operations_auditarchive",
    ):
        refusal = app_role.run(statement)
        # TRUNCATE is not among the README's grants; the trigger would refuse it anyway (below).
        assert "append-only" in refusal or ("TRUNCATE" in statement and "permission denied" in refusal), refusal
        # The owner too: the ledger only grows (a wrong row is answered by the log, not erased).
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
            cursor.execute(statement)
    # An insert that does not continue the ledger is refused even for the owner.
    with pytest.raises(DatabaseError, match="do not continue"), transaction.atomic():
        forge_row_as_owner(first_seq=3, last_seq=11)
    assert list(AuditArchive.objects.values_list("first_seq", "last_seq")) == [(1, 4)]


@pytest.mark.postgres
def test_the_application_role_may_not_call_the_prune_function(sample_export, app_role, tmp_path):
    archive.archive_before(before=T0 + timedelta(minutes=1), storage=FileSystemStorage(location=tmp_path))
    checkpoints.sign_checkpoint()
    for call in ("pollerdash_audit_prune('pollerdash/audit', 4)", "pollerdash_audit_prune('pollerdash/audit', 4, 0)"):
        assert "permission denied" in app_role.run(f"SELECT {call}")
    assert "append-only" in app_role.run("DELETE FROM operations_auditentry WHERE seq <= 4")
    assert stored_seqs()[:4] == [1, 2, 3, 4]


@pytest.mark.postgres
def test_the_prune_function_wants_the_ranges_audit_archived_entry_integrated_and_signed(
    sample_export, app_role, tmp_path
):
    def prune(upto: int, after: int = 0) -> str:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pollerdash_audit_prune(%s, %s, %s)", [LOG, upto, after])
                return f"removed {cursor.fetchone()[0]}"
        except DatabaseError as exc:
            return str(exc)

    row = forge_row_as_owner(last_seq=8)  # the owner's mistake: a row without its entry
    assert "audit.archived" in prune(8)
    with app_role.session():
        fake_record(row)  # the application role writes a matching entry: still pending
    assert "audit.archived" in prune(8)
    with app_role.session():
        integrate.integrate_all()  # now integrated (seq 12), but no checkpoint covers it yet
    assert "audit.archived" in prune(8)
    checkpoints.sign_checkpoint()
    assert prune(8, 4) == "removed 4" and stored_seqs()[:4] == [1, 2, 3, 4]
    assert "not archived" in prune(9, 8)


# --- the logic checks, on both databases -----------------------------------------------------------------


def test_a_row_without_its_entry_moves_nothing_and_is_reported_as_tampering(
    sample_export, tmp_path, keys_file, admin_client
):
    forge_row_as_owner()
    # Exports and the database check still start at the first entry: the row vouches for nothing.
    assert json.loads(b"".join(stream_export()).split(b"\n")[0])["header"]["from"] == 0
    status, result = audit_verify()
    assert status == 1 and result["reason"] == ledger.UNRECORDED_ARCHIVE
    assert "entries 1-11" in result["detail"] and "nothing.jsonl" in result["detail"]
    # The owner's routine archive removes none of them.
    output = run_archive("--before", "2000-01-01T00:00:00Z", "--to", str(tmp_path / "store"))
    assert "no audit entries old enough" in output
    assert stored_seqs()[:11] == list(range(1, 12))  # (12: admin_client's user.created)
    assert archive.prune_archived(storage=FileSystemStorage(location=tmp_path / "store")).removed == 0
    # /system/ says so.
    checks = {check.name: check for check in health.audit_protection_checks()}
    assert checks["audit archive ledger"].ok is False
    assert "entries 1-11" in checks["audit archive ledger"].message
    page = admin_client.get("/system/").content.decode()
    assert "audit archive ledger" in page and "has no matching audit.archived entry in the log" in page
    # The signer keeps signing (the tree is sound) but reports it on every tick.
    signer = Signer(interval_s=60)
    assert signer.tick().signed is not None
    beat = ProcessHeartbeat.objects.get(kind="signer")
    assert beat.info["ok"] is True and ledger.UNRECORDED_ARCHIVE in beat.info["ledger"]


def test_a_row_and_a_fake_entry_without_a_signed_stored_archive_remove_nothing(sample_export, tmp_path, keys_file):
    # The row (the owner's mistake on PostgreSQL; anyone on SQLite) and a matching entry, integrated
    # and signed: the prune still reads the archive back from its storage and verifies it first.
    row = forge_row_as_owner(last_seq=8)
    fake_record(row)
    checkpoints.sign_checkpoint()
    store = FileSystemStorage(location=tmp_path / "store")
    with pytest.raises(archive.ArchiveError, match="nothing.jsonl"):
        archive.prune_archived(storage=store)
    store.save("nothing.jsonl", ContentFile(b"not an archive\n"))
    with pytest.raises(archive.ArchiveError, match="does not verify"):
        archive.prune_archived(storage=store)
    assert stored_seqs()[:8] == list(range(1, 9))


def test_an_archive_altered_in_its_storage_after_recording_is_not_pruned(sample_export, tmp_path, keys_file):
    store = FileSystemStorage(location=tmp_path / "store")
    done = archive.archive_before(before=T0 + timedelta(minutes=2), storage=store)
    checkpoints.sign_checkpoint()  # the audit.archived entry, signed
    path = tmp_path / "store" / done.name
    path.write_bytes(path.read_bytes().replace(b'"decision":"wait"', b'"decision":"done"', 1))
    with pytest.raises(archive.ArchiveError, match="reads back differently"):
        archive.prune_archived(storage=store)
    path.unlink()
    with pytest.raises(archive.ArchiveError, match="cannot read"):
        archive.prune_archived(storage=store)
    assert stored_seqs()[:8] == list(range(1, 9))


def test_a_fake_entry_without_a_row_vouches_for_nothing(sample_export, tmp_path, keys_file):
    with transaction.atomic():
        audit.append(
            entry_type="audit.archived", actor=archive.ARCHIVER, operation_id=None,
            data={"first_seq": 1, "last_seq": 11, "name": "x.jsonl", "sha256": "0" * 64, "bytes": 0, "root": "0" * 64},
        )  # fmt: skip
    checkpoints.sign_checkpoint()
    assert ledger.read(LOG).upto == 0
    assert archive.prune_archived(storage=FileSystemStorage(location=tmp_path)).removed == 0
    assert audit_verify()[0] == 0 and stored_seqs() == list(range(1, 13))


def test_an_archive_waits_for_the_signer_to_sign_its_record_before_pruning(
    sample_export, keys_file, tmp_path, settings, monkeypatch
):
    # The owner's host holds no signing key: the audit.archived entry is signed by the signer.
    settings.AUDIT_SIGNING_KEY_FILE = ""
    settings.AUDIT_VERIFIER_KEYS_FILE = str(keys_file)
    key_file = tmp_path / "audit-signing-key.pem"
    store = str(tmp_path / "store")
    waits: list[float] = []
    monkeypatch.setattr(archive, "sleep", waits.append)  # the signer does not come
    output = run_archive("--before", "2026-12-01T10:02:00Z", "--to", store, "--wait-for-signer", "5")
    assert "archived audit entries 1-8" in output and "the signer" in output
    assert stored_seqs()[:8] == list(range(1, 9)) and waits

    def signer_signs(seconds: float) -> None:  # the signer's next tick, on its own host
        settings.AUDIT_SIGNING_KEY_FILE = str(key_file)
        checkpoints.sign_checkpoint()
        settings.AUDIT_SIGNING_KEY_FILE = ""

    monkeypatch.setattr(archive, "sleep", signer_signs)
    output = run_archive("--before", "2026-12-01T10:02:00Z", "--to", store, "--wait-for-signer", "5")
    assert "removed 8 archived audit entries" in output
    assert stored_seqs() == [9, 10, 11, 12]


# --- checkpoints the application role writes ---------------------------------------------------------------


def forged_checkpoint_rows(good) -> list[dict[str, object]]:
    """Rows the application role can insert: a bad signature at a bigger size, garbage, a genuine
    note under a row that claims a bigger tree, and a genuine note from the future."""
    bigger = good.note.replace(f"\n{good.size}\n", "\n1000000\n", 1)
    return [
        {"size": 1_000_000, "head_hash": good.head_hash, "note": bigger, "signed_at": good.signed_at},
        {"size": 2_000_000, "head_hash": "0" * 64, "note": "garbage", "signed_at": good.signed_at},
        {"size": 3_000_000, "head_hash": good.head_hash, "note": good.note, "signed_at": good.signed_at},
        {"size": good.size, "head_hash": good.head_hash, "note": good.note, "signed_at": T0 + timedelta(days=365)},
    ]


def insert_checkpoint(row: dict[str, object], *, app_role=None) -> None:
    sql = (
        "INSERT INTO operations_auditcheckpoint(log, size, head_hash, tree, chain_head, signed_at, key_id, note) "
        "VALUES (%s, %s, %s, true, '', %s, %s, %s)"
    )
    params = [LOG, row["size"], row["head_hash"], row["signed_at"], "00000000", row["note"]]
    if app_role is None:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    else:
        assert app_role.run(sql, params) == "allowed"  # checkpoints stay insertable: the signer is the app


def forge_checkpoints(app_role=None) -> None:
    good = checkpoints.latest_genuine_checkpoint(keys=checkpoints.trusted_keys())
    for row in forged_checkpoint_rows(good):
        insert_checkpoint(row, app_role=app_role)


def check_forged_checkpoints_are_skipped(keys_file, tmp_path) -> None:
    append_entries(2, start=12)
    skipped: list = []
    signed = checkpoints.sign_checkpoint(skipped=skipped)
    assert signed.size == 13  # the real tree, signed over the forged rows
    assert len(skipped) == 4 and {s.reason for s in skipped} >= {av.BAD_SIGNATURE, av.PARSE}
    # Exports skip them too and still verify; the command names them on stderr.
    path, err = tmp_path / "full.jsonl", StringIO()
    call_command("audit_export", "-o", str(path), stderr=err)
    assert av.run([str(path), "--keys", str(keys_file)])[0] == 0
    assert "skipped 4 checkpoint rows that do not verify" in err.getvalue()
    # The signer's heartbeat and /system/ report the ones above its newest genuine checkpoint (the
    # forged size-11 row is below it now: only exports of size 11 meet it, and skip it).
    signer = Signer(interval_s=60)
    assert signer.tick().signed is not None
    checks = {check.name: check for check in health.audit_protection_checks()}
    assert checks["audit checkpoint rows"].ok is False
    assert "passed over 3 checkpoint rows" in checks["audit checkpoint rows"].message
    # The database check verifies everything else, then names them.
    status, result = audit_verify()
    assert status == 1 and "checkpoint rows" in result["detail"] and "everything else verified" in result["detail"]


@pytest.mark.postgres
def test_checkpoint_rows_forged_by_the_application_role_are_skipped_and_reported(
    sample_export, app_role, keys_file, tmp_path
):
    forge_checkpoints(app_role)
    check_forged_checkpoints_are_skipped(keys_file, tmp_path)


@pytest.mark.sqlite
def test_forged_checkpoint_rows_are_skipped_and_reported_on_sqlite(sample_export, keys_file, tmp_path):
    forge_checkpoints()
    check_forged_checkpoints_are_skipped(keys_file, tmp_path)


def test_a_forged_bigger_checkpoint_never_lowers_the_floor_the_signer_keeps(sample_export):
    forge_checkpoints()
    # The entries the genuine size-11 checkpoint signed are cut back (an owner's edit): the signer
    # refuses, whatever smaller tree forged rows or the stored log now show.
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ALTER TABLE operations_auditentry DISABLE TRIGGER operations_auditentry_no_change")
        cursor.execute("DELETE FROM operations_auditentry WHERE seq >= 10")
    insert_checkpoint({"size": 9, "head_hash": "0" * 64, "note": "garbage", "signed_at": T0 + timedelta(days=1)})
    with pytest.raises(checkpoints.CheckpointRefused, match="SEQ_GAP"):
        checkpoints.sign_checkpoint()
    assert checkpoints.latest_genuine_checkpoint(keys=checkpoints.trusted_keys()).size == 11


def test_an_export_on_a_host_without_the_key_closes_at_the_newest_genuine_checkpoint(
    sample_export, keys_file, settings, verify
):
    genuine = checkpoints.sign_checkpoint()
    forge_checkpoints()
    settings.AUDIT_SIGNING_KEY_FILE = ""
    settings.AUDIT_VERIFIER_KEYS_FILE = str(keys_file)
    assert checkpoints.checkpoint_for_export().pk == genuine.pk
    status, result = verify(b"".join(stream_export()))
    assert status == 0 and result["size"] == 11, result


def test_junk_typed_audit_archived_breaks_neither_the_ledger_nor_the_prune(sample_export, tmp_path, keys_file):
    # Whoever may append entries may append bytes that are no JSON under that type (the signer will
    # refuse them once integrated; until then they sit pending): the ledger and the prune function
    # read them as nothing rather than fail.
    store = FileSystemStorage(location=tmp_path / "store")
    archive.archive_before(before=T0 + timedelta(minutes=2), storage=store)
    checkpoints.sign_checkpoint()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO operations_auditentry(log, seq, prev_hash, entry_hash, body, at, type, operation_id) "
            "VALUES (%s, NULL, NULL, %s, %s, %s, 'audit.archived', '')",
            [LOG, "0" * 64, b"\xff not json", T0],
        )
        # Numbered, as the one change the entries' trigger allows, so the prune function meets it.
        cursor.execute("UPDATE operations_auditentry SET seq = 99 WHERE seq IS NULL AND type = 'audit.archived'")
    assert ledger.read(LOG).upto == 8 and not ledger.read(LOG).problems
    assert archive.prune_archived(storage=store).removed == 8


def test_a_flood_of_forged_checkpoint_rows_stops_signing_loudly_not_wrongly(sample_export, monkeypatch):
    # Past genuine.EXAMINE_LIMIT rows that do not verify above the newest genuine one, the signer
    # says the table is flooded and signs nothing - never a tree smaller than one it signed.
    monkeypatch.setattr(genuine, "EXAMINE_LIMIT", 2)
    monkeypatch.setattr(genuine, "_PAGE", 1)
    forge_checkpoints()
    with pytest.raises(checkpoints.CheckpointError, match="flooded with forged rows"):
        checkpoints.sign_checkpoint()
    signer = Signer(interval_s=60)
    assert signer.tick().signed is None
    assert "flooded" in ProcessHeartbeat.objects.get(kind="signer").info["error"]


@pytest.mark.sqlite
def test_sqlite_says_what_it_cannot_protect(sample_export):
    checks = {check.name: check for check in health.audit_protection_checks()}
    assert checks["append-only triggers"].ok is False
    assert "archive ledger" in checks["append-only triggers"].message


def test_a_genuine_note_under_a_row_of_the_wrong_kind_is_passed_over(sample_export, keys_file, tmp_path, verify):
    # The row's `tree` flag is the one column no signature covers: a copy of the newest tree
    # checkpoint labelled a chain (version-1) checkpoint, and the empty tree's root labelled a
    # chain checkpoint of size 0, must neither send the signer back to the switch nor break exports.
    good = checkpoints.latest_genuine_checkpoint(keys=checkpoints.trusted_keys())
    for row in AuditCheckpoint.objects.filter(pk=good.pk) | AuditCheckpoint.objects.filter(size=0, chain_head=""):
        AuditCheckpoint.objects.create(
            log=row.log, size=row.size, head_hash=row.head_hash, tree=False, chain_head="", signed_at=row.signed_at,
            key_id=row.key_id, note=row.note,
        )  # fmt: skip
    append_entries(1, start=12)
    skipped: list = []
    assert checkpoints.sign_checkpoint(skipped=skipped).size == 12
    assert len(skipped) == 1 and skipped[0].reason == av.CHECKPOINT_MISMATCH
    status, result = verify(b"".join(stream_export()))
    assert status == 0 and result["size"] == 12, result
    assert audit_verify()[0] == 1  # reported, after everything else verified


def test_wait_for_signer_says_what_it_wants(sample_export, tmp_path):
    for bad, words in (("-1", "from 0 to 3600"), ("7200", "from 0 to 3600"), ("soon", "invalid float value")):
        with pytest.raises(CommandError, match=f"--wait-for-signer.*{words}"):
            run_archive("--before", "2026-12-01T10:01:00Z", "--to", str(tmp_path), "--wait-for-signer", bad)
    assert not AuditArchive.objects.exists() and stored_seqs() == list(range(1, 12))
