"""`manage.py audit_export [--operation ID] [--since T] [--until T] [-o FILE]`: an audit export (JSONL).

Signs a checkpoint first (this process needs the signing key, else the export closes at the
signer's newest checkpoint), then streams the header, the chain segments and the checkpoints in
bounded memory, to stdout or to FILE (written beside it and renamed when complete, so a failed
export never leaves a plausible-looking partial file). Check it with
`pollerdash-audit-verify FILE --keys KEYS` (`manage.py audit_keys` prints the key line).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from operations import audit_verify as av
from operations import checkpoints
from operations.audit_export import ExportError, stream_export


def _time(text: str) -> object:
    try:
        return av.parse_cli_time(text)
    except ValueError as exc:
        raise CommandError(f"not an RFC 3339 time: {exc}") from None


class Command(BaseCommand):
    help = "Export the audit chain (or one operation's part of it, or a time window) as verifiable JSONL."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--operation", metavar="ID", help="only the segments around this operation's entries")
        parser.add_argument("--since", metavar="T", help="entries at or after T (RFC 3339)")
        parser.add_argument("--until", metavar="T", help="entries before T (RFC 3339)")
        parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")

    def handle(self, *args: object, **options: object) -> None:
        since = _time(str(options["since"])) if options["since"] else None
        until = _time(str(options["until"])) if options["until"] else None
        try:
            lines = stream_export(operation_id=options["operation"], since=since, until=until)  # type: ignore[arg-type]
            output = options["output"]
            count = self._write(lines, Path(str(output)) if output else None)
        except (ExportError, checkpoints.CheckpointError, DatabaseError) as exc:
            raise CommandError(str(exc)) from None
        where = options["output"] or "standard output"
        self.stderr.write(f"exported {count} lines to {where}; verify: pollerdash-audit-verify FILE --keys KEYS")

    def _write(self, lines: object, path: Path | None) -> int:
        count = 0
        if path is None:
            out = sys.stdout.buffer
            for line in lines:  # type: ignore[attr-defined]
                out.write(line)
                count += 1
            out.flush()
            return count
        partial = path.with_name(f".{path.name}.partial")
        try:
            with open(partial, "wb") as handle:
                for line in lines:  # type: ignore[attr-defined]
                    handle.write(line)
                    count += 1
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        return count
