"""`audit_export -o` into a directory other users may write: they neither receive the export, nor
lend it their file's mode, nor redirect it through a link or a swapped directory.

Real files, pipes and links; "another user" is uid 65534 (nobody), given with os.chown, so these
tests run as root (as the review did).
"""

from __future__ import annotations

import os
import threading
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from operations.audit import verify as av
from operations.management.commands import audit_export
from operations.models import AuditCheckpoint

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root"),
]

NOBODY = 65534


def shared_directory(parent: Path, mode: int) -> Path:
    shared = parent / "shared"
    shared.mkdir()
    shared.chmod(mode)
    return shared


def export(*args: str) -> str:
    err = StringIO()
    call_command("audit_export", *args, stderr=err)
    return err.getvalue()


def test_a_file_another_user_planted_lends_the_export_no_mode(sample_export, tmp_path, keys_file):
    # The review's repro: nobody makes a 0666 export.jsonl in a shared directory; root's export used
    # to come out -rw-rw-rw- root. In a sticky directory (like /tmp) root may replace it: 0600.
    shared = shared_directory(tmp_path, 0o1777)
    planted = shared / "export.jsonl"
    planted.write_text("nobody's")
    planted.chmod(0o666)
    os.chown(planted, NOBODY, NOBODY)
    export("-o", str(planted))
    written = planted.stat()
    assert (written.st_uid, written.st_mode & 0o777) == (0, 0o600)
    assert av.run([str(planted), "--keys", str(keys_file)])[0] == 0
    # A file of your own still lends its mode (e.g. 0640 for an auditors' group).
    own = shared / "own.jsonl"
    own.write_text("mine")
    own.chmod(0o640)
    export("-o", str(own))
    assert own.stat().st_mode & 0o777 == 0o640


def test_a_directory_every_user_may_write_without_the_sticky_bit_is_refused(sample_export, tmp_path):
    shared = shared_directory(tmp_path, 0o777)
    planted = shared / "export.jsonl"
    planted.write_text("nobody's")
    os.chown(planted, NOBODY, NOBODY)
    signed = AuditCheckpoint.objects.count()
    with pytest.raises(CommandError, match=f"directory {shared} is writable by every user and has no sticky bit"):
        export("-o", str(planted))
    assert planted.read_text() == "nobody's" and [p.name for p in shared.iterdir()] == ["export.jsonl"]
    assert AuditCheckpoint.objects.count() == signed  # refused before anything is signed


def test_a_pipe_another_user_owns_receives_nothing_unless_asked(sample_export, tmp_path):
    fifo = tmp_path / "export.jsonl"
    os.mkfifo(fifo)
    os.chown(fifo, NOBODY, NOBODY)
    # The planter reads (non-blocking, so the old code's write would have landed here, not hung).
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(CommandError, match=r"is a pipe owned by uid 65534, not by you.*--allow-foreign-pipe"):
            export("-o", str(fifo))
        assert os.read(reader, 1 << 20) == b""
    finally:
        os.close(reader)
    # Asked for (a reviewer's own tool under another uid, say), it is written through.
    received: list[bytes] = []
    thread = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    thread.start()
    export("-o", str(fifo), "--allow-foreign-pipe")
    thread.join(timeout=30)
    assert received and received[0].startswith(b'{"header":')


def test_a_pipe_given_away_after_the_check_receives_nothing(sample_export, tmp_path, monkeypatch):
    # The check passes on the reviewer's own pipe; by the time it is opened another user owns it:
    # the owner is checked again on the open descriptor, before a byte is written.
    fifo = tmp_path / "export.jsonl"
    os.mkfifo(fifo)
    real_target = audit_export._target

    def check_then_give_away(path: Path, **options: bool) -> object:
        checked = real_target(path, **options)
        os.chown(fifo, NOBODY, NOBODY)
        return checked

    monkeypatch.setattr(audit_export, "_target", check_then_give_away)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(CommandError, match="is a pipe owned by uid 65534"):
            export("-o", str(fifo))
        assert os.read(reader, 1 << 20) == b""
    finally:
        os.close(reader)


def test_a_directory_link_another_user_planted_is_not_followed(sample_export, tmp_path, keys_file):
    shared = shared_directory(tmp_path, 0o1777)
    elsewhere = tmp_path / "reviewers-own"
    elsewhere.mkdir()
    planted = shared / "exports"
    planted.symlink_to(elsewhere)
    os.lchown(planted, NOBODY, NOBODY)
    path = planted / "incident.jsonl"
    with pytest.raises(CommandError, match=f"{planted} is a symbolic link owned by uid 65534.*--follow-symlinks"):
        export("-o", str(path))
    assert not list(elsewhere.iterdir())
    # Asked for, it is followed; and a link you (or root) made is followed without asking.
    export("-o", str(path), "--follow-symlinks")
    assert av.run([str(elsewhere / "incident.jsonl"), "--keys", str(keys_file)])[0] == 0
    mine = tmp_path / "mine"
    mine.symlink_to(elsewhere)
    export("-o", str(mine / "second.jsonl"))
    assert (elsewhere / "second.jsonl").is_file()


def test_a_directory_swapped_for_a_link_after_the_check_redirects_nothing(
    sample_export, tmp_path, keys_file, monkeypatch
):
    shared = shared_directory(tmp_path, 0o1777)
    checked_dir = shared / "incident"
    checked_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real_target = audit_export._target

    def check_then_swap(path: Path, **options: bool) -> object:
        checked = real_target(path, **options)
        checked_dir.rename(shared / "moved")
        checked_dir.symlink_to(elsewhere)
        return checked

    monkeypatch.setattr(audit_export, "_target", check_then_swap)
    export("-o", str(checked_dir / "export.jsonl"))
    assert not list(elsewhere.iterdir())
    assert av.run([str(shared / "moved" / "export.jsonl"), "--keys", str(keys_file)])[0] == 0
