"""``manage.py demo_receivers``: the demo's PagerDuty and Slack (demo/receivers.py) and Microsoft Teams
(demo/faketeams.py) until SIGTERM/SIGINT."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from demo.faketeams import FakeTeams
from demo.receivers import DemoPagerDuty, DemoSlack


class Command(BaseCommand):
    help = "Run the demo's PagerDuty, Slack and Teams receivers, each with a page showing what arrived."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pagerduty-port", type=int, required=True)
        parser.add_argument("--slack-port", type=int, required=True)
        parser.add_argument("--teams-port", type=int, required=True)
        parser.add_argument(
            "--routing-key-env", default="ONCALL_PD_DEMO", help="the variable holding the accepted routing key"
        )

    def handle(
        self, *args: Any, pagerduty_port: int, slack_port: int, teams_port: int, routing_key_env: str, **options: Any
    ) -> None:
        routing_key = os.environ.get(routing_key_env, "")
        teams_signature = os.environ.get("TEAMS_DEMO_SIGNATURE", "")
        if not (routing_key and teams_signature and settings.SLACK_SIGNING_SECRET and settings.SLACK_BOT_TOKEN):
            raise CommandError(
                f"{routing_key_env}, TEAMS_DEMO_SIGNATURE, SLACK_SIGNING_SECRET and SLACK_BOT_TOKEN must be set "
                "(make demo writes them)"
            )
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        pagerduty = DemoPagerDuty(
            accepted_keys=[routing_key],
            webhook_url=f"{settings.SITE_URL}/pagerduty/webhooks",
            # It signs with the first of the secrets pollerdash accepts.
            webhook_secret=next(iter(settings.PAGERDUTY_WEBHOOK_SECRETS), ""),
        ).start(port=pagerduty_port)
        slack = DemoSlack(
            bot_token=settings.SLACK_BOT_TOKEN,
            signing_secret=settings.SLACK_SIGNING_SECRET,
            interactions_url=f"{settings.SITE_URL}/slack/interactions",
            team_id=settings.SLACK_TEAM_ID,
            app_id=settings.SLACK_APP_ID,
        ).start(port=slack_port)
        teams = FakeTeams(signature=teams_signature).start(port=teams_port)
        try:
            self.stdout.write(
                f"PagerDuty (demo) on {pagerduty.base_url}/ · Slack (demo) on {slack.base_url}/ · "
                f"Microsoft Teams (demo) on {teams.base_url}/"
            )
            self.stdout.flush()
            while not stop.wait(0.5):
                pass
        finally:
            pagerduty.stop()
            slack.stop()
            teams.stop()
