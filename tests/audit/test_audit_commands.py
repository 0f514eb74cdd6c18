"""The audit commands as an operator runs them: export to a file or stdout, verify the database."""

from __future__ import annotations

import json
import os
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from operations.audit import verify as av
from tests.audit.helpers import OP_A, OP_B, append_entries

pytestmark = pytest.mark.django_db


def test_audit_export_to_a_file_verifies_offline(sample_export, tmp_path, keys_file):
    path = tmp_path / "incident.jsonl"
    err = StringIO()
    call_command("audit_export", "-o", str(path), stderr=err)
    assert "exported 18 lines" in err.getvalue()  # the sample: a newer closing checkpoint of size 11
    status, result = av.run([str(path), "--keys", str(keys_file)])
    assert status == 0 and result["entries"] == 11
    assert not list(tmp_path.glob(".*.partial"))


def test_audit_export_of_one_operation_and_a_window(sample_export, tmp_path, keys_file):
    path = tmp_path / "op.jsonl"
    call_command("audit_export", "--operation", OP_B, "-o", str(path), stderr=StringIO())
    assert av.run([str(path), "--keys", str(keys_file)])[1]["operation_id"] == OP_B
    call_command(
        "audit_export", "--since", "2026-12-01T10:01:00Z", "--until", "2026-12-01T10:02:00+00:00",
        "-o", str(path), stderr=StringIO(),
    )  # fmt: skip
    status, result = av.run([str(path), "--keys", str(keys_file)])
    assert status == 0 and (result["scope"], result["entries"]) == ("range", 4)
    call_command("audit_export", "--operation", OP_B, "--consistency-from", "4", "-o", str(path), stderr=StringIO())
    assert b'{"consistency":{"from":4,' in path.read_bytes()
    with pytest.raises(CommandError, match="consistency-from 99"):
        call_command("audit_export", "--operation", OP_B, "--consistency-from", "99", stderr=StringIO())


def test_audit_export_to_stdout(sample_export, capsysbinary, keys_file, tmp_path):
    call_command("audit_export", "--operation", OP_A, stderr=StringIO())
    data = capsysbinary.readouterr().out
    assert data.startswith(b'{"header":') and data.endswith(b"\n")
    path = tmp_path / "stdout.jsonl"
    path.write_bytes(data)
    assert av.run([str(path), "--keys", str(keys_file)])[0] == 0


def test_audit_export_says_what_is_wrong(sample_export):
    with pytest.raises(CommandError, match="no audit entries of op_nothing"):
        call_command("audit_export", "--operation", "op_nothing", stderr=StringIO())
    with pytest.raises(CommandError, match="RFC 3339"):
        call_command("audit_export", "--since", "yesterday", stderr=StringIO())
    with pytest.raises(CommandError, match="earlier than until"):
        call_command(
            "audit_export", "--since", "2026-12-01T11:00:00Z", "--until", "2026-12-01T10:00:00Z", stderr=StringIO()
        )


def test_audit_export_output_paths(sample_export, tmp_path, keys_file):
    import os
    import threading

    from operations.models import AuditCheckpoint

    signed = AuditCheckpoint.objects.count()
    with pytest.raises(CommandError, match="is a directory"):
        call_command("audit_export", "-o", str(tmp_path), stderr=StringIO())
    with pytest.raises(CommandError, match="does not exist"):
        call_command("audit_export", "-o", str(tmp_path / "missing" / "x.jsonl"), stderr=StringIO())
    assert AuditCheckpoint.objects.count() == signed  # a bad path costs no checkpoint

    # With --follow-symlinks a symlink stays a symlink; its target gets the export (without the
    # option a link is refused: test_audit_export_refuses_a_planted_symlink).
    real = tmp_path / "real.jsonl"
    real.write_text("old")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    call_command("audit_export", "-o", str(link), "--follow-symlinks", stderr=StringIO())
    assert link.is_symlink() and av.run([str(real), "--keys", str(keys_file)])[0] == 0

    # A named pipe is written through, not replaced by a regular file.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    call_command("audit_export", "-o", str(fifo), stderr=StringIO())
    reader.join(timeout=10)
    assert received and received[0].startswith(b'{"header":') and not fifo.is_file()


