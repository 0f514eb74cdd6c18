"""The operations admin: validated profile form, view-only records, no secrets, token revocation."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from operations.admin.configuration import ProviderProfileForm
from operations.models import (
    Agent,
    AgentToken,
    AuditCheckpoint,
    AuditEntry,
    AuditHead,
    Authorization,
    BulkDecision,
    CallbackDelivery,
    CardActivity,
    CardGroup,
    Decision,
    Escalation,
    EscalationPolicy,
    IdempotencyKey,
    NotificationDelivery,
    Operation,
    PolicyRun,
    ProviderAccount,
    ProviderProfile,
    StatusCheck,
)

pytestmark = pytest.mark.django_db

WEBHOOK_SECRET = "whsec_plantedWebhookSecret0123456789abcdef"
TOKEN_HASH = "f00dfeed" * 8
OTHER_TOKEN_HASH = "0badc0de" * 8

VIEW_ONLY = (
    Operation,
    StatusCheck,
    Authorization,
    AuditEntry,
    AuditCheckpoint,
    AuditHead,
    IdempotencyKey,
    CallbackDelivery,
)


def form_data(**overrides: object) -> dict[str, str]:
    """What a browser posts for a valid profile: JSON fields as JSON text, blanks as ""."""
    values: dict[str, object] = {
        "slug": "acme-export",
        "name": "ACME report export",
        "account": "",
        "status_url": "https://api.acme.test/v1/jobs/{job_id}",
        "job_id_pattern": "^[A-Za-z0-9_.:-]{1,128}$",
        "state_field": "state",
        "pending_states": ["queued", "running"],
        "success_states": ["succeeded"],
        "failure_states": ["failed"],
        "cancelled_states": [],
        "expired_states": [],
        "required_result_fields": ["result.output_url"],
        "expiry_field": "",
        "progress_field": "",
        "counts_fields": {},
        "poll_hint_seconds_field": "",
        "poll_hint_time_field": "",
        "request_id_header": "",
        "credential_env": "PROVIDER_ACME_TOKEN",
        "auth_scheme": "Bearer",
        "base_delay_s": 5,
        "max_delay_s": 120,
        "backoff_multiplier": 2,
        "jitter_floor": 0.5,
        "default_deadline_s": 2400,
        "default_max_status_requests": 12,
        "default_max_transport_failures": 3,
        "not_found_grace_s": 60,
        "rate_limit_per_s": 10,
        "cancel_method": "",
        "cancel_url": "",
        "console_url": "",
        "approval_mode": "session",
        "extension_options": [{"minutes": 15, "checks": 4}],
        "max_extensions": 3,
    }
    values.update(overrides)
    return {key: json.dumps(value) if isinstance(value, list | dict) else str(value) for key, value in values.items()}


@pytest.fixture
def planted() -> dict[str, object]:
    """One row of every operations model, with a webhook secret and token hashes planted."""
    now = timezone.now()
    profile = ProviderProfile.objects.create(
        slug="acme-export",
        name="ACME",
        account="acme-export",
        status_url="https://api.acme.test/v1/jobs/{job_id}",
        job_id_pattern="^[a-z0-9_]+$",
        state_field="state",
        pending_states=["running"],
        success_states=["succeeded"],
    )
    ProviderAccount.objects.create(name="acme-export", paused_until=now + timedelta(minutes=2), pause_reason="429")
    agent = Agent.objects.create(name="report-bot", webhook_secret=WEBHOOK_SECRET)
    token = AgentToken.objects.create(agent=agent, token_sha256=TOKEN_HASH, prefix="pd_live_ab12")
    revoked_at = now - timedelta(days=1)
    old_token = AgentToken.objects.create(
        agent=agent, token_sha256=OTHER_TOKEN_HASH, prefix="pd_live_cd34", revoked_at=revoked_at
    )
    operation = Operation.objects.create(
        id="op_01JTESTADMIN0000000000000A",
        agent=agent,
        registered_by="agent:report-bot",
        provider=profile,
        account="acme-export",
        provider_job_id="exp_71c",
        purpose="quarterly export",
        status="running",
        deadline_at=now + timedelta(minutes=40),
        max_status_requests=12,
        max_transport_failures=3,
        status_requests_used=4,
        next_poll_at=now + timedelta(seconds=30),
        lease_owner="worker-host-7:4242",
        lease_expires_at=now + timedelta(seconds=60),
        fence=9137,
        created_at=now,
        updated_at=now,
    )
    check = StatusCheck.objects.create(
        operation=operation, account="acme-export", fence=9137, started_at=now, sent_at=now, http_status=200
    )
    authorization = Authorization.objects.create(
        operation=operation,
        number=1,
        kind=Authorization.Kind.INITIAL,
        granted_by_label="agent:report-bot",
        granted_at=now,
        deadline_at=operation.deadline_at,
        max_status_requests=12,
        max_transport_failures=3,
    )
    entry = AuditEntry.objects.create(
        log="pollerdash-test",
        seq=1,
        prev_hash="0" * 64,
        entry_hash="a" * 64,
        body=b'{"type":"operation.registered","purpose":"quarterly export <b>bold</b>"}',
        at=now,
        type="operation.registered",
        operation_id=operation.id,
    )
    head = AuditHead.objects.create(log="pollerdash-test", seq=1, head_hash="a" * 64)
    checkpoint = AuditCheckpoint.objects.create(
        log="pollerdash-test", size=1, head_hash="a" * 64, signed_at=now, key_id="k1", note="pollerdash-test\n1\n"
    )
    idempotency = IdempotencyKey.objects.create(agent=agent, key="idem-1", request_hash="b" * 64, operation=operation)
    callback = CallbackDelivery.objects.create(
        id="msg_01JTESTADMIN0000000000000",
        operation=operation,
        event_type="operation.completed",
        sequence=3,
        payload=b'{"type":"operation.completed"}',
        url="https://agent.example/hook",
        created_at=now,
    )
    return {
        "profile": profile,
        "account": ProviderAccount.objects.get(name="acme-export"),
        "agent": agent,
        "token": token,
        "old_token": old_token,
        "operation": operation,
        "check": check,
        "authorization": authorization,
        "entry": entry,
        "head": head,
        "checkpoint": checkpoint,
        "idempotency": idempotency,
        "callback": callback,
    }


def url(obj: object, view: str) -> str:
    meta = obj._meta
    args = () if view == "changelist" or view == "add" else (obj.pk,)
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{view}", args=args)


def assert_no_secret(content: bytes) -> None:
    for secret in (WEBHOOK_SECRET, TOKEN_HASH, OTHER_TOKEN_HASH):
        assert secret.encode() not in content, f"{secret[:12]}... shown in an admin page"


# --- every page renders, and no secret is on any of them ----------------------------------------------


def test_every_operations_model_is_registered():
    registered = {model for model in admin.site._registry if model._meta.app_label == "operations"}
    assert registered == {
        Agent,
        AgentToken,
        AuditCheckpoint,
        AuditEntry,
        AuditHead,
        BulkDecision,
        CardActivity,
        CardGroup,
        Decision,
        Escalation,
        EscalationPolicy,
        Authorization,
        CallbackDelivery,
        IdempotencyKey,
        NotificationDelivery,
        Operation,
        PolicyRun,
        ProviderAccount,
        ProviderProfile,
        StatusCheck,
    }


def test_the_admin_index_names_every_list_in_plain_english(admin_client):
    # Django's default plural appends "s": "Audit entrys", "Notification deliverys" in the demo.
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert re.findall(r"\b\w*[^aeiou\W]ys\b", page) == []
    assert "Audit entries" in page and "Notification deliveries" in page


def test_changelists_and_change_pages_render_without_secrets(admin_client, planted):
    for obj in planted.values():
        for view in ("changelist", "change"):
            response = admin_client.get(url(obj, view))
            assert response.status_code == 200, (type(obj).__name__, view)
            assert_no_secret(response.content)


def test_admin_index_history_and_agent_delete_page_show_no_secret(admin_client, planted):
    agent = planted["agent"]
    for address in (reverse("admin:index"), url(agent, "history"), url(agent, "delete")):
        response = admin_client.get(address)
        assert response.status_code == 200, address
        assert_no_secret(response.content)


def test_search_and_filters_on_operations(admin_client, planted):
    changelist = url(planted["operation"], "changelist")
    for query in ("?q=exp_71c", "?q=quarterly", "?q=op_01JTESTADMIN", "?status__exact=running"):
        response = admin_client.get(changelist + query)
        assert response.status_code == 200
        assert b"op_01JTESTADMIN0000000000000A" in response.content, query
    assert b"op_01JTESTADMIN" not in admin_client.get(changelist + "?status__exact=failed").content


def test_lease_and_fence_are_visible_in_the_list_and_on_the_record(admin_client, planted):
    operation = planted["operation"]
    for view in ("changelist", "change"):
        content = admin_client.get(url(operation, view)).content.decode()
        assert "worker-host-7:4242" in content and "9137" in content, view
    assert "4/12" in admin_client.get(url(operation, "changelist")).content.decode()


def test_audit_body_is_shown_decoded_and_escaped(admin_client, planted):
    content = admin_client.get(url(planted["entry"], "change")).content.decode()
    assert "operation.registered" in content
    assert "quarterly export &lt;b&gt;bold&lt;/b&gt;" in content


def test_token_pages_show_the_prefix(admin_client, planted):
    content = admin_client.get(url(planted["token"], "changelist")).content.decode()
    assert "pd_live_ab12" in content and "pd_live_cd34" in content


# --- read-only records ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", VIEW_ONLY, ids=lambda m: m.__name__)
def test_records_cannot_be_added_changed_or_deleted(admin_client, admin_user, rf, planted, model):
    # The planted row (creating the admin user wrote entries of its own to the real chain).
    obj = model.objects.exclude(**({"log": settings.AUDIT_LOG_NAME} if hasattr(model, "log") else {})).get()
    assert admin_client.get(url(obj, "add")).status_code == 403
    assert admin_client.post(url(obj, "change"), {}).status_code == 403
    assert admin_client.post(url(obj, "delete"), {"post": "yes"}).status_code == 403
    assert model.objects.filter(pk=obj.pk).exists()
    request = rf.get("/admin/")
    request.user = admin_user
    assert "delete_selected" not in admin.site._registry[model].get_actions(request)


def test_agents_and_tokens_cannot_be_added_and_tokens_cannot_be_deleted(admin_client, planted):
    assert admin_client.get(url(planted["agent"], "add")).status_code == 403
    assert admin_client.get(url(planted["token"], "add")).status_code == 403
    assert admin_client.post(url(planted["token"], "delete"), {"post": "yes"}).status_code == 403


# --- token revocation -----------------------------------------------------------------------------


def test_revoke_action_revokes_selected_tokens_and_keeps_earlier_revocation_times(admin_client, planted):
    token, old_token = planted["token"], planted["old_token"]
    earlier = old_token.revoked_at
    response = admin_client.post(
        url(token, "changelist"),
        {"action": "revoke_tokens", "_selected_action": [token.pk, old_token.pk]},
        follow=True,
    )
    assert response.status_code == 200
    assert b"Revoked 1 token(s)." in response.content
    token.refresh_from_db()
    old_token.refresh_from_db()
    assert token.revoked_at is not None
    assert old_token.revoked_at == earlier
    assert_no_secret(response.content)


# --- the profile form runs the loadprofiles validation ----------------------------------------------------


def test_a_valid_profile_form_saves_with_account_defaulting_to_the_slug():
    form = ProviderProfileForm(data=form_data())
    assert form.is_valid(), form.errors
    profile = form.save()
    assert profile.account == "acme-export"
    assert profile.pending_states == ["queued", "running"]
    assert profile.auth_scheme == "Bearer" and profile.counts_fields == {}


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"status_url": "https://api.acme.test/v1/jobs"}, "status_url", "{job_id} exactly once"),
        ({"job_id_pattern": "[a-z]+"}, "job_id_pattern", "must be anchored"),
        ({"success_states": ["running"]}, "success_states", "state 'running' is in both pending and success"),
        ({"pending_states": []}, "pending_states", "at least one state"),
        ({"pending_states": ["a", "a"]}, "pending_states", "listed twice"),
        ({"jitter_floor": 0}, "jitter_floor", "must be > 0 and <= 1"),
        ({"backoff_multiplier": 0.9}, "backoff_multiplier", "must be >= 1 and <= 4"),
        ({"base_delay_s": 500}, "max_delay_s", "must be >= base_delay_s"),
        ({"cancel_method": "POST"}, "cancel_url", "is required with cancel_method"),
        ({"credential_env": "acme token"}, "credential_env", "credential variable name format"),
        ({"credential_env": "SECRET_KEY"}, "credential_env", "SECRET_KEY is one of pollerdash's own settings"),
        ({"credential_env": "AUDIT_SIGNING_KEY"}, "credential_env", "one of pollerdash's own settings"),
        ({"credential_env": "ACME_TOKEN"}, "credential_env", "must start with PROVIDER_"),
        ({"extension_options": [{"minutes": 0, "checks": 4}]}, "extension_options", "minutes must be an integer"),
        ({"counts_fields": {"skipped": "x"}}, "counts_fields", "unknown count 'skipped'"),
        ({"approval_mode": "per_call", "state_field": "a b"}, "state_field", "dotted field path"),
        ({"expiry_field": "a..b"}, "expiry_field", "dotted field path"),
        ({"business_deadline_warning_s": 0}, "business_deadline_warning_s", "must be from 1 s to 7 days"),
        ({"business_deadline_warning_s": 604801}, "business_deadline_warning_s", "must be from 1 s to 7 days"),
    ],
)
def test_the_profile_form_refuses_what_loadprofiles_refuses(overrides, field, fragment):
    form = ProviderProfileForm(data=form_data(**overrides))
    assert not form.is_valid()
    assert any(fragment in message for message in form.errors.get(field, [])), form.errors
    assert not ProviderProfile.objects.exists()


def test_the_profile_form_keeps_a_business_deadline_warning_and_leaves_it_optional():
    assert ProviderProfileForm(data=form_data()).save().business_deadline_warning_s is None
    ProviderProfile.objects.all().delete()
    warned = ProviderProfileForm(data=form_data(business_deadline_warning_s=900))
    assert warned.is_valid(), warned.errors
    assert warned.save().business_deadline_warning_s == 900


def test_unparsable_input_is_reported_once_not_also_as_missing():
    form = ProviderProfileForm(data=form_data(pending_states="[not json"))
    assert not form.is_valid()
    assert len(form.errors["pending_states"]) == 1


def test_the_admin_add_view_saves_a_valid_profile_and_its_account(admin_client):
    response = admin_client.post(reverse("admin:operations_providerprofile_add"), form_data(account="acme-eu"))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ProviderProfile.objects.get(slug="acme-export").account == "acme-eu"
    assert ProviderAccount.objects.filter(name="acme-eu").exists()


def test_the_admin_add_view_refuses_an_invalid_profile(admin_client):
    response = admin_client.post(
        reverse("admin:operations_providerprofile_add"), form_data(status_url="ftp://x.test/{job_id}")
    )
    assert response.status_code == 200
    assert b"http:// or https:// URL with a host" in response.content
    assert not ProviderProfile.objects.exists()


def test_the_admin_change_view_refuses_an_invalid_edit(admin_client, planted):
    profile = planted["profile"]
    response = admin_client.post(url(profile, "change"), form_data(slug="acme-export", job_id_pattern="^a|b$"))
    assert response.status_code == 200
    profile.refresh_from_db()
    assert profile.job_id_pattern == "^[a-z0-9_]+$"


# --- profile changes are in the audit chain (issue 16, finding 3) -------------------------------------------


def profile_entries() -> list[dict]:
    bodies = AuditEntry.objects.filter(type="profile.changed").order_by("pk").values_list("body", flat=True)
    return [json.loads(bytes(body)) for body in bodies]


def test_admin_profile_changes_write_audit_entries_naming_the_user_and_the_change(
    admin_client, admin_user, monkeypatch, settings
):
    # The operator bound the second credential to the other host: the admin may point it there.
    settings.PROVIDER_CREDENTIAL_ORIGINS = (
        "PROVIDER_ACME_TOKEN=https://api.acme.test;PROVIDER_OTHER_TOKEN=https://exfil.example"
    )
    monkeypatch.setenv("PROVIDER_ACME_TOKEN", "acme-credential-value-1234")
    assert admin_client.post(reverse("admin:operations_providerprofile_add"), form_data()).status_code == 302
    profile = ProviderProfile.objects.get(slug="acme-export")
    edited = form_data(
        status_url="https://exfil.example/v1/jobs/{job_id}",
        credential_env="PROVIDER_OTHER_TOKEN",
        success_states=["succeeded", "done"],
    )
    assert admin_client.post(url(profile, "change"), edited).status_code == 302
    # Saving the form unchanged writes no entry.
    assert admin_client.post(url(profile, "change"), edited).status_code == 302
    assert admin_client.post(url(profile, "delete"), {"post": "yes"}).status_code == 302

    created, updated, deleted = profile_entries()
    actor = {"kind": "user", "id": admin_user.get_username()}
    assert created["actor"] == updated["actor"] == deleted["actor"] == actor
    assert (
        created["data"]["change"] == "created" and created["data"]["after"]["credential_env"] == "PROVIDER_ACME_TOKEN"
    )
    assert updated["data"] == {
        "slug": "acme-export",
        "change": "updated",
        "fields": ["status_url", "success_states", "credential_env"],
        "before": {
            "status_url": "https://api.acme.test/v1/jobs/{job_id}",
            "success_states": ["succeeded"],
            "credential_env": "PROVIDER_ACME_TOKEN",
        },
        "after": {
            "status_url": "https://exfil.example/v1/jobs/{job_id}",
            "success_states": ["succeeded", "done"],
            "credential_env": "PROVIDER_OTHER_TOKEN",
        },
    }
    assert deleted["data"]["change"] == "deleted" and deleted["data"]["after"] is None
    assert "acme-credential-value" not in json.dumps(profile_entries())
