"""`manage.py loadpolicies FILE.toml [--check]`: create or replace escalation policies by name.

The whole file is validated first (operations.notify.store, the same rules as the admin form); an
invalid file writes nothing and every problem is listed. `--check` validates and writes nothing.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from operations.notify.store import PoliciesInvalid, load_policies_file, policies_save

# The audit chain names this command as the author of the policy changes it writes.
LOADPOLICIES_ACTOR = {"kind": "operator", "id": "loadpolicies"}


class Command(BaseCommand):
    help = (
        "Create or replace escalation policies from a TOML file of [[policy]] tables (an invalid file writes nothing)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="TOML file of [[policy]] tables")
        parser.add_argument("--check", action="store_true", help="validate only; write nothing")

    def handle(self, *args: object, **options: object) -> None:
        path = options["file"]
        assert isinstance(path, Path)
        try:
            policies = load_policies_file(path=path)
        except PoliciesInvalid as exc:
            listing = "\n".join(f"  - {problem}" for problem in exc.problems)
            raise CommandError(f"{path}: {len(exc.problems)} problem(s), nothing written:\n{listing}") from exc
        if options["check"]:
            self.stdout.write(f"{path}: {len(policies)} valid polic{'y' if len(policies) == 1 else 'ies'}")
            return
        for result in policies_save(policies=policies, actor=LOADPOLICIES_ACTOR):
            self.stdout.write(f"{result.name}: {result.change}")
