from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from demo import seed as demo


class Command(BaseCommand):
    help = "Seed the demo: logins, provider profiles for the local fake provider, and live scenarios."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--provider-url", default=demo.FAKE_DEFAULT_URL, help="where the fake provider listens")
        parser.add_argument("--no-scenarios", action="store_true", help="only logins and profiles")

    def handle(self, *args: object, **options: object) -> None:
        roles = demo.ensure_roles()
        for line in demo.load_demo_profiles(provider_url=str(options["provider_url"])):
            self.stdout.write(f"profile {line}")
        logins = {
            "responder": demo.ensure_user(username="responder", group=roles["responder"]),
            "responder2": demo.ensure_user(username="responder2", group=roles["responder"]),
            "viewer": demo.ensure_user(username="viewer", group=roles["viewer"]),
            "admin": demo.ensure_user(username="admin", group=roles["responder"], superuser=True),
        }
        token = demo.ensure_demo_agent()
        if not options["no_scenarios"]:
            operations = demo.seed_scenarios()
            self.stdout.write(f"seeded {len(operations)} demo operations against {options['provider_url']}")
        self.stdout.write("")
        self.stdout.write(f"Dashboard: {settings.SITE_URL}/")
        for username, password in logins.items():
            if password:
                self.stdout.write(f"  login {username:<11} password {password}   (shown once)")
            else:
                self.stdout.write(f"  login {username:<11} (exists; `manage.py changepassword {username}` to reset)")
        if token:
            self.stdout.write(f"  agent API token for demo-agent: {token}   (shown once)")
            self.stdout.write(
                f"    curl -s -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' "
                f'-d \'{{"provider": "fake-export", "provider_job_id": "slow_success__polls=3__id=try1"}}\' '
                f"{settings.SITE_URL}/api/v1/operations"
            )
