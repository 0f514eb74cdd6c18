"""The provider credential never leaves the process that sends it.

tests/conftest.py runs a guard after EVERY test in the suite: responses, raw log records (before
redaction) and stored rows must not contain the canary credential. These tests prove the guard
really catches a leak, and drive the paths most likely to leak one.
"""

from __future__ import annotations

import base64
import json
import logging
from io import StringIO
from urllib.parse import quote

import pytest
from django.core.mail import send_mail
from django.core.management import call_command
from django.test import Client

from operations import tasks
from operations.agents.identities import agent_token_issue
from operations.infrastructure.redaction import redact
from operations.models import AuditEntry, Escalation, Operation, StatusCheck
from operations.polls.controller import poll_once
from operations.providers import http
from tests.support import CANARY, canary_emails, canary_log_handler, canary_rows, has_canary, job_id


@pytest.mark.canary_planted
def test_the_guard_sees_a_leaked_log_record() -> None:
    before = len(canary_log_handler.leaks)
    logging.getLogger("pollerdash.test").warning("oops %s", CANARY)
    assert len(canary_log_handler.leaks) == before + 1


@pytest.mark.canary_planted
@pytest.mark.django_db
def test_the_guard_sees_a_leaked_row(make_operation) -> None:
    op = make_operation(job_id("slow_success"))
    Operation.objects.filter(pk=op.pk).update(purpose=f"token={CANARY}")
    assert canary_rows() == ["Operation row"]


def test_log_output_is_scrubbed_even_if_code_logs_a_credential() -> None:
    http.credential_headers(credential_env="PROVIDER_FAKE_TOKEN", auth_scheme="Bearer")
    assert CANARY not in redact(f"headers={{'Authorization': 'Bearer {CANARY}'}}")
    assert CANARY not in redact(f"sent {CANARY} to the provider")


@pytest.mark.django_db
def test_no_path_stores_or_shows_the_credential(make_operation, clock, rng, fake_provider, admin_client) -> None:
    ops = [
        make_operation(job_id(scenario, **params))
        for scenario, params in [
            ("slow_success", {"polls": 0}),
            ("auth_revoked", {}),
            ("late_failure", {"polls": 0}),
            ("invalid_json", {"kind": "html"}),
            ("redirect", {}),
        ]
    ]
    for op in ops:
        poll_once(operation_id=op.pk, fence=Operation.objects.get(pk=op.pk).fence, rng=rng)
    # The credential was sent: the provider saw an Authorization header on every request.
    assert all(r["auth"] == "present" for op in ops for r in fake_provider.requests(job_id=op.provider_job_id))
    texts = [json.dumps(list(StatusCheck.objects.values()), default=str)]
    texts += [bytes(body).decode() for body in AuditEntry.objects.values_list("body", flat=True)]
    for op in ops:
        out = StringIO()
        call_command("operation_status", op.pk, "--json", stdout=out)
        texts.append(out.getvalue())
        texts.append(admin_client.get(f"/operations/{op.pk}/").content.decode())
        texts.append(admin_client.get(f"/admin/operations/operation/{op.pk}/change/").content.decode())
    texts.append(admin_client.get("/operations/").content.decode())
    assert all(CANARY not in text for text in texts)


# --- the guard itself sees encoded forms and email (issue 16) -------------------------------------------


@pytest.mark.canary_planted
def test_the_guard_sees_the_canary_base64_encoded_and_in_a_url() -> None:
    header = base64.b64encode(f"Bearer {CANARY}".encode()).decode()
    assert has_canary(f'{{"echo": "{header}"}}')
    assert has_canary(f"?token={base64.urlsafe_b64encode(CANARY.encode()).decode().rstrip('=')}")
    assert has_canary(f"?auth={quote(f'Bearer {CANARY}', safe='')}".encode())
    assert not has_canary("an ordinary body")


@pytest.mark.canary_planted
def test_the_guard_sees_a_leaked_email(mailoutbox) -> None:
    send_mail("Decision needed", f"the provider said {quote('Bearer ' + CANARY)}", "a@example.test", ["b@example.test"])
    assert canary_emails() == ["email 'Decision needed'"]


# --- a credential that is not a legal header value (issue 16, finding 4) -----------------------------------

# A PEM with internal line breaks; its body line is the canary, so the suite's guard checks every
# response, row, log record and email of this test for it too.
PEM = f"-----BEGIN PRIVATE KEY-----\n{CANARY}\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASCAT8wggE7\n-----END PRIVATE KEY-----\n"
PEM_LINES = ("MIIBVQIBADANBgkqhkiG9w0BAQEFAASCAT8wggE7", CANARY, "BEGIN PRIVATE KEY")


def body_of(response: object) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


