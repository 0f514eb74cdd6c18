from __future__ import annotations

import getpass
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from operations.agents.registration import operation_register
from operations.agents.registration_checks import RegistrationError
from operations.selectors import live_operation_for_job


class Command(BaseCommand):
    help = "Register an operation to watch, as an operator, and print its id."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--provider", required=True, help="provider profile slug")
        parser.add_argument("--job-id", required=True, help="the provider's job id")
        parser.add_argument("--deadline-s", type=int, help="seconds from now (default: the profile's)")
        parser.add_argument("--max-requests", type=int, help="status request budget (default: the profile's)")
        parser.add_argument("--purpose", default="", help="why this job matters (shown to humans)")
        parser.add_argument(
            "--again", action="store_true", help="watch it even though another operation already watches this job"
        )

    def handle(self, *args: object, **options: object) -> None:
        deadline_s = options["deadline_s"]
        if isinstance(deadline_s, int) and deadline_s > settings.OPERATION_MAX_DEADLINE_S:
            raise CommandError(f"--deadline-s must be at most {settings.OPERATION_MAX_DEADLINE_S} s, not {deadline_s}")
        existing = live_operation_for_job(provider_slug=str(options["provider"]), job_id=str(options["job_id"]))
        if existing is not None and not options["again"]:
            # Two watches of one job would each spend their own budget on the same provider job.
            raise CommandError(
                f"{existing.pk} already watches this job ({existing.status}); "
                f"see manage.py operation_status {existing.pk}, or pass --again to watch it twice"
            )
        try:
            operation = operation_register(
                provider_slug=str(options["provider"]),
                provider_job_id=str(options["job_id"]),
                registered_by=f"operator:{getpass.getuser()}",
                purpose=str(options["purpose"]),
                deadline_at=timezone.now() + timedelta(seconds=deadline_s) if isinstance(deadline_s, int) else None,
                max_status_requests=options["max_requests"],
            )
        except RegistrationError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(operation.pk)
