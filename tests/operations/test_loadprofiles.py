"""`manage.py loadprofiles FILE.toml`: idempotent by slug, invalid files rejected whole."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from operations.models import AuditEntry, ProviderAccount, ProviderProfile

ACME = """
[[provider]]
slug = "acme-export"
name = "ACME report export"
status_url = "https://api.acme.test/v1/jobs/{job_id}"
job_id_pattern = "^[A-Za-z0-9_.:-]{1,128}$"
state_field = "state"
pending = ["queued", "running", "processing"]
success = ["succeeded"]
failure = ["failed"]
cancelled = ["cancelled"]
expired = ["expired"]
required_result_fields = ["result.output_url"]
expiry_field = "expires_at"
progress_field = "progress_percent"
counts_fields = { total = "summary.processed", succeeded = "summary.succeeded", failed = "summary.failed" }
poll_hint_seconds_field = "poll_after_seconds"
poll_hint_time_field = "next_check_at"
request_id_header = "X-Request-Id"
credential_env = "PROVIDER_ACME_TOKEN"
auth_scheme = "Bearer"
base_delay_s = 5
max_delay_s = 120
jitter_floor = 0.5
default_deadline_s = 2400
default_max_status_requests = 12
default_max_transport_failures = 3
not_found_grace_s = 60
rate_limit_per_s = 10
cancel_method = "POST"
cancel_url = "https://api.acme.test/v1/jobs/{job_id}/cancel"
console_url = "https://console.acme.test/jobs/{job_id}"
approval_mode = "session"
extension_options = [ { minutes = 15, checks = 4 }, { minutes = 60, checks = 8 } ]
max_extensions = 3
"""

BETA = """
[[provider]]
slug = "beta"
name = "Beta renders"
account = "beta-prod"
status_url = "https://beta.test/render/{job_id}"
job_id_pattern = "^r-[0-9]+$"
state_field = "job.status"
pending = ["PENDING"]
success = ["DONE"]
"""

BROKEN = """
[[provider]]
slug = "broken"
name = "Broken"
status_url = "https://broken.test/jobs"
job_id_pattern = "[a-z]+"
state_field = "state"
pending = ["running", "done"]
success = ["done"]
jitter_floor = 0
cancel_url = "https://broken.test/jobs/{job_id}/cancel"
colour = "red"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profiles.toml"
    path.write_text(text)
    return path


def load(path: Path) -> list[str]:
    out = io.StringIO()
    call_command("loadprofiles", str(path), stdout=out)
    return out.getvalue().splitlines()


@pytest.mark.django_db
def test_a_valid_file_creates_every_profile_and_account(tmp_path):
    assert load(write(tmp_path, ACME + BETA)) == ["acme-export: created", "beta: created"]
    acme = ProviderProfile.objects.get(slug="acme-export")
    assert acme.success_states == ["succeeded"]
    assert acme.counts_fields == {
        "total": "summary.processed",
        "succeeded": "summary.succeeded",
        "failed": "summary.failed",
    }
    assert acme.extension_options == [{"minutes": 15, "checks": 4}, {"minutes": 60, "checks": 8}]
    beta = ProviderProfile.objects.get(slug="beta")
    assert beta.account == "beta-prod" and beta.max_delay_s == 120 and beta.failure_states == []
    assert set(ProviderAccount.objects.values_list("name", flat=True)) == {"acme-export", "beta-prod"}


@pytest.mark.django_db
def test_loading_the_same_file_again_reports_unchanged(tmp_path):
    path = write(tmp_path, ACME + BETA)
    load(path)
    assert load(path) == ["acme-export: unchanged", "beta: unchanged"]
    assert ProviderProfile.objects.count() == 2


@pytest.mark.django_db
def test_changing_a_value_reports_updated_with_the_changed_fields(tmp_path):
    load(write(tmp_path, ACME + BETA))
    changed = ACME.replace("max_delay_s = 120", "max_delay_s = 300") + BETA
    assert load(write(tmp_path, changed)) == ["acme-export: updated (max_delay_s)", "beta: unchanged"]
    assert ProviderProfile.objects.get(slug="acme-export").max_delay_s == 300


@pytest.mark.django_db
def test_one_invalid_profile_rejects_the_whole_file_and_every_problem_is_listed(tmp_path):
    with pytest.raises(CommandError) as caught:
        load(write(tmp_path, ACME + BROKEN + BETA))
    message = str(caught.value)
    assert "nothing written" in message
    for expected in (
        "provider #2 (broken): status_url: must contain {job_id} exactly once",
        "provider #2 (broken): job_id_pattern: must be anchored",
        "provider #2 (broken): success: state 'done' is in both pending and success",
        "provider #2 (broken): jitter_floor: must be > 0 and <= 1",
        "provider #2 (broken): cancel_method: is required with cancel_url",
        "provider #2 (broken): colour: unknown key",
    ):
        assert expected in message, message
    assert "provider #1" not in message and "provider #3" not in message
    assert not ProviderProfile.objects.exists()
    assert not ProviderAccount.objects.exists()