def test_audit_verify_checks_the_database_chain(sample_export):
    append_entries(2, start=12)  # after the last checkpoint: normal in the database, and counted
    out = StringIO()
    call_command("audit_verify", stdout=out)
    result = json.loads(out.getvalue())
    assert result["ok"] is True and result["entries"] == 11 and result["unsigned_tail"] == 0
    assert result["checkpoints"] == 5  # every stored checkpoint, not only the newest of each size
    call_command("audit_integrate", stdout=out)
    assert "integrated 2; pending 0" in out.getvalue()
    out = StringIO()
    call_command("audit_verify", stdout=out)
    result = json.loads(out.getvalue())
    assert result["entries"] == 13 and result["unsigned_tail"] == 2


def test_audit_verify_reports_tampering_with_exit_status_1(sample_export):
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ALTER TABLE operations_auditentry DISABLE TRIGGER operations_auditentry_no_change")
        cursor.execute(
            "UPDATE operations_auditentry SET operation_id = %s WHERE seq = %s", ["op_somebody_else", 3]
        )  # a copied column that disagrees with the hashed bytes
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("audit_verify", stdout=out)
    assert failed.value.returncode == 1
    failure = json.loads(out.getvalue())
    assert (failure["ok"], failure["reason"], failure["seq"]) == (False, av.HASH_MISMATCH, 3)


@pytest.mark.sqlite  # only SQLite lets a hand edit leave text in the bytes column
def test_a_body_rewritten_as_text_is_tampering_not_a_crash(sample_export):
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE operations_auditentry SET body = replace(CAST(body AS TEXT), 'controller', 'Controller') "
            "WHERE seq = 11"
        )
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("audit_verify", stdout=out)
    assert failed.value.returncode == 1 and json.loads(out.getvalue())["reason"] == av.HASH_MISMATCH
    with pytest.raises(CommandError) as refused:
        call_command("audit_checkpoint", "--once", stdout=StringIO(), stderr=StringIO())
    assert refused.value.returncode == 1


def test_the_checkpoint_interval_must_be_a_sensible_number_of_seconds():
    for bad in ("-5", "0", "abc"):
        with pytest.raises(CommandError, match="--interval"):
            call_command("audit_checkpoint", "--loop", "--interval", bad, stderr=StringIO())


def test_audit_verify_without_any_key_is_a_usage_error(settings):
    settings.AUDIT_SIGNING_KEY_FILE = ""
    with pytest.raises(CommandError) as failed:
        call_command("audit_verify", stdout=StringIO())
    assert failed.value.returncode == 2


def test_as_async_lines_streams_in_order_and_in_batches():
    import asyncio

    from operations.audit.export import as_async_lines

    pulled: list[int] = []

    def lines():
        for number in range(1, 1201):
            pulled.append(number)
            yield f"{number}\n".encode()

    async def first_then_rest() -> tuple[list[bytes], int, list[bytes]]:
        stream = as_async_lines(lines(), batch=500)
        first = [await anext(stream)]
        pulled_after_first = len(pulled)
        return first, pulled_after_first, [line async for line in stream]

    first, pulled_after_first, rest = asyncio.run(first_then_rest())
    assert pulled_after_first == 500  # one batch at a time, never the whole iterator
    assert first + rest == [f"{n}\n".encode() for n in range(1, 1201)]


def test_audit_export_keeps_a_private_file_private(sample_export, tmp_path, keys_file):
    # Exports hold purposes, comments and usernames: a 0600 target must not come back 0644.
    path = tmp_path / "incident.jsonl"
    path.write_text("old")
    path.chmod(0o600)
    call_command("audit_export", "-o", str(path), stderr=StringIO())
    assert path.stat().st_mode & 0o777 == 0o600
    assert av.run([str(path), "--keys", str(keys_file)])[0] == 0

    # A new file is made private too, whatever the umask.
    fresh = tmp_path / "fresh.jsonl"
    call_command("audit_export", "-o", str(fresh), stderr=StringIO())
    assert fresh.stat().st_mode & 0o777 == 0o600


