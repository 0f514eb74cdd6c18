"""var/demo.env, rewritten by every `make demo` from the command line, the file and the defaults.

The ports given on the command line win; a port not given keeps the value of the previous run (so
`make demo` after `make demo WEB_PORT=8101` stays on 8101); everything derived from the ports
(SITE_URL, the allowed hosts, the receivers' URLs) is written anew from them. The secrets the file
holds are generated once and kept, and lines a person added that the demo does not own are kept
as they are. No Django import: the Makefile runs this before anything is installed in the
database.

    python -m demo.envfile var/demo.env WEB_PORT=8101 PROVIDER_PORT=
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

PORTS = {
    "WEB_PORT": 8000,
    "PROVIDER_PORT": 8765,
    # Where a callback receiver you start for the demo listens: the only local port callbacks may reach.
    "CALLBACK_PORT": 8766,
    # The fake PagerDuty and Slack the demo's escalation policy notifies (demo/receivers.py).
    "PAGERDUTY_PORT": 8767,
    "SLACK_PORT": 8768,
    # The fake Microsoft Teams Workflows webhook (demo/faketeams.py).
    "TEAMS_PORT": 8769,
}
# Generated once per checkout, kept across runs: the fake provider's credential, the PagerDuty
# routing key the fake PagerDuty accepts, and the fake Slack app's signing secret and bot token.
SECRETS: dict[str, Callable[[], str]] = {
    "PROVIDER_FAKE_TOKEN": lambda: "demo-" + secrets.token_hex(8),
    "ONCALL_PD_DEMO": lambda: "demo" + secrets.token_hex(14),
    "SLACK_SIGNING_SECRET": lambda: secrets.token_hex(16),
    "SLACK_BOT_TOKEN": lambda: "xoxb-demo-" + secrets.token_hex(12),
    # The signature in the fake Teams workflow's URL (a Workflows URL's secret part).
    "TEAMS_DEMO_SIGNATURE": lambda: secrets.token_urlsafe(24),
    # The demo PagerDuty's webhook subscription secret: its "Acknowledge in PagerDuty" button signs with it.
    "PAGERDUTY_WEBHOOK_SECRETS": lambda: secrets.token_urlsafe(32),
}
# The fake Slack workspace and app the demo's Slack messages come from (demo/receivers.py).
SLACK_TEAM_ID = "TDEMO0001"
SLACK_APP_ID = "ADEMO0001"
# The demo PagerDuty's people (a v3 webhook names them by id only) and the demo account each one's
# email belongs to (PAGERDUTY_USER_EMAILS).
PAGERDUTY_PEOPLE = {"PDEMORESP1": "responder", "PDEMORESP2": "responder2", "PDEMOVIEW1": "viewer"}
EMAIL_DOMAIN = "example.invalid"
# Earlier versions of the file named the provider credential without the PROVIDER_ prefix.
RENAMED = {"FAKE_PROVIDER_TOKEN": "PROVIDER_FAKE_TOKEN"}


class BadPort(ValueError):
    pass


def parse(text: str) -> dict[str, str]:
    """NAME=value lines in order (the last of a repeated name wins); comments and blanks skipped."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name and not name.startswith("#"):
            values[RENAMED.get(name, name)] = value
    return values


