"""``manage.py fakeprovider``: run the fake job provider in the foreground (demo, manual testing)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from demo.fakeprovider import DEFAULT_HOST, DEFAULT_PORT, serve


class Command(BaseCommand):
    help = "Run the fake job provider until SIGTERM/SIGINT (see demo/fakeprovider.py for scenarios)."
    # It touches neither the database nor any model, so don't make it wait for system checks.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=DEFAULT_HOST)
        parser.add_argument("--port", type=int, default=DEFAULT_PORT)

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        serve(host, port, stream=self.stdout)