def test_audit_export_does_not_follow_a_planted_temporary_name(sample_export, tmp_path, keys_file):
    # Someone who can write the directory plants the old predictable temporary name as a link to a
    # file of ours: the export must neither write through it nor remove it.
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = shared / "victim.txt"
    victim.write_text("keep me")
    path = shared / "incident.jsonl"
    planted = shared / ".incident.jsonl.partial"
    planted.symlink_to(victim)
    call_command("audit_export", "-o", str(path), stderr=StringIO())
    assert victim.read_text() == "keep me"
    assert planted.is_symlink() and not path.is_symlink()
    assert av.run([str(path), "--keys", str(keys_file)])[0] == 0
    assert {p.name for p in shared.iterdir()} == {"victim.txt", "incident.jsonl", ".incident.jsonl.partial"}


def test_audit_export_refuses_a_planted_symlink(sample_export, tmp_path, keys_file):
    # Issue 24, item 10: someone who can write a shared directory plants the export's name as a link
    # to a file of the reviewer's (or to one they can read): nothing is written through it.
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    victim.chmod(0o644)
    path = shared / "incident.jsonl"
    path.symlink_to(victim)
    with pytest.raises(CommandError, match=f"{path} is a symbolic link; refusing to follow it"):
        call_command("audit_export", "-o", str(path), stderr=StringIO())
    assert victim.read_text() == "keep me" and path.is_symlink()
    assert [p.name for p in shared.iterdir()] == ["incident.jsonl"]  # no temporary left behind
    # A dangling link (pointing where the planter wants a new file) is refused the same way.
    dangling = shared / "other.jsonl"
    dangling.symlink_to(tmp_path / "made-by-the-export.jsonl")
    with pytest.raises(CommandError, match="is a symbolic link"):
        call_command("audit_export", "-o", str(dangling), stderr=StringIO())
    assert not (tmp_path / "made-by-the-export.jsonl").exists()
    # Asked for, the link is followed: its target gets the export, keeps its mode, the link stays.
    call_command("audit_export", "-o", str(path), "--follow-symlinks", stderr=StringIO())
    assert path.is_symlink() and victim.stat().st_mode & 0o777 == 0o644
    assert av.run([str(victim), "--keys", str(keys_file)])[0] == 0


def test_a_symlink_planted_after_the_check_is_replaced_not_followed(sample_export, tmp_path, keys_file, monkeypatch):
    # The race: the name is a plain file when checked and a link when the export lands. The rename
    # replaces the link itself (never its target), and the link lends the export no mode.
    from operations.management.commands import audit_export

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    victim.chmod(0o666)
    path = tmp_path / "incident.jsonl"
    real_target = audit_export._target

    def check_then_plant(target: Path, **options: bool) -> object:
        checked = real_target(target, **options)
        target.symlink_to(victim)
        return checked

    monkeypatch.setattr(audit_export, "_target", check_then_plant)
    call_command("audit_export", "-o", str(path), stderr=StringIO())
    assert victim.read_text() == "keep me" and not path.is_symlink()
    assert path.stat().st_mode & 0o777 == 0o600
    assert av.run([str(path), "--keys", str(keys_file)])[0] == 0


def test_a_pipe_swapped_for_a_symlink_is_not_opened_through_it(sample_export, tmp_path, monkeypatch):
    from operations.management.commands import audit_export

    fifo, victim = tmp_path / "fifo", tmp_path / "victim.txt"
    os.mkfifo(fifo)
    victim.write_text("keep me")
    real_target = audit_export._target

    def check_then_swap(target: Path, **options: bool) -> object:
        checked = real_target(target, **options)
        target.unlink()
        target.symlink_to(victim)
        return checked

    monkeypatch.setattr(audit_export, "_target", check_then_swap)
    with pytest.raises(CommandError, match="is a symbolic link now; refusing to follow it"):
        call_command("audit_export", "-o", str(fifo), stderr=StringIO())
    assert victim.read_text() == "keep me"
