"""`manage.py archive --before DATE [--to DIR]`: retention, verifiably (docs/DESIGN.md section 8).

Archives the audit entries older than DATE as a sealed, verified range (operations.audit.archive),
records it (only the database owner may), waits for a checkpoint to sign that record (signing it
where this host holds the key, else up to --wait-for-signer seconds for the signer), reads the
archive back and verifies it, and only then removes the archived entries through the guarded
database function in short chunks (also what an interrupted earlier run left); then removes finished operations (with
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

from operations.audit import archive, checkpoints, ledger, tree
from operations.audit import verify as av
from operations.lifecycle import retention


class Command(BaseCommand):
    help = "Archive (and prune) audit entries older than DATE; remove finished work older than RETENTION_DAYS."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--before", required=True, metavar="DATE", help="RFC 3339 time, e.g. 2026-09-01T00:00:00Z")
        parser.add_argument("--to", metavar="DIR", help="write the archive to DIR (default: the configured storage)")
        parser.add_argument(
            "--wait-for-signer",
            metavar="SECONDS",
            type=float,
            default=None,
            help="on a host without the signing key, how long to wait for the signer to sign the archive's "
            "audit.archived entry before removing entries (default: 3 checkpoint intervals; 0: do not wait)",
        )

    def handle(self, *args: object, **options: object) -> None:
        try:
            before = av.parse_cli_time(str(options["before"]))
        except ValueError as exc:
            raise CommandError(f"--before: {exc}") from None
        wait_s = options["wait_for_signer"]
        if wait_s is None:
            wait_s = 3 * settings.AUDIT_CHECKPOINT_INTERVAL_S
        # Typing: argparse's type=float or the setting: a number.
        if not 0 <= float(wait_s) <= 3600:  # type: ignore[arg-type]
            raise CommandError("--wait-for-signer: a number of seconds from 0 to 3600")
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
        found = ledger.read(settings.AUDIT_LOG_NAME)
        if found.problems:
            # Nothing depends on such a row (it vouches for nothing), but it is tampering: say so.
            self.stderr.write(f"WARNING: the archive ledger was tampered with: {found.report()}")
        try:
            # Typing: argparse's type=float or the setting: a number.
            archive.await_records(wait_s=float(wait_s))  # type: ignore[arg-type]
            pruned = archive.prune_archived(storage=storage)
        except (archive.ArchiveError, checkpoints.CheckpointError, tree.TreeError) as exc:
            raise CommandError(f"PRUNE STOPPED, nothing more removed: {exc}", returncode=1) from None
        except DatabaseError as exc:
            raise CommandError(f"PRUNE STOPPED (run the command again to finish it): {exc}", returncode=1) from None
        if pruned.removed or done is not None:
            self.stdout.write(f"removed {pruned.removed} archived audit entries from the database")
        if pruned.waiting:
            self.stdout.write(pruned.waiting)
        cutoff = timezone.now() - timedelta(days=settings.RETENTION_DAYS)
        removed = retention.remove_finished(before=cutoff)
        self.stdout.write(
            f"removed {removed.operations} finished operations ({removed.rows} rows with their checks and cards) "
            f"and {removed.tasks} finished task rows older than {settings.RETENTION_DAYS} days"
        )
