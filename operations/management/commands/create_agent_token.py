from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from operations.agents.identities import agent_token_issue


class Command(BaseCommand):
    help = (
        "Create (or reuse) the agent NAME and print a new API token for it, once. "
        "A new agent's webhook signing secret is printed once too."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="agent name, e.g. report-bot")

    def handle(self, *args: object, **options: object) -> None:
        try:
            issued = agent_token_issue(name=str(options["name"]))
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        verb = "Created agent" if issued.created_agent else "Agent"
        self.stderr.write(f"{verb} {issued.agent.name}: new token below (shown once; only its hash is stored).")
        self.stdout.write(f"token: {issued.token}")
        if issued.webhook_secret is not None:
            self.stdout.write(f"webhook_secret: {issued.webhook_secret}")
            self.stderr.write("Verify completion callbacks with the webhook secret (Standard Webhooks, shown once).")
