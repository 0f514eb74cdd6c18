from __future__ import annotations

import logging
import os
import sys

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from operations.api.mcp import Identity, build_server

TOKEN_ENV = "POLLERDASH_TOKEN"


class Command(BaseCommand):
    help = (
        "Serve the pollerdash MCP tools over stdio, acting as the agent whose token is in "
        f"${TOKEN_ENV} (or, for a local operator, --agent NAME)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", help=f"act as this agent instead of the owner of ${TOKEN_ENV}")

    def handle(self, *args: object, **options: object) -> None:
        try:
            signing_key = settings.SECRET_KEY
        except ImproperlyConfigured:  # Django's answer to reading an empty SECRET_KEY
            signing_key = ""
        if not signing_key:
            # List cursors are signed: without a key list_open_jobs would fail on its second page.
            raise CommandError("set SECRET_KEY (the same value as the web processes) before starting the MCP server")
        token = os.environ.get(TOKEN_ENV, "").strip() or None
        name = options.get("agent")
        if token is None and not name:
            raise CommandError(f"set {TOKEN_ENV} to an agent token (manage.py create_agent_token NAME) or pass --agent")
        identity = Identity(token=token) if token is not None and not name else Identity(agent_name=str(name))
        try:
            identity.agent()
        except Exception as exc:  # noqa: BLE001 - say why, on stderr, and stop
            raise CommandError(str(exc)) from exc
        _keep_stdout_for_the_protocol()
        build_server(identity=identity).run("stdio")


def _keep_stdout_for_the_protocol() -> None:
    """stdout carries JSON-RPC only: every log handler writing there moves to stderr."""
    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in logging.root.manager.loggerDict)]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stdout, sys.__stdout__):
                handler.setStream(sys.stderr)
