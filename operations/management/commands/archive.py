"""`manage.py archive --before DATE [--to DIR]`: retention, verifiably (docs/DESIGN.md section 8).

Archives the audit entries older than DATE as a sealed, verified range (operations.audit.archive),
records it, and only then removes the archived entries through the guarded database function in
short chunks (also what an interrupted earlier run left); then removes finished operations (with
their status checks, cards and decisions) and django-q2's finished task rows older than
RETENTION_DAYS, in batches. Open operations and their cards are never removed. Every step commits
as it goes: running the command again after a crash carries on where it stopped.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.utils import timezone

from operations.audit import archive, checkpoints, tree
from operations.audit import verify as av
from operations.lifecycle import retention


class Command(BaseCommand):
    help = "Archive (and prune) audit entries older than DATE; remove finished work older than RETENTION_DAYS."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--before", required=True, metavar="DATE", help="RFC 3339 time, e.g. 2026-09-01T00:00:00Z")
        parser.add_argument("--to", metavar="DIR", help="write the archive to DIR (default: the configured storage)")

    def handle(self, *args: object, **options: object) -> None:
        try:
            before = av.parse_cli_time(str(options["before"]))
        except ValueError as exc:
            raise CommandError(f"--before: {exc}") from None
        storage = archive.archive_storage(str(options["to"])) if options["to"] else None
        try:
            done = archive.archive_before(before=before, storage=storage)
        except (archive.ArchiveError, checkpoints.CheckpointError, tree.TreeError, DatabaseError) as exc:
            raise CommandError(f"NOTHING ARCHIVED: {exc}", returncode=1) from None
        if done is None:
            self.stdout.write("no audit entries old enough to archive")
        else:
            self.stdout.write(
                f"archived audit entries {done.first_seq}-{done.last_seq} to {done.name} "
                f"({done.size_bytes} bytes, sha256 {done.sha256})"
            )
        try:
            pruned = archive.prune_archived()
        except DatabaseError as exc:
            if "permission denied" in str(exc):
                # The guarded function is the owner's alone (docs/deployment.md): say which role to use.
                raise CommandError(
                    "PRUNE STOPPED: this database role may not remove audit entries. The archive is written and "
                    "recorded; run the same command with DATABASE_URL naming the database owner (the role "
                    "`manage.py migrate` runs as) to remove them.",
                    returncode=1,
                ) from None
            raise CommandError(f"PRUNE STOPPED (run the command again to finish it): {exc}", returncode=1) from None
        if pruned or done is not None:
            self.stdout.write(f"removed {pruned} archived audit entries from the database")
        cutoff = timezone.now() - timedelta(days=settings.RETENTION_DAYS)
        removed = retention.remove_finished(before=cutoff)
        self.stdout.write(
            f"removed {removed.operations} finished operations ({removed.rows} rows with their checks and cards) "
            f"and {removed.tasks} finished task rows older than {settings.RETENTION_DAYS} days"
        )
