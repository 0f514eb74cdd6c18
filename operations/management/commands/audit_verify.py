"""`manage.py audit_verify [--keys FILE]`: verify the whole audit chain in the database.

Streams every entry (its stored bytes re-hashed, its links, its copied columns) and every stored
checkpoint (signature, place, head), then the head row. Prints one JSON line like
pollerdash-audit-verify; exit 0 valid, 1 tampered, 2 no verifier key or database trouble.
Entries after the newest checkpoint are expected (the signer signs each minute) and counted as
`unsigned_tail`.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from operations.audit import checkpoints
from operations.audit import verify as av


class Command(BaseCommand):
    help = "Verify the audit chain and its checkpoints in the database (exit 0 valid, 1 tampered, 2 error)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--keys",
            metavar="FILE",
            help="trusted verifier keys (default: the signing key and AUDIT_VERIFIER_KEYS_FILE)",
        )

    def handle(self, *args: object, keys: str | None = None, **options: object) -> None:
        try:
            trusted = av.load_keys(keys) if keys else checkpoints.trusted_keys()
        except (av.UsageError, checkpoints.CheckpointError) as exc:
            raise CommandError(str(exc), returncode=2) from None
        if not trusted:
            raise CommandError(
                "no verifier key: set AUDIT_SIGNING_KEY_FILE or pass --keys FILE (see manage.py audit_keys)",
                returncode=2,
            )
        try:
            result = checkpoints.verify_chain(keys=trusted)
        except av.VerifyFailure as exc:
            failure = exc.as_dict()
            failure.pop("line")
            self.stdout.write(json.dumps(failure, separators=(",", ":")))
            raise CommandError(
                f"audit chain verification failed at seq {exc.seq}: {exc.reason}", returncode=1
            ) from None
        except DatabaseError as exc:
            raise CommandError(f"database error: {exc}", returncode=2) from None
        self.stdout.write(json.dumps(result, separators=(",", ":")))
