from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from operations import selectors
from operations.representation import operation_object


class Command(BaseCommand):
    help = "Print an operation as the API's Operation object (--json) or as a short summary."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("operation_id")
        parser.add_argument("--json", action="store_true", help="print the Operation object as JSON")

    def handle(self, *args: object, **options: object) -> None:
        operation = selectors.operation_get(operation_id=str(options["operation_id"]))
        if operation is None:
            raise CommandError(f"no operation {options['operation_id']}")
        obj = operation_object(operation, open_escalation=selectors.open_escalation(operation=operation))
        if options["json"]:
            self.stdout.write(json.dumps(obj, indent=2, sort_keys=True))
            return
        poll = obj["poll"]
        self.stdout.write(
            f"{obj['id']}  {obj['status']}  {obj['provider']} job {obj['provider_job_id']}\n"
            f"  requests {poll['count']}/{poll['max']}, transport failures "
            f"{poll['transport_failures']}/{poll['max_transport_failures']}, next poll {poll['next_poll_at'] or '-'}\n"
            f"  {obj['agent_hint']}"
        )
