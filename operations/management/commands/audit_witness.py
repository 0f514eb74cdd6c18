"""`manage.py audit_witness --key FILE --name NAME --state FILE`: cosign the newest audit checkpoint.

`--generate-key FILE --name NAME` writes a new witness key (0600) and prints its verifier key line,
which reviewers pass to `pollerdash-audit-verify --witness-key`. Meant to run on another host, as
another person, every few minutes (cron): it cosigns only a checkpoint consistent with the last one
it cosigned (its state file), and exits 1 saying why when it refuses (operations.audit.witness).
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from operations.audit import checkpoints, tree, witness


class Command(BaseCommand):
    help = "Cosign the newest audit checkpoint as a witness, after checking its consistency."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="the witness's name (printable ASCII, no spaces or '+')")
        parser.add_argument("--key", metavar="FILE", help="the witness's Ed25519 private key (PKCS#8 PEM)")
        parser.add_argument("--state", metavar="FILE", help="where the witness remembers what it cosigned")
        parser.add_argument("--generate-key", metavar="FILE", help="write a new witness key and print its key line")

    def handle(self, *args: object, **options: object) -> None:
        name = str(options["name"])
        try:
            if options["generate_key"]:
                self.stdout.write(witness.generate_key(Path(str(options["generate_key"])), name).line)
                return
            if not options["key"] or not options["state"]:
                raise CommandError("--key and --state are needed to cosign")
            key = checkpoints.load_signing_key(Path(str(options["key"])))
            done = witness.cosign_newest(key=key, name=name, state=Path(str(options["state"])))
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        except (witness.WitnessRefused, checkpoints.CheckpointError, tree.TreeError) as exc:
            raise CommandError(f"NOT COSIGNED: {exc}", returncode=1) from None
        self.stdout.write(f"cosigned checkpoint of size {done.size} as {name}")
