"""`manage.py audit_keys [--generate FILE] [--all]`: the checkpoint signing key's verifier key line.

Prints `name+keyid+base64(0x01||pubkey)`, the line a `--keys` file of pollerdash-audit-verify
holds. `--generate FILE` writes a new Ed25519 private key (PKCS#8 PEM, mode 0600, never over an
existing file) and prints its verifier key line. The private key itself is never printed.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from operations.audit import checkpoints


class Command(BaseCommand):
    help = "Print the verifier key line of the audit signing key, or --generate a new key file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--generate", metavar="FILE", help="write a new Ed25519 signing key to FILE (mode 0600)")
        parser.add_argument(
            "--all", action="store_true", help="also print the earlier keys of AUDIT_VERIFIER_KEYS_FILE (a --keys file)"
        )

    def handle(self, *args: object, generate: str | None = None, all: bool = False, **options: object) -> None:
        if generate is not None and not generate.strip():
            raise CommandError("--generate needs a file name")
        try:
            if generate:
                key = checkpoints.generate_key_file(Path(generate))
                self.stdout.write(key.line)
                return
            keys = checkpoints.trusted_keys(checkpoints.load_signing_key())
        except checkpoints.CheckpointError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(f"cannot write {generate}: {exc.strerror or exc}") from None
        for key in keys if all else keys[:1]:
            self.stdout.write(key.line)
