"""`manage.py mcp_server` no longer serves MCP: it needed DATABASE_URL and SECRET_KEY on the agent's
host, and those two values are enough to bypass every per-agent rule and to run code as the worker.
It stays only to say where MCP went (docs/DESIGN.md section 9, "MCP")."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

MOVED = (
    "mcp_server was removed: an agent's host must hold its token and nothing else. Point the MCP client at "
    "<SITE_URL>/mcp with the header 'Authorization: Bearer pdt_…', or run the stdio bridge "
    "pollerdash-mcp with POLLERDASH_URL and POLLERDASH_TOKEN set (README, MCP)."
)


class Command(BaseCommand):
    help = "Removed. MCP is served by the web process at /mcp; stdio hosts run pollerdash-mcp."

    def add_arguments(self, parser: object) -> None:
        # Old configurations passed --agent; they get the message below, not an argument error.
        parser.add_argument("--agent", help="ignored")  # type: ignore[attr-defined]

    def handle(self, *args: object, **options: object) -> None:
        raise CommandError(MOVED)