def demo_env(
    *, previous: Mapping[str, str], given: Mapping[str, str], new_secret: Callable[[str], str]
) -> dict[str, str]:
    """The whole file: the demo's own names first, then what a person added, unchanged."""
    ports = {}
    for name, default in PORTS.items():
        raw = (given.get(name) or previous.get(name) or str(default)).strip()
        if not raw.isdigit() or not 1 <= int(raw) <= 65535:
            raise BadPort(f"{name}={raw!r} is not a port number (1-65535)")
        ports[name] = int(raw)
    if len(set(ports.values())) != len(ports):
        raise BadPort("the demo's ports must all differ: " + ", ".join(f"{k}={v}" for k, v in ports.items()))
    web, provider, callback, pagerduty, slack, teams = (ports[name] for name in PORTS)
    host = "127.0.0.1"
    own = {
        "DEBUG": "1",
        **{name: str(port) for name, port in ports.items()},
        "SITE_URL": f"http://{host}:{web}",
        "AUDIT_SIGNING_KEY_FILE": "var/audit-signing-key.pem",
        "CALLBACK_ALLOWED_HOSTS": f"{host}:{callback},localhost:{callback}",
        # Mail goes to files under var/mail with one line printed per message.
        "EMAIL_BACKEND": "escalations.mailfiles.EmailBackend",
        "EMAIL_FILE_PATH": "var/mail",
        "NOTIFY_ALLOWED_HOSTS": f"{host}:{pagerduty},{host}:{slack},{host}:{teams}",
        "PAGERDUTY_EVENTS_URL": f"http://{host}:{pagerduty}/v2/enqueue",
        # Not SITE_URL's host:port: a card paged before a change of ports is acknowledged after it.
        "PAGERDUTY_DEDUP_PREFIX": "pollerdash-demo",
        "SLACK_API_URL": f"http://{host}:{slack}/api",
        "SLACK_TEAM_ID": SLACK_TEAM_ID,
        "PAGERDUTY_USER_EMAILS": ",".join(f"{pd}={name}@{EMAIL_DOMAIN}" for pd, name in PAGERDUTY_PEOPLE.items()),
        "SLACK_APP_ID": SLACK_APP_ID,
        # The demo's credential may be sent to the fake provider only (docs/deployment.md).
        "PROVIDER_CREDENTIAL_ORIGINS": f"PROVIDER_FAKE_TOKEN=http://{host}:{provider}",
        # /metrics answers curl on this machine without a token.
        "METRICS_ALLOW_LOOPBACK": "1",
        "Q_WORKERS": "2",
    }
    kept_secrets = {name: previous.get(name) or new_secret(name) for name in SECRETS}
    # The demo policy's Teams target: the workflow's URL on its port, with the signature kept. One
    # query parameter only: the file is sourced by a shell, where an unquoted "&" ends the line.
    own["ONCALL_TEAMS_DEMO"] = (
        f"http://{host}:{teams}/workflows/demo/triggers/manual/paths/invoke?sig={kept_secrets['TEAMS_DEMO_SIGNATURE']}"
    )
    others = {name: value for name, value in previous.items() if name not in own and name not in SECRETS}
    # Earlier files told on-call through the implicit policy; the demo's own policy replaces it.
    others.pop("NOTIFY_EMAILS", None)
    return {**own, **kept_secrets, **others}


def render(values: Mapping[str, str]) -> str:
    header = (
        "# Written by `make demo` at every run: ports from the command line (else the previous run's),\n"
        "# secrets generated once and kept. Lines you add here are kept.\n"
    )
    return header + "".join(f"{name}={value}\n" for name, value in values.items())


def write(path: Path, *, given: Mapping[str, str]) -> dict[str, str]:
    previous = parse(path.read_text()) if path.exists() else {}
    values = demo_env(previous=previous, given=given, new_secret=lambda name: SECRETS[name]())
    path.parent.mkdir(parents=True, exist_ok=True)
    # The file holds secrets: readable by its owner only, also while it is being written.
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(render(values))
    os.replace(path.with_suffix(".tmp"), path)
    return values


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m demo.envfile FILE [NAME=PORT ...]", file=sys.stderr)
        return 2
    given = {}
    for arg in argv[1:]:
        name, _, value = arg.partition("=")
        if name not in PORTS:
            print(f"unknown setting {name!r}: one of {', '.join(PORTS)}", file=sys.stderr)
            return 2
        given[name] = value
    try:
        values = write(Path(argv[0]), given=given)
    except BadPort as exc:
        print(f"make demo: {exc}", file=sys.stderr)
        return 2
    print("ports: " + ", ".join(f"{name}={values[name]}" for name in PORTS) + f" (saved in {argv[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
