"""What a process's start-up imports (pollerdash/apps.py, escalations/oncall/receivers.py).

`django.setup()` wires every signal handler but imports no admin module, no API schema library
(django-ninja, pydantic), no HTTP client and no policy code: a command that serves no page, such as
`manage.py audit_export --operation`, starts in about half the time it did. The admins are
registered where they are used: by the root URLconf, and by the admin's system checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Imported by the site (URLconf), the API, a worker's sending code or the first card event, never by
# start-up alone.
NOT_AT_START_UP = (
    "httpx",
    "ninja",
    "pydantic",
    "operations.admin",
    "escalations.admin",
    "django_q.admin",
    "axes.admin",
    "operations.infrastructure.outbound",
    "escalations.oncall.channels.registry",
    "escalations.oncall.notices",
    "escalations.oncall.send",
    "escalations.oncall.runs",
    "escalations.oncall.outbox_rows",
    "escalations.oncall.outbox",
)

SETUP = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pollerdash.settings")
import django
django.setup()
from django.contrib import admin
"""


def _run(script: str, tmp_path: Path) -> dict:
    env = {
        **os.environ,
        "SECRET_KEY": "test-only-not-secret",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'startup.sqlite3'}",
        "POLLERDASH_VAR_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "-c", SETUP + script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_start_up_imports_no_admin_api_schemas_or_http_client_and_connects_every_receiver(tmp_path: Path) -> None:
    found = _run(
        f"names = {list(NOT_AT_START_UP)!r}\n"
        """
from operations import events
signals = ("card_opened", "card_acknowledged", "card_unacknowledged", "card_closed", "card_reassigned",
           "card_awaiting_second", "dispatcher_pass", "callback_undeliverable", "business_deadline_near")
print(json.dumps({
    "imported": sorted(set(names) & set(sys.modules)),
    "registered": len(admin.site._registry),
    "unconnected": [name for name in signals if not getattr(events, name).has_listeners()],
}))
""",
        tmp_path,
    )
    assert found == {"imported": [], "registered": 0, "unconnected": []}


def test_the_urlconf_registers_every_apps_admins(tmp_path: Path) -> None:
    found = _run(
        """
from django.urls import reverse
reverse("admin:index")
print(json.dumps({m._meta.label: type(a).__name__ for m, a in admin.site._registry.items()}))
""",
        tmp_path,
    )
    # One of each app that has admins: people (audited), pollerdash's records, django-q2's models
    # (view-only, registered over django-q2's own), sign-in throttling.
    assert found["auth.User"] == "AttributedUserAdmin"
    assert found["operations.ProviderProfile"] == "ProviderProfileAdmin"
    assert found["django_q.Schedule"] == "ScheduleAdmin"
    assert found["axes.AccessAttempt"] == "AccessAttemptAdmin"
    assert len(found) == 29


def test_the_admin_checks_run_on_every_admin_without_the_urlconf(tmp_path: Path) -> None:
    # `manage.py check` runs its checks in no fixed order: the URL checks that load the URLconf may
    # come after the admin's, which must still see every admin.
    found = _run(
        """
from django.core import checks
errors = checks.run_checks(tags=[checks.Tags.admin])
print(json.dumps({"errors": [str(e) for e in errors], "registered": len(admin.site._registry)}))
""",
        tmp_path,
    )
    assert found == {"errors": [], "registered": 29}
