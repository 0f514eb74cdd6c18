"""A provider credential goes only where the operator bound it (issue 24, item 4).

The reproduction: an admin copied the demo profile with `status_url =
http://127.0.0.1:8969/steal/{job_id}`, and a worker delivered the real token to a listener there.
Each credential variable is bound to the origins it may be sent to by PROVIDER_CREDENTIAL_ORIGINS
in the environment: the admin, loadprofiles and the start-up check refuse a profile that breaks
the binding (the field named, nothing written), and a worker refuses to send it whatever the row
says (nothing sent, nothing charged, a card in fixed words). A profile without a credential gets
the callback address policy instead, checked again when the request is sent.

Counted at the listener: it records every Authorization header it is sent.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.forms.models import model_to_dict
from django.urls import reverse
from django.utils import timezone

from operations.cards.words import Refusal, cancel_words, destination_words
from operations.decisions.services import escalation_decide
from operations.models import AuditEntry, Escalation, Operation, ProviderProfile, StatusCheck
from operations.polls import dispatch
from operations.polls.batch import poll_claims
from operations.polls.controller import PollResult, poll_once
from operations.profiles import validate_profile
from operations.providers import http
from operations.providers.targets import Destination, DestinationRefused, check_destination
from operations.vocabulary import Reason, Status
from tests.operations.test_admin import form_data
from tests.operations.test_credential_names import Listener
from tests.operations.test_profiles import valid_raw
from tests.support import CANARY, job_id, signed_in_now

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def thief() -> Iterator[Listener]:
    """The attacker's listener on 127.0.0.1 (another port than the fake provider's)."""
    server = Listener()
    yield server
    server.stop()


def steal(thief: Listener) -> str:
    return f"{thief.url}/steal/{{job_id}}"


def reload(op: Operation) -> Operation:
    return Operation.objects.select_related("provider").get(pk=op.pk)


def refused_card(op: Operation) -> Escalation:
    return Escalation.objects.get(operation=op, state=Escalation.State.OPEN)


def profile_entries() -> int:
    return AuditEntry.objects.filter(type="profile.changed").count()


# --- the profile loaders: refused, field named, nothing written -----------------------------------------


@pytest.mark.django_db
def test_the_admin_refuses_a_copy_of_the_demo_profile_that_sends_its_credential_elsewhere(
    admin_client, fake_provider, thief
):
    before = profile_entries()
    stolen = form_data(slug="stolen", status_url=steal(thief), credential_env="PROVIDER_FAKE_TOKEN")
    response = admin_client.post(reverse("admin:operations_providerprofile_add"), stolen)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["status_url"]
    assert errors["status_url"] == [
        f"status_url: origin {thief.url} is not one PROVIDER_CREDENTIAL_ORIGINS binds PROVIDER_FAKE_TOKEN to "
        f"({fake_provider.base_url}); the operator's environment decides where a credential may go"
    ]
    assert not ProviderProfile.objects.filter(slug="stolen").exists() and profile_entries() == before


@pytest.mark.django_db
def test_the_admin_refuses_a_cancel_url_that_sends_the_credential_elsewhere(admin_client, fake_provider, thief):
    data = form_data(
        slug="cancel-thief",
        status_url=f"{fake_provider.base_url}/v1/jobs/{{job_id}}",
        credential_env="PROVIDER_FAKE_TOKEN",
        cancel_method="POST",
        cancel_url=steal(thief),
    )
    response = admin_client.post(reverse("admin:operations_providerprofile_add"), data)
    assert response.status_code == 200 and list(response.context["adminform"].form.errors) == ["cancel_url"]
    assert not ProviderProfile.objects.filter(slug="cancel-thief").exists()


DEMO_COPY = """
[[provider]]
slug = "stolen"
name = "Copy of the demo profile"
status_url = "STATUS"
job_id_pattern = "^[A-Za-z0-9_.:=+-]{1,200}$"
state_field = "state"
pending = ["queued", "running"]
success = ["succeeded"]
credential_env = "CREDENTIAL"
"""


@pytest.mark.django_db
def test_loadprofiles_refuses_the_same_copy_naming_the_field_and_writes_nothing(tmp_path, thief, fake_provider):
    path = tmp_path / "profiles.toml"
    path.write_text(DEMO_COPY.replace("STATUS", steal(thief)).replace("CREDENTIAL", "PROVIDER_FAKE_TOKEN"))
    with pytest.raises(CommandError) as raised:
        call_command("loadprofiles", str(path), stdout=StringIO())
    assert f"provider #1 (stolen): status_url: origin {thief.url} is not one PROVIDER_CREDENTIAL_ORIGINS" in str(
        raised.value
    )
    assert "nothing written" in str(raised.value)
    assert not ProviderProfile.objects.exists() and profile_entries() == 0


@pytest.mark.django_db
def test_a_credential_variable_without_an_entry_is_refused_by_both_loaders(tmp_path, admin_client, fake_provider):
    path = tmp_path / "profiles.toml"
    status = f"{fake_provider.base_url}/v1/jobs/{{job_id}}"
    path.write_text(DEMO_COPY.replace("STATUS", status).replace("CREDENTIAL", "PROVIDER_UNBOUND_TOKEN"))
    with pytest.raises(CommandError, match="credential_env: PROVIDER_UNBOUND_TOKEN has no entry in PROVIDER_CRED"):
        call_command("loadprofiles", str(path), stdout=StringIO())
    data = form_data(slug="unbound", status_url=status, credential_env="PROVIDER_UNBOUND_TOKEN")
    response = admin_client.post(reverse("admin:operations_providerprofile_add"), data)
    assert list(response.context["adminform"].form.errors) == ["credential_env"]
    assert not ProviderProfile.objects.exists()


# --- URL tricks: the origin is the one the sender goes to -------------------------------------------------

BOUND = "https://api.acme.test"


@pytest.mark.parametrize(
    ("status_url", "accepted"),
    [
        ("https://API.Acme.TEST/v1/jobs/{job_id}", True),  # upper case: the same host
        ("https://api.acme.test./v1/jobs/{job_id}", True),  # one final dot: the same host
        ("https://api.acme.test:443/v1/jobs/{job_id}", True),  # the default port spelled out
        ("HTTPS://api.acme.test/v1/jobs/{job_id}", True),
        ("https://api.acme.test@evil.example/v1/jobs/{job_id}", False),  # user info: the host is evil
        ("https://api.acme.test:443@evil.example/v1/jobs/{job_id}", False),
        ("https://evil.example#@api.acme.test/v1/jobs/{job_id}", False),
        ("https://evil.example?@api.acme.test/v1/jobs/{job_id}", False),
        ("https://evil.example\\@api.acme.test/v1/jobs/{job_id}", False),
        ("https://api%2eacme.test/v1/jobs/{job_id}", False),  # percent-encoding in the host
        ("https://api.acme.test%2f@evil.example/v1/jobs/{job_id}", False),
        ("https://{job_id}.api.acme.test/v1/jobs", False),  # the job id in the host
        ("https://api.acme.test:{job_id}/v1/jobs", False),
        ("https://api.acme.test.evil.example/v1/jobs/{job_id}", False),
        ("https://api.acme.test:8443/v1/jobs/{job_id}", False),  # another port
        ("http://api.acme.test/v1/jobs/{job_id}", False),  # another scheme
        ("https://[::1]/v1/jobs/{job_id}", False),
        ("https://api.acme.test../v1/jobs/{job_id}", False),
    ],
)
def test_url_tricks_are_judged_by_the_origin_they_reach(status_url, accepted, settings):
    settings.PROVIDER_CREDENTIAL_ORIGINS = f"PROVIDER_ACME_TOKEN={BOUND}"
    result = validate_profile(raw=valid_raw(status_url=status_url, credential_env="PROVIDER_ACME_TOKEN"))
    assert not isinstance(result, list) if accepted else isinstance(result, list), result
    if not accepted:
        assert {problem.key for problem in result} == {"status_url"}


def test_ipv6_origins_compare_in_canonical_form(settings):
    settings.PROVIDER_CREDENTIAL_ORIGINS = "PROVIDER_ACME_TOKEN=http://[::1]:8080"
    cancel = "http://[::1]:8080/jobs/{job_id}/cancel"
    for url, accepted in (
        ("http://[0:0:0:0:0:0:0:1]:8080/jobs/{job_id}", True),
        ("http://[::0001]:8080/jobs/{job_id}", True),
        ("http://[::1]:8081/jobs/{job_id}", False),
        ("http://[fe80::1%25lo]:8080/jobs/{job_id}", False),
        ("http://[::ffff:127.0.0.1]:8080/jobs/{job_id}", False),
    ):
        result = validate_profile(raw=valid_raw(status_url=url, cancel_url=cancel))
        assert isinstance(result, list) is not accepted, (url, result)


# --- the worker: nothing sent, nothing charged, a card in fixed words ---------------------------------------


def assert_refused_without_sending(op: Operation, thief: Listener, *, words: str) -> None:
    op = reload(op)
    assert thief.authorizations == []
    assert op.status == Status.NEEDS_ATTENTION
    assert op.status_requests_used == 0 and not StatusCheck.objects.filter(operation=op).exists()
    card = refused_card(op)
    assert card.reason == Reason.DESTINATION_NOT_ALLOWED and card.detail == words
    opened = AuditEntry.objects.get(operation_id=op.pk, type="escalation.opened")
    assert json.loads(bytes(opened.body))["data"]["detail"] == words


@pytest.mark.django_db
def test_a_worker_never_sends_the_credential_to_a_host_its_variable_is_not_bound_to(
    make_profile, make_operation, thief, fake_provider, clock, rng
):
    # Written straight to the database, as a row from before the rule (or edited there) would be.
    profile = make_profile(status_url=steal(thief), cancel_url=f"{thief.url}/steal/{{job_id}}/cancel")
    op = make_operation(job_id("never_finishes"), provider=profile)
    assert poll_once(operation_id=op.pk, fence=reload(op).fence, rng=rng) == PollResult.ESCALATED
    words = destination_words(refusal=Refusal.NOT_BOUND, credential_env="PROVIDER_FAKE_TOKEN", origin=thief.url)
    assert words == (
        f"not sent — destination not allowed: PROVIDER_CREDENTIAL_ORIGINS does not bind PROVIDER_FAKE_TOKEN to "
        f"{thief.url}"
    )
    assert_refused_without_sending(op, thief, words=words)


@pytest.mark.postgres
@pytest.mark.django_db
def test_as_the_application_role_a_worker_still_sends_nothing_to_an_unbound_host(
    make_profile, make_operation, thief, fake_provider, app_role, rng
):
    # Whatever the application role may write (profiles, operations), no row widens where a credential goes.
    profile = make_profile(status_url=steal(thief))
    op = make_operation(job_id("never_finishes"), provider=profile)
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        assert cursor.fetchone()[0] == app_role
    assert poll_once(operation_id=op.pk, fence=reload(op).fence, rng=rng) == PollResult.ESCALATED
    words = destination_words(refusal=Refusal.NOT_BOUND, credential_env="PROVIDER_FAKE_TOKEN", origin=thief.url)
    assert_refused_without_sending(op, thief, words=words)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "trick",
    [
        "http://127.0.0.1:{port}@THIEF/v1/jobs/{job_id}",
        "http://THIEF#@127.0.0.1:{port}/v1/jobs/{job_id}",
        "http://{job_id}.THIEF/v1/jobs",
        "http://127.0.0.1%3A{port}/v1/jobs/{job_id}",
    ],
)
def test_a_worker_refuses_url_tricks_in_a_stored_row(trick, make_profile, make_operation, thief, fake_provider, rng):
    thief_host = thief.url.removeprefix("http://")
    url = trick.replace("THIEF", thief_host).replace("{port}", str(fake_provider.port))
    op = make_operation(job_id("never_finishes"), provider=make_profile(status_url=url))
    assert poll_once(operation_id=op.pk, fence=reload(op).fence, rng=rng) == PollResult.ESCALATED
    assert thief.authorizations == [] and reload(op).status_requests_used == 0
    assert refused_card(op).detail.startswith("not sent — destination not allowed: ")


@pytest.mark.django_db
def test_a_group_of_polls_refuses_the_stolen_one_uncharged_and_polls_the_rest(
    make_profile, make_operation, thief, fake_provider, settings, rng
):
    settings.DISPATCH_TASK_SPREAD, settings.DISPATCH_POLLS_PER_TASK = 1, 4
    honest = [make_operation(job_id("slow_success", polls=0)) for _ in range(2)]
    stolen = make_operation(job_id("never_finishes"), provider=make_profile(status_url=steal(thief)))
    claims = dispatch.claim_due(owner="dispatcher@test:1", now=timezone.now())
    results = poll_claims(claims=[(c.operation_id, c.fence) for c in claims], rng=rng)
    by_id = dict(zip([c.operation_id for c in claims], results, strict=True))
    assert by_id[stolen.pk] == PollResult.ESCALATED
    assert all(by_id[op.pk] == PollResult.POLLED and reload(op).status == "succeeded" for op in honest)
    words = destination_words(refusal=Refusal.NOT_BOUND, credential_env="PROVIDER_FAKE_TOKEN", origin=thief.url)
    assert_refused_without_sending(stolen, thief, words=words)


@pytest.mark.django_db
def test_a_profile_edited_after_its_operations_exist_is_refused_at_the_next_poll(
    make_profile, make_operation, thief, fake_provider, admin_client, clock, rng
):
    profile = make_profile()
    op = make_operation(job_id("never_finishes"), provider=profile)
    assert poll_once(operation_id=op.pk, fence=reload(op).fence, rng=rng) == PollResult.POLLED
    used = reload(op).status_requests_used
    # Through the admin: refused, nothing written.
    current = {name: "" if value is None else value for name, value in model_to_dict(profile).items()}
    edited = form_data(**{**current, "status_url": steal(thief)})
    response = admin_client.post(reverse("admin:operations_providerprofile_change", args=(profile.pk,)), edited)
    assert response.status_code == 200 and list(response.context["adminform"].form.errors) == ["status_url"]
    assert ProviderProfile.objects.get(pk=profile.pk).status_url == profile.status_url
    # Straight in the database (the workers notice the profile changed by its updated_at).
    ProviderProfile.objects.filter(pk=profile.pk).update(
        status_url=steal(thief), updated_at=profile.updated_at + timedelta(seconds=1)
    )
    clock.move_to(reload(op).next_poll_at, tick=False)
    assert poll_once(operation_id=op.pk, fence=reload(op).fence, rng=rng) == PollResult.ESCALATED
    assert thief.authorizations == [] and reload(op).status_requests_used == used
    assert refused_card(op).reason == Reason.DESTINATION_NOT_ALLOWED


@pytest.mark.django_db
@pytest.mark.parametrize("environment", ["elsewhere", "none"])
def test_a_worker_started_with_another_environment_refuses_to_send(
    environment, make_operation, fake_provider, settings, rng
):
    op = make_operation(job_id("never_finishes"))
    sent_before = len(fake_provider.requests(job_id=op.provider_job_id))
    if environment == "elsewhere":
        settings.PROVIDER_CREDENTIAL_ORIGINS = "PROVIDER_FAKE_TOKEN=https://api.acme.test"
        words = destination_words(
            refusal=Refusal.NOT_BOUND, credential_env="PROVIDER_FAKE_TOKEN", origin=fake_provider.base_url
        )
    else:
        settings.PROVIDER_CREDENTIAL_ORIGINS = ""
        words = destination_words(refusal=Refusal.NO_BINDING, credential_env="PROVIDER_FAKE_TOKEN")
        assert words == (
            "not sent — destination not allowed: PROVIDER_FAKE_TOKEN has no entry in PROVIDER_CREDENTIAL_ORIGINS, "
            "so it is sent to no provider"
        )
    assert poll_once(operation_id=op.pk, fence=reload(op).fence, rng=rng) == PollResult.ESCALATED
    assert len(fake_provider.requests(job_id=op.provider_job_id)) == sent_before
    assert reload(op).status_requests_used == 0 and refused_card(op).detail == words


@pytest.mark.django_db
def test_the_last_check_refuses_a_destination_made_around_the_poll(fake_provider, thief):
    # A Destination is made by check_destination; one made any other way is still not sent.
    made_by_hand = Destination(url=f"{thief.url}/steal/x", credential_env="PROVIDER_FAKE_TOKEN")
    raw = http.send_to_provider(method="GET", destination=made_by_hand, auth_scheme="Bearer")
    assert raw.transport_error == "destination_not_allowed" and thief.authorizations == []


# --- a cancel from the card ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_cancel_from_the_card_is_not_sent_where_the_credential_is_not_bound(
    make_profile, stopped_at, alice, thief, fake_provider, client
):
    profile = make_profile(cancel_url=f"{thief.url}/steal/{{job_id}}/cancel")
    esc = stopped_at(profile)
    result = escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=alice,
        option_id="cancel_at_provider",
        card_version=esc.version,
        comment="",
    )
    words = destination_words(refusal=Refusal.NOT_BOUND, credential_env="PROVIDER_FAKE_TOKEN", origin=thief.url)
    assert result.decision.provider_response["state"] == "not_allowed"
    assert result.decision.provider_response["detail"] == words
    assert result.message == f"Cancel {words}. The card stays open."
    assert cancel_words("not_allowed").label == "not sent — destination not allowed"
    assert thief.authorizations == []
    esc.refresh_from_db()
    assert esc.state == Escalation.State.OPEN and esc.operation.cancel_state == "not_allowed"
    client.force_login(alice)
    page = client.get(f"/operations/{esc.operation_id}/").content.decode()
    assert 'Cancel at the provider: <span class="cancel-outcome">not sent — destination not allowed</span>' in page
    assert f"Nothing was sent to the provider: {words}." in page


@pytest.mark.django_db
def test_an_agents_cancel_is_not_forwarded_where_the_credential_is_not_bound(make_profile, thief, fake_provider):
    from operations.agents.identities import agent_token_issue
    from operations.agents.registration import AgentRegistration, operation_register_for_agent
    from operations.agents.services import operation_cancel_by_agent
    from operations.tasks import forward_provider_cancel

    agent = agent_token_issue(name="report-bot").agent
    profile = make_profile(cancel_url=f"{thief.url}/steal/{{job_id}}/cancel")
    op = operation_register_for_agent(
        agent=agent, request=AgentRegistration(provider=profile.slug, provider_job_id=job_id("cancel_ok"))
    ).operation
    operation_cancel_by_agent(agent=agent, operation_id=op.pk, reason="not needed")
    forward_provider_cancel(op.pk)
    op = reload(op)
    assert thief.authorizations == [] and op.cancel_state == "not_allowed"
    assert op.error["message"] == (
        "The agent cancelled the watch; pollerdash stopped polling. pollerdash did not call the provider and will "
        "not: the profile's cancel address is not a destination the operator lets pollerdash send to (its "
        "credential is not bound to that address in PROVIDER_CREDENTIAL_ORIGINS, or it is not a public https "
        "address), so the job may still run at the provider; cancel it there if it must stop."
    )


@pytest.fixture
def stopped_at(make_operation, drive, clock):
    def make(profile: ProviderProfile) -> Escalation:
        op = make_operation(
            job_id("never_finishes"),
            provider=profile,
            deadline_at=timezone.now() + timedelta(seconds=11),
            max_status_requests=100,
        )
        drive(op)
        return Escalation.objects.select_related("operation").get(operation=op, state=Escalation.State.OPEN)

    return make


@pytest.fixture
def alice(django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username="alice", password="pw")
    user.groups.add(Group.objects.get_or_create(name="responder")[0])
    return user


# --- a profile without a credential: public addresses only, checked when sent --------------------------------


def uncredentialed(**overrides: object) -> dict[str, object]:
    """The example profile without a credential (its cancel URL is a public https address)."""
    raw = valid_raw(**overrides)
    del raw["credential_env"]
    return raw


@pytest.mark.parametrize(
    ("status_url", "problem"),
    [
        ("http://127.0.0.1:9/v1/{job_id}", "must use https"),
        ("https://10.0.0.8/v1/{job_id}", "points at a non-public address (10.0.0.8)"),
        ("https://localhost/v1/{job_id}", "names an internal host"),
        ("https://metadata.internal/v1/{job_id}", "names an internal host"),
        ("https://api.example.com:8080/v1/{job_id}", "must use port 443 or 8443"),
        ("https://[::ffff:169.254.169.254]/v1/{job_id}", "non-public address"),
        ("https://api.example.com/v1/{job_id}", None),
    ],
)
def test_a_profile_without_a_credential_may_only_reach_public_https_addresses(status_url, problem):
    result = validate_profile(raw=uncredentialed(status_url=status_url))
    if problem is None:
        assert not isinstance(result, list), result
    else:
        assert isinstance(result, list) and [p.key for p in result] == ["status_url"]
        assert problem in result[0].message and "PROVIDER_ALLOWED_ORIGINS" in result[0].message


def test_the_local_fake_provider_is_allowed_by_listing_its_origin(settings):
    url = "http://127.0.0.1:8765/v1/jobs/{job_id}"
    settings.PROVIDER_ALLOWED_ORIGINS = []
    assert isinstance(validate_profile(raw=uncredentialed(status_url=url)), list)
    settings.PROVIDER_ALLOWED_ORIGINS = ["http://127.0.0.1:8765"]
    assert not isinstance(validate_profile(raw=uncredentialed(status_url=url)), list)
    # The listing is for profiles without a credential: a credential still needs its binding.
    assert isinstance(validate_profile(raw=valid_raw(status_url=url, credential_env="PROVIDER_ACME_TOKEN")), list)


def fake_dns(monkeypatch: pytest.MonkeyPatch, address: str | None) -> None:
    """DNS is a boundary we do not own: the name resolves to `address` (None: to nothing)."""

    def getaddrinfo(host: str, port: object, *args: object, **kwargs: object) -> list[tuple]:
        if address is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, 443))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.django_db
def test_a_name_that_resolves_to_a_private_address_is_refused_when_sent_and_not_charged(
    make_profile, make_operation, monkeypatch, rng
):
    profile = make_profile(credential_env="", status_url="https://jobs.provider.example/v1/{job_id}")
    op = make_operation(job_id("never_finishes"), provider=profile)
    fake_dns(monkeypatch, "169.254.169.254")
    assert poll_once(operation_id=op.pk, fence=reload(op).fence, rng=rng) == PollResult.ESCALATED
    op = reload(op)
    assert op.status_requests_used == 0 and not StatusCheck.objects.filter(operation=op).exists()
    assert refused_card(op).detail == (
        "not sent — destination not allowed: https://jobs.provider.example resolves to a non-public address"
    )


def test_a_public_name_is_sent_to_the_address_it_was_checked_at(monkeypatch, settings):
    fake_dns(monkeypatch, "93.184.216.34")
    destination = check_destination(credential_env="", url="https://jobs.provider.example/v1/abc?x=1")
    assert destination.url == "https://93.184.216.34/v1/abc?x=1"
    assert destination.headers == {"Host": "jobs.provider.example"}
    assert destination.extensions == {"sni_hostname": "jobs.provider.example"}
    # A listed origin is sent as written (a provider on this host or network).
    settings.PROVIDER_ALLOWED_ORIGINS = ["http://127.0.0.1:8765"]
    assert check_destination(credential_env="", url="http://127.0.0.1:8765/v1/x").url == "http://127.0.0.1:8765/v1/x"
    with pytest.raises(DestinationRefused):
        check_destination(credential_env="", url="http://127.0.0.1:8766/v1/x")


def test_a_name_that_does_not_resolve_is_the_dns_error_it_always_was_without_a_second_lookup(monkeypatch):
    fake_dns(monkeypatch, None)
    destination = check_destination(credential_env="", url="https://jobs.provider.example/v1/abc")
    assert destination.unresolved
    # Were the name to resolve by now (to anything), it is still not looked up again unchecked.
    fake_dns(monkeypatch, "127.0.0.1")
    raw = http.send_to_provider(method="GET", destination=destination, auth_scheme="")
    assert raw.transport_error == "dns_error" and raw.http_status is None


# --- only the environment decides: the admin and the database cannot widen it -------------------------------


@pytest.mark.django_db
def test_nothing_an_admin_posts_or_a_table_holds_can_widen_the_binding(admin_client, thief, fake_provider, settings):
    binding = settings.PROVIDER_CREDENTIAL_ORIGINS
    stolen = form_data(slug="stolen", status_url=steal(thief), credential_env="PROVIDER_FAKE_TOKEN")
    for extra in (
        {"PROVIDER_CREDENTIAL_ORIGINS": f"PROVIDER_FAKE_TOKEN={thief.url}"},
        {"credential_origins": thief.url},
    ):
        response = admin_client.post(reverse("admin:operations_providerprofile_add"), {**stolen, **extra})
        assert response.status_code == 200 and "status_url" in response.context["adminform"].form.errors
    assert settings.PROVIDER_CREDENTIAL_ORIGINS == binding
    assert not ProviderProfile.objects.filter(slug="stolen").exists()
    # No table holds a binding: the binding lives in the environment of each process alone.
    from django.apps import apps

    stored = [
        f"{model._meta.label}.{field.name}"
        for model in apps.get_app_config("operations").get_models()
        for field in model._meta.get_fields()
        if "origin" in field.name.lower()
    ]
    assert stored == []


# --- start-up: an upgrade without the binding says so, naming each profile and variable -------------------------


@pytest.mark.django_db
def test_manage_py_check_names_each_profile_whose_credential_has_no_binding(make_profile, settings):
    make_profile(slug="acme-export")
    make_profile(slug="beta-renders", credential_env="PROVIDER_BETA_TOKEN")
    settings.PROVIDER_CREDENTIAL_ORIGINS = ""
    out, err = StringIO(), StringIO()
    call_command("check", stdout=out, stderr=err)
    text = out.getvalue() + err.getvalue()
    assert "pollerdash.W201" in text
    assert (
        "profile acme-export: credential_env: PROVIDER_FAKE_TOKEN has no entry in PROVIDER_CREDENTIAL_ORIGINS" in text
    )
    assert (
        "profile beta-renders: credential_env: PROVIDER_BETA_TOKEN has no entry in PROVIDER_CREDENTIAL_ORIGINS" in text
    )
    assert "Destination not allowed" in text and CANARY not in text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("PROVIDER_ACME_TOKEN=sk-live-pasted-secret-123", "origin 1 of PROVIDER_ACME_TOKEN must start with http://"),
        ("sk-live-pasted-secret-123", "PROVIDER_CREDENTIAL_ORIGINS entry 1 is not NAME=origin"),
        ("PROVIDER_A=https://a.example/v1?k=sk-live-pasted-secret-123", "must be an origin only"),
        ("PROVIDER_A=https://a.example;PROVIDER_A=https://b.example", "binds PROVIDER_A twice"),
    ],
)
def test_a_malformed_binding_stops_start_up_naming_the_entry_without_echoing_it(value, message, tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "SECRET_KEY": "test-only-not-secret",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "POLLERDASH_VAR_DIR": str(tmp_path),
        "PROVIDER_CREDENTIAL_ORIGINS": value,
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert message in result.stderr
    assert "sk-live-pasted-secret-123" not in result.stderr + result.stdout