@pytest.mark.django_db
def test_a_pem_credential_is_never_sent_and_never_quoted(
    make_profile, make_operation, fake_provider, admin_client, tmp_path, monkeypatch, settings, mailoutbox, clock, pump
) -> None:
    key_file = tmp_path / "provider-key.pem"
    key_file.write_text(PEM)
    monkeypatch.setenv("PROVIDER_PEM_KEY_FILE", str(key_file))
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    profile = make_profile(credential_env="PROVIDER_PEM_KEY")
    op = make_operation(job_id("slow_success"), provider=profile)

    poll_once(operation_id=op.pk, fence=Operation.objects.get(pk=op.pk).fence)

    assert fake_provider.requests(job_id=op.provider_job_id) == []
    message = "the credential in PROVIDER_PEM_KEY is not a valid header value"
    escalation = Escalation.objects.get(operation=op)
    assert escalation.reason == "authorization_denied" and escalation.detail == message
    assert StatusCheck.objects.get(operation=op).transport_error == "invalid_credential"
    assert pump() == ["sent"]
    [mail] = mailoutbox
    card = admin_client.get(f"/operations/{op.pk}/").content.decode()
    assert message in card and message in mail.body
    texts = [card, mail.subject, mail.body]
    for page in ("report/", "checks.csv", "decisions.csv", "audit.jsonl"):
        texts.append(body_of(admin_client.get(f"/operations/{op.pk}/{page}")))
    texts += [bytes(body).decode() for body in AuditEntry.objects.values_list("body", flat=True)]
    texts.append(json.dumps(list(StatusCheck.objects.values()), default=str))
    for text in texts:
        assert not any(line in text for line in PEM_LINES)


# --- a provider that echoes the Authorization header (issue 16, finding 5) ---------------------------------


@pytest.fixture
def agent_client(db) -> Client:
    issued = agent_token_issue(name="echo-bot")
    return Client(headers={"Authorization": f"Bearer {issued.token}"})


def register(agent_client: Client, profile: object, job: str) -> str:
    body = {"provider": profile.slug, "provider_job_id": job}
    response = agent_client.post("/api/v1/operations", body, content_type="application/json")
    assert response.status_code == 202, response.content
    return response.json()["id"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("where", "status"),
    [("error", "failed"), ("state", "needs_attention"), ("progress", "running"), ("result", "succeeded")],
)
def test_an_echoed_credential_is_scrubbed_before_anything_is_stored(
    where, status, profile, agent_client, fake_provider, admin_client, settings, mailoutbox, clock, rng, pump
) -> None:
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    operation_id = register(agent_client, profile, job_id("echo_auth", **{"in": where}))

    poll_once(operation_id=operation_id, fence=Operation.objects.get(pk=operation_id).fence, rng=rng)

    op = Operation.objects.get(pk=operation_id)
    assert op.status == status
    assert [r["auth"] for r in fake_provider.requests(job_id=op.provider_job_id)] == ["present"]
    shown = agent_client.get(f"/api/v1/operations/{operation_id}").content.decode()
    # The provider's answer is kept, with the credential (in every form it echoed) taken out.
    assert "[redacted]" in shown + json.dumps(op.warnings)
    texts = [shown, admin_client.get(f"/operations/{operation_id}/").content.decode()]
    texts.append(json.dumps(list(StatusCheck.objects.filter(operation_id=operation_id).values()), default=str))
    texts += [bytes(body).decode() for body in AuditEntry.objects.values_list("body", flat=True)]
    pump()
    for escalation in Escalation.objects.filter(operation_id=operation_id):
        texts.append(json.dumps([escalation.detail, escalation.context]))
    texts += [mail.body for mail in mailoutbox]
    for text in texts:
        assert not has_canary(text)
    if where == "error":
        error = json.loads(shown)["error"]["provider_error"]
        assert error["request"]["headers"]["Authorization"] == "[redacted]"
        assert set(error["encoded"].values()) == {"[redacted]"}


@pytest.mark.django_db
def test_an_echoed_credential_in_a_cancel_answer_is_scrubbed(profile, agent_client, fake_provider, clock) -> None:
    operation_id = register(agent_client, profile, job_id("echo_auth"))
    response = agent_client.post(f"/api/v1/operations/{operation_id}/cancel", {}, content_type="application/json")
    assert response.status_code == 202, response.content

    assert tasks.forward_provider_cancel(operation_id) == "forwarded"

    assert [
        r["kind"] for r in fake_provider.requests(job_id=Operation.objects.get(pk=operation_id).provider_job_id)
    ] == ["cancel"]
    [entry] = [
        json.loads(bytes(body))
        for body in AuditEntry.objects.filter(type="operation.cancel_forwarded").values_list("body", flat=True)
    ]
    assert entry["data"]["provider_state"] == "[redacted]"
    assert not has_canary(agent_client.get(f"/api/v1/operations/{operation_id}").content)
