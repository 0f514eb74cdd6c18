"""``manage.py demo``: logins, profiles, the escalation policy and live scenarios for the local demo.

Every step may run again: profiles are re-pointed at the provider's current address, the policy
is replaced by name, logins get new passwords (printed), the agent's token is reused while it
works, and the scenarios are seeded once per database (`make demo-reset` starts from an empty
one). With ``--serve`` (what `make demo` runs, as one of its processes) it first waits for the web
process and the fake provider to answer, so no poll is due before a dispatcher runs and the URL
it prints answers; it then prints the logins once more when every scenario has reached the state
it shows, and stays up until Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from demo import seed as demo

TOKEN_FILE_NAME = "demo-agent-token"
SETTLE_TIMEOUT_S = 300
SEED_SPACING_S = 0.5
ROLES = {
    "responder": "decides",
    "responder2": "a second responder (accepting output needs two)",
    "viewer": "reads only",
    "admin": "decides, and runs the admin at /admin/",
}


class Command(BaseCommand):
    help = "Seed the demo: logins, provider profiles for the local fake provider, its policy, and live scenarios."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--provider-url", default=demo.FAKE_DEFAULT_URL, help="where the fake provider listens")
        parser.add_argument("--no-scenarios", action="store_true", help="only logins, profiles and the policy")
        parser.add_argument(
            "--profiles-only",
            action="store_true",
            help="only re-point the demo profiles at --provider-url (`make demo` runs it before any process "
            "starts, so a run on other ports never starts with profiles its credential may not reach)",
        )
        parser.add_argument(
            "--serve",
            action="store_true",
            help="wait for the web and the provider first, print the logins again once the inbox is full, "
            "then stay up until SIGTERM/SIGINT (a process of `make demo`)",
        )

    def handle(self, *args: Any, provider_url: str, no_scenarios: bool, serve: bool, **options: Any) -> None:
        if options.get("profiles_only"):
            demo.load_demo_profiles(provider_url=provider_url)
            return
        stop = threading.Event()
        if serve:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
            for url in (f"{settings.SITE_URL}/accounts/login/", provider_url):
                if not _wait_until_it_answers(url, stop=stop):
                    if stop.is_set():
                        return
                    raise CommandError(f"{url} did not answer within 120 s; see the other processes' lines above")
        started = time.monotonic()
        seed = not no_scenarios and not demo.scenarios_seeded()
        welcome = self._set_up(provider_url=provider_url, no_scenarios=no_scenarios, seed=seed)
        self.stdout.write(
            f"\n{_took()}pollerdash is up: open {settings.SITE_URL}/   (Ctrl-C stops everything)\n{welcome}"
        )
        self.stdout.flush()
        if seed:
            # Served: one at a time, once the URL is printed (seed.seed_scenarios says why).
            demo.seed_scenarios(pause=(lambda: stop.wait(SEED_SPACING_S)) if serve else None)
        if not serve:
            return
        if not no_scenarios and demo.scenarios_waiting():
            while demo.scenarios_waiting() and time.monotonic() - started < SETTLE_TIMEOUT_S:
                if stop.wait(2):
                    return
            waiting = demo.scenarios_waiting()
            state = (
                f"every demo scenario has reached its state: {demo.open_cards()} open cards"
                if not waiting
                else f"{len(waiting)} scenario(s) still on their way: {', '.join(s.purpose for s in waiting)}"
            )
            self.stdout.write(f"\n{_took()}{state}.\nOnce more: open {settings.SITE_URL}/\n{welcome}")
            self.stdout.flush()
        stop.wait()

    def _set_up(self, *, provider_url: str, no_scenarios: bool, seed: bool) -> str:
        roles = demo.ensure_roles()
        demo.load_demo_profiles(provider_url=provider_url)
        logins = {
            "responder": demo.ensure_user(username="responder", group=roles["responder"]),
            "responder2": demo.ensure_user(username="responder2", group=roles["responder"]),
            "viewer": demo.ensure_user(username="viewer", group=roles["viewer"]),
            "admin": demo.ensure_user(username="admin", group=roles["responder"], superuser=True),
        }
        policy = demo.ensure_demo_policy()  # after the logins: it names the responder
        token_file = Path(settings.VAR_DIR) / TOKEN_FILE_NAME
        token = demo.ensure_demo_token(path=token_file)
        if no_scenarios:
            data = "no scenarios (--no-scenarios)"
        elif not seed:
            data = "the demo operations of an earlier run, kept (`make demo-reset` starts again from an empty database)"
        else:
            data = f"{len(demo.SCENARIOS)} demo operations, registered now; cards arrive within about two minutes"
        site = settings.SITE_URL
        lines = [
            "  sign in as (passwords are new at every `make demo`):",
            *(f"    {name:<11} {password}   {ROLES[name]}" for name, password in logins.items()),
            f"  agent API token (demo-agent, also in {_shown(token_file)}): {token}",
            f"  API reference: {site}/api/v1/docs/",
            (
                f"  on-call messages: PagerDuty {_receiver('PAGERDUTY_EVENTS_URL')} · "
                f"Slack {_receiver('SLACK_API_URL')} · mail files in {_shown(Path(settings.EMAIL_FILE_PATH))}/"
                if policy
                else "  on-call messages: the demo's policy is not loaded (run `make demo` to have it)"
            ),
            f"  data: {data}",
        ]
        return "\n".join(lines) + "\n"


def _shown(path: Path) -> str:
    """A path as typed from the checkout (var/...), else in full."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _receiver(setting: str) -> str:
    """The page of the demo receiver a setting points at (its scheme, host and port)."""
    url = str(getattr(settings, setting))
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}/"


def _took() -> str:
    """How long since `make demo` was typed (the Makefile passes the time), as a prefix."""
    raw = os.environ.get("DEMO_STARTED_AT", "")
    if not raw.isdigit():
        return ""
    seconds = max(0, int(time.time()) - int(raw))
    return f"[{seconds // 60} min {seconds % 60:02d} s after `make demo`] "


def _wait_until_it_answers(url: str, *, stop: threading.Event, timeout_s: float = 120) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=2):  # the demo's own local URLs
                return True
        except urllib.error.HTTPError:
            return True  # it answered (the fake provider answers 404 at its root)
        except OSError:
            stop.wait(0.3)
    return False
