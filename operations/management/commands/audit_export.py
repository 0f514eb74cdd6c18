"""`manage.py audit_export [--operation ID] [--since T] [--until T] [--consistency-from SIZE] [--format 2|3] [-o FILE]
[--follow-symlinks] [--allow-foreign-pipe]`.

An audit export (JSONL: a full one in format 2; an operation or time-window one in format 3, with
batch inclusion proofs, or with `--format 2` one inclusion proof per entry for a reader whose
verifier predates format 3). Signs a checkpoint first (this process needs the signing key,
else the export closes at the signer's newest checkpoint), then streams the header, the entries
with their proofs and the checkpoints in
bounded memory, to stdout or to FILE (a regular file is written beside it, under a fresh private
name, and renamed when complete, so a failed export never leaves a plausible-looking partial file;
the file keeps the mode of the one it replaces if you own that one, else it is 0600; a FILE that
is a symbolic link is refused - one planted in a shared directory would send the export wherever
it points - unless --follow-symlinks, which writes the link's target and keeps the link, and so is
a directory on the way that is a link another user owns, or that every user may write without the
sticky bit; a pipe or device is written through, opened with O_NOFOLLOW, and only if you or root
own it unless --allow-foreign-pipe; a FILE named *.gz is written compressed with gzip: the rules
are operations/audit/export_file.py's).
Checkpoint rows that do not verify are left out and named on stderr. Check it with
`pollerdash-audit-verify FILE --keys KEYS` (`manage.py audit_keys --all` prints the key lines).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import sys
from pathlib import Path
from typing import BinaryIO

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from operations.audit import checkpoints, export_file, genuine
from operations.audit import verify as av
from operations.audit.export import VERSIONS, ExportError, stream_export


def _time(text: str) -> object:
    try:
        return av.parse_cli_time(text)
    except ValueError as exc:
        raise CommandError(f"not an RFC 3339 time: {exc}") from None


class Command(BaseCommand):
    help = "Export the audit chain (or one operation's part of it, or a time window) as verifiable JSONL."
    # An incident reviewer's export needs none of the start-up checks (URL patterns, admin, sign-in
    # settings; `manage.py check` runs them): they import every view and module of the site and
    # were about half the command's wall time (bench/audit.py, big section).
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--operation", metavar="ID", help="only the segments around this operation's entries")
        parser.add_argument("--since", metavar="T", help="entries at or after T (RFC 3339)")
        parser.add_argument("--until", metavar="T", help="entries before T (RFC 3339)")
        parser.add_argument(
            "--consistency-from",
            metavar="SIZE",
            type=int,
            action="append",
            default=[],
            help="add a consistency proof from the tree of SIZE entries (for a reader who pinned that checkpoint)",
        )
        parser.add_argument(
            "--format",
            type=int,
            choices=VERSIONS,
            default=3,
            help="3 (default): batch inclusion proofs; 2: one inclusion proof per entry, for older verifiers"
            " (a full export is format 2 either way)",
        )
        parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
        parser.add_argument(
            "--follow-symlinks",
            action="store_true",
            help="follow a symbolic link at FILE (refused by default, whoever owns it), or one another user owns"
            " on the way to it (links you or root own on the way are followed anyway)",
        )
        parser.add_argument(
            "--allow-foreign-pipe",
            action="store_true",
            help="write into a pipe or device at FILE that another user owns (refused by default: whoever reads it"
            " receives the whole export)",
        )

    def handle(self, *args: object, **options: object) -> None:
        since = _time(str(options["since"])) if options["since"] else None
        until = _time(str(options["until"])) if options["until"] else None
        output = options["output"]
        # Checked before anything is signed: a typo in the path must not cost a checkpoint.
        target = (
            _target(
                Path(str(output)), follow=bool(options["follow_symlinks"]), foreign=bool(options["allow_foreign_pipe"])
            )
            if output
            else None
        )
        skipped: list[genuine.Skipped] = []
        try:
            lines = stream_export(
                # Typing: argparse's values arrive as object; each was converted by its type= (below: dates by _when).
                operation_id=options["operation"],  # type: ignore[arg-type]
                since=since,  # type: ignore[arg-type]
                until=until,  # type: ignore[arg-type]
                consistency_from=options["consistency_from"],  # type: ignore[arg-type]
                version=options["format"],  # type: ignore[arg-type]
                skipped=skipped,
            )
            count = self._write(lines, target)
        except (ExportError, checkpoints.CheckpointError, DatabaseError, export_file.ExportFileError) as exc:
            raise CommandError(str(exc)) from None
        except BrokenPipeError:
            # The reader stopped early (`| head`): say so once, without a traceback.
            sys.stdout = open(os.devnull, "w")  # Python flushes stdout again at exit
            raise CommandError("the reader closed the output early; the export is incomplete") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CommandError(f"{output} is a symbolic link now; refusing to follow it") from None
            raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
        finally:
            if target is not None:
                target.close()
        if skipped:
            # The export holds only checkpoints the signer made; say what it left out, and where.
            self.stderr.write(
                f"skipped {len(skipped)} checkpoint rows that do not verify (forged?): "
                + "; ".join(str(row) for row in skipped[:5])
            )
        where = output or "standard output"
        self.stderr.write(
            f"exported {count} lines to {where}; verify: pollerdash-audit-verify FILE --keys KEYS "
            "(KEYS from manage.py audit_keys --all)"
        )

    def _write(self, lines: object, target: export_file.Target | None) -> int:
        def stream(raw: BinaryIO) -> int:
            count = 0
            with _maybe_gzip(raw, target) as out:
                for line in lines:  # type: ignore[attr-defined]  # an iterator of bytes lines
                    out.write(line)
                    count += 1
            raw.flush()
            return count

        if target is None:
            return stream(sys.stdout.buffer)
        if target.atomic:
            return export_file.write_atomic(target, stream)
        with export_file.open_through(target) as raw:
            return stream(raw)


def _maybe_gzip(raw: BinaryIO, target: export_file.Target | None) -> contextlib.AbstractContextManager[BinaryIO]:
    """-o FILE.gz writes the export compressed (the verifier reads it as it is): an operation's
    entries are repetitive JSON and shrink several times; proof hashes do not."""
    if target is not None and target.compressed:
        # mtime 0: the same export compresses to the same bytes.
        return gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0)  # type: ignore[return-value]
    return contextlib.nullcontext(raw)


def _target(path: Path, *, follow: bool, foreign: bool) -> export_file.Target:
    """Where -o writes (operations.audit.export_file), checked before anything is signed."""
    try:
        return export_file.target(path, follow_symlinks=follow, allow_foreign=foreign)
    except export_file.ExportFileError as exc:
        raise CommandError(str(exc)) from None
