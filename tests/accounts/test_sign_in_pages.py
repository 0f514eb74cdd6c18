"""Password sign-in and sessions: throttling with lockouts in the audit chain, session lifetime and idle
timeout, passwords switched off, the Content-Security-Policy on the sign-in pages, start-up checks,
and an unreachable identity provider costing single sign-on only."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.checks import run_checks
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import discovery, signins
from accounts.middleware import session_expiry_reason
from operations.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def ivy(settings: object) -> object:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    user = get_user_model().objects.create_user(username="ivy", password="pw-ivy")
    user.groups.add(Group.objects.get_or_create(name="responder")[0])
    return user


def log_in(client: Client, username: str, password: str, **extra: object):
    return client.post(reverse("login"), {"username": username, "password": password}, **extra)


def lockouts() -> list[dict]:
    bodies = AuditEntry.objects.filter(type="signin.locked_out").order_by("pk").values_list("body", flat=True)
    return [json.loads(bytes(body)) for body in bodies]


# --- throttling ---------------------------------------------------------------------------------------


def test_password_sign_in_locks_after_the_failure_limit_and_records_the_lockout_once(client, ivy, settings):
    settings.AXES_FAILURE_LIMIT = 3
    answers = [log_in(client, "ivy", "wrong").status_code for _ in range(3)]
    assert answers == [200, 200, 429]
    # Locked: even the right password is refused now, and saying so again records nothing new.
    answer = log_in(client, "ivy", "pw-ivy")
    assert answer.status_code == 429 and "Too many failed sign-ins" in answer.content.decode()
    assert "_auth_user_id" not in client.session
    [entry] = lockouts()
    assert entry["actor"] == {"kind": "system", "id": "sign-in throttle"}
    assert entry["data"] == {"username": "ivy", "ip_address": "127.0.0.1", "failures": 3, "locked_minutes": 15}


def test_a_lockout_is_for_that_username_from_that_address_only(client, ivy, settings):
    settings.AXES_FAILURE_LIMIT = 2
    for _ in range(2):
        log_in(client, "ivy", "wrong")
    other = get_user_model().objects.create_user(username="jack", password="pw-jack")
    assert log_in(client, "jack", "pw-jack").status_code == 302
    assert client.session["_auth_user_id"] == str(other.pk)
    # Ivy, on call from elsewhere, still gets in.
    assert log_in(Client(), "ivy", "pw-ivy", REMOTE_ADDR="10.0.0.7").status_code == 302


def test_the_lockout_passes_and_the_right_password_works_again(client, ivy, settings):
    settings.AXES_FAILURE_LIMIT = 2
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(2):
            log_in(client, "ivy", "wrong")
        assert log_in(client, "ivy", "pw-ivy").status_code == 429
        clock.shift(timedelta(minutes=16))
        assert log_in(client, "ivy", "pw-ivy").status_code == 302


# --- sessions -----------------------------------------------------------------------------------------


def test_an_idle_session_ends_and_live_refreshes_do_not_keep_it_alive(client, ivy, settings):
    settings.SESSION_IDLE_TIMEOUT_S = 30 * 60
    with time_machine.travel(timezone.now(), tick=False) as clock:
        log_in(client, "ivy", "pw-ivy")
        background = {"HX-Request": "true", "X-Pollerdash-Background": "1"}
        for _ in range(3):  # 30 minutes of a tab refreshing itself
            clock.shift(timedelta(minutes=10))
            assert client.get("/", headers=background).status_code == 200
        clock.shift(timedelta(minutes=10))
        refresh = client.get("/", headers=background)
        # The next refresh finds the session over and sends the whole page to the login.
        assert refresh.status_code == 401 and refresh["HX-Redirect"].startswith("/accounts/login/")
        answer = client.get(refresh["HX-Redirect"])
    assert "You were signed out after 30 minutes without activity." in answer.content.decode()


def test_activity_keeps_the_session_until_its_lifetime(client, ivy, settings):
    settings.SESSION_IDLE_TIMEOUT_S = 30 * 60
    settings.SESSION_LIFETIME_S = 2 * 3600
    with time_machine.travel(timezone.now(), tick=False) as clock:
        log_in(client, "ivy", "pw-ivy")
        for _ in range(5):  # someone clicking every 20 minutes, for 100 minutes
            clock.shift(timedelta(minutes=20))
            assert client.get("/").status_code == 200
        clock.shift(timedelta(minutes=25))  # 125 minutes after signing in
        answer = client.get("/", follow=True)
    assert "Your session ended 2 hours after you signed in." in answer.content.decode()


def test_a_live_refresh_does_not_write_the_session(client, ivy):
    with time_machine.travel(timezone.now(), tick=False) as clock:
        log_in(client, "ivy", "pw-ivy")
        active = client.session[signins.ACTIVE_AT]
        clock.shift(timedelta(minutes=5))
        client.get("/", headers={"HX-Request": "true", "X-Pollerdash-Background": "1"})
        assert client.session[signins.ACTIVE_AT] == active
        client.get("/")
        assert client.session[signins.ACTIVE_AT] == active + 300


def test_the_expiry_rule():
    assert session_expiry_reason(signed_in_at=0, active_at=3500, now=3600, lifetime_s=7200, idle_s=600) == ""
    assert "without activity" in session_expiry_reason(
        signed_in_at=0, active_at=0, now=601, lifetime_s=7200, idle_s=600
    )
    assert "after you signed in" in session_expiry_reason(
        signed_in_at=0, active_at=7200, now=7201, lifetime_s=7200, idle_s=600
    )


def test_a_password_sign_in_is_recorded_for_the_decisions_it_allows(client, ivy):
    log_in(client, "ivy", "pw-ivy")
    sign_in = signins.current(client.session)
    assert sign_in.method == "password" and timezone.now() - sign_in.at < timedelta(seconds=5)


def test_a_deactivated_account_is_signed_out_at_its_next_request(client, ivy):
    log_in(client, "ivy", "pw-ivy")
    ivy.is_active = False
    ivy.save()
    assert client.get("/")["Location"].startswith("/accounts/login/")


# --- passwords off; one sign-in page for the admin -----------------------------------------------------


def test_passwords_switched_off_show_no_form_and_refuse_a_post(client, ivy, settings):
    settings.PASSWORD_LOGIN_ENABLED = False
    settings.OIDC_ENABLED = True
    settings.AUTHENTICATION_BACKENDS = ["accounts.backends.ThrottleBackend", "accounts.backends.PermissionsOnlyBackend"]
    page = client.get(reverse("login")).content.decode()
    assert 'id="id_password"' not in page and "Sign in with single sign-on" in page
    answer = log_in(client, "ivy", "pw-ivy")
    assert answer.status_code == 403 and "Password sign-in is switched off" in answer.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_admin_signs_in_on_the_same_throttled_page(client):
    answer = client.get("/admin/login/?next=/admin/")
    assert answer.status_code == 302 and answer["Location"] == "/accounts/login/?next=/admin/"


# --- headers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/accounts/login/", "/accounts/login/?fresh=1", "/accounts/reauthenticate/", "/no-such-page"]
)
def test_sign_in_pages_send_the_content_security_policy(client, path):
    policy = client.get(path)["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy and "form-action 'self'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_the_lockout_page_sends_the_content_security_policy(client, ivy, settings):
    settings.AXES_FAILURE_LIMIT = 1
    answer = log_in(client, "ivy", "wrong")
    assert answer.status_code == 429 and "script-src 'self'" in answer["Content-Security-Policy"]


# --- start-up checks ------------------------------------------------------------------------------------


def check_ids() -> set[str]:
    return {message.id for message in run_checks(tags=["pollerdash"])}


def test_start_up_checks_name_what_sign_in_is_missing(settings):
    assert check_ids() == set()
    settings.OIDC_ENABLED = True
    settings.OIDC_OP_ISSUER = ""
    assert "pollerdash.E101" in check_ids()
    settings.OIDC_ENABLED = False
    settings.PASSWORD_LOGIN_ENABLED = False
    assert "pollerdash.E103" in check_ids()
    settings.OIDC_ENABLED, settings.OIDC_OP_ISSUER = True, "https://id.example.com"
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = "pollerdash", "s3cret-value"
    assert check_ids() == {"pollerdash.W101"}  # a group claim, but no groups mapped to roles


# --- the identity provider unreachable -------------------------------------------------------------------


@pytest.fixture
def unreachable_provider(settings: object) -> None:
    discovery.forget()
    settings.OIDC_ENABLED = True
    settings.OIDC_OP_ISSUER = "http://127.0.0.1:9"  # nothing listens there
    settings.OIDC_RP_CLIENT_ID = "pollerdash"
    settings.AUTHENTICATION_BACKENDS = [
        "accounts.backends.ThrottleBackend",
        "accounts.oidc.OIDCBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]


def test_with_the_provider_down_passwords_still_work_and_single_sign_on_says_why(client, ivy, unreachable_provider):
    assert log_in(client, "ivy", "pw-ivy").status_code == 302
    assert client.get("/").status_code == 200

    answer = client.get("/oidc/authenticate/?next=/")
    assert answer.status_code == 502
    page = answer.content.decode()
    assert "could not read the discovery document of http://127.0.0.1:9" in page
    # In words, not the socket's "[Errno 111] Connection refused".
    assert "Errno" not in page and "connection refused" in page and "is the provider running?" in page


def test_a_single_sign_on_session_keeps_working_while_the_provider_is_down(client, ivy, unreachable_provider):
    client.force_login(ivy, backend="accounts.oidc.OIDCBackend")
    assert client.get("/").status_code == 200


def test_single_sign_on_pages_do_not_exist_while_it_is_off(client):
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404