@pytest.mark.django_db
def test_a_business_deadline_warning_is_loaded_and_a_bad_one_is_a_listed_problem(tmp_path):
    warned = ACME + "business_deadline_warning_s = 900\n"
    assert load(write(tmp_path, warned)) == ["acme-export: created"]
    assert ProviderProfile.objects.get(slug="acme-export").business_deadline_warning_s == 900
    for bad in (0, -5, 8 * 24 * 3600):
        with pytest.raises(CommandError) as caught:
            load(write(tmp_path, ACME + f"business_deadline_warning_s = {bad}\n" + BETA))
        assert "provider #1 (acme-export): business_deadline_warning_s: must be from 1 s to 7 days" in str(caught.value)
    assert ProviderProfile.objects.get(slug="acme-export").business_deadline_warning_s == 900


@pytest.mark.django_db
def test_an_invalid_file_leaves_existing_profiles_untouched(tmp_path):
    load(write(tmp_path, ACME))
    with pytest.raises(CommandError):
        load(write(tmp_path, ACME.replace("max_delay_s = 120", "max_delay_s = 300") + BROKEN))
    assert ProviderProfile.objects.get(slug="acme-export").max_delay_s == 120


def test_a_toml_syntax_error_is_reported(tmp_path):
    with pytest.raises(CommandError, match="not valid TOML"):
        load(write(tmp_path, "[[provider]]\nslug = \n"))


def test_a_missing_file_is_reported(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        load(tmp_path / "absent.toml")


def test_the_command_exits_non_zero_and_prints_the_problems(tmp_path):
    path = write(tmp_path, BROKEN)
    env = {**os.environ, "DEBUG": "1"}
    completed = subprocess.run(
        [sys.executable, "manage.py", "loadprofiles", str(path)],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode != 0
    assert "provider #1 (broken): status_url: must contain {job_id} exactly once" in completed.stderr
    assert completed.stdout == ""


# --- credential variables and the audit chain (issue 16, finding 3) ---------------------------------------


def profile_entries() -> list[dict]:
    return [
        json.loads(bytes(body))
        for body in AuditEntry.objects.filter(type="profile.changed").values_list("body", flat=True).order_by("pk")
    ]


@pytest.mark.django_db
def test_a_file_naming_a_setting_as_its_credential_is_refused_with_the_field_named(tmp_path):
    with pytest.raises(CommandError) as raised:
        load(write(tmp_path, ACME.replace('"PROVIDER_ACME_TOKEN"', '"SITE_URL"')))
    assert (
        "provider #1 (acme-export): credential_env: SITE_URL is one of pollerdash's own settings and can never be "
        "a credential variable" in str(raised.value)
    )
    assert not ProviderProfile.objects.exists()


@pytest.mark.django_db
def test_loadprofiles_writes_an_audit_entry_naming_what_changed_never_the_credential(tmp_path, monkeypatch, settings):
    # The operator bound the second credential to the other host: the file may point it there.
    settings.PROVIDER_CREDENTIAL_ORIGINS = (
        "PROVIDER_ACME_TOKEN=https://api.acme.test;PROVIDER_ACME_EU_TOKEN=https://exfil.example,https://api.acme.test"
    )
    monkeypatch.setenv("PROVIDER_ACME_TOKEN", "acme-credential-value-1234")
    monkeypatch.setenv("PROVIDER_ACME_EU_TOKEN", "acme-eu-credential-value-5678")
    load(write(tmp_path, ACME))
    load(write(tmp_path, ACME))  # unchanged: no entry
    changed = (
        ACME.replace('"PROVIDER_ACME_TOKEN"', '"PROVIDER_ACME_EU_TOKEN"')
        .replace('https://api.acme.test/v1/jobs/{job_id}"', 'https://exfil.example/v1/jobs/{job_id}"')
        .replace('pending = ["queued", "running", "processing"]', 'pending = ["queued", "running"]')
        .replace("max_delay_s = 120", "max_delay_s = 300")
    )
    assert load(write(tmp_path, changed)) == [
        "acme-export: updated (status_url, pending_states, credential_env, max_delay_s)"
    ]

    created, updated = profile_entries()
    assert created["actor"] == updated["actor"] == {"kind": "operator", "id": "loadprofiles"}
    assert created["operation_id"] is None
    assert created["data"]["change"] == "created" and created["data"]["slug"] == "acme-export"
    assert created["data"]["before"] is None
    assert created["data"]["after"]["credential_env"] == "PROVIDER_ACME_TOKEN"
    assert created["data"]["after"]["status_url"] == "https://api.acme.test/v1/jobs/{job_id}"
    assert updated["data"]["change"] == "updated"
    assert updated["data"]["fields"] == ["status_url", "pending_states", "credential_env", "max_delay_s"]
    assert updated["data"]["before"] == {
        "status_url": "https://api.acme.test/v1/jobs/{job_id}",
        "pending_states": ["queued", "running", "processing"],
        "credential_env": "PROVIDER_ACME_TOKEN",
    }
    assert updated["data"]["after"] == {
        "status_url": "https://exfil.example/v1/jobs/{job_id}",
        "pending_states": ["queued", "running"],
        "credential_env": "PROVIDER_ACME_EU_TOKEN",
    }
    text = json.dumps(profile_entries())
    assert "credential-value" not in text
