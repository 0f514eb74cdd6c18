from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from operations.profiles import Outcome, ProfilesInvalid, load_profiles_file, profiles_apply

# The audit chain names this command as the author of the profile changes it writes.
LOADPROFILES_ACTOR = {"kind": "operator", "id": "loadprofiles"}


class Command(BaseCommand):
    help = "Create or update provider profiles from a TOML file (idempotent by slug; an invalid file writes nothing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="TOML file of [[provider]] tables")

    def handle(self, *args: object, **options: object) -> None:
        path = options["file"]
        assert isinstance(path, Path)
        try:
            specs = load_profiles_file(path=path)
            results = profiles_apply(specs=specs, actor=LOADPROFILES_ACTOR)
        except ProfilesInvalid as exc:
            listing = "\n".join(f"  - {problem}" for problem in exc.problems)
            raise CommandError(f"{path}: {len(exc.problems)} problem(s), nothing written:\n{listing}") from exc
        for result in results:
            detail = f" ({', '.join(result.changed_fields)})" if result.outcome == Outcome.UPDATED else ""
            self.stdout.write(f"{result.slug}: {result.outcome}{detail}")
