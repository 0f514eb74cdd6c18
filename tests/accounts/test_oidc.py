"""Single sign-on against the real test OpenID Provider, without a browser: the provider's sign-in form
is filled over HTTP (tests/oidc_provider/fixture.py `authorize`) and the callback is our test client.
What must be refused is refused with its reason and changes nothing; what the provider says about a
person's groups becomes their roles, recorded in the audit chain with the provider as the actor."""

from __future__ import annotations

import html
import json
from dataclasses import replace
from datetime import timedelta
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from accounts import discovery, signins
from accounts.models import ExternalIdentity
from operations.decisions.check import fresh_sign_in_refusal
from operations.models import AuditEntry

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def sso(client: Client, op: object, username: str, *, next_url: str = "/", fresh: bool = False):
    """Sign in through the provider; returns our callback's answer."""
    query = {"next": next_url} | ({"fresh": "1"} if fresh else {})
    start = client.get(f"/oidc/authenticate/?{urlencode(query)}")
    assert start.status_code == 302, start.content
    back = urlsplit(op.authorize(start["Location"], username=username))
    assert back.netloc == "testserver" and back.path == "/oidc/callback/"
    return client.get(f"{back.path}?{back.query}")


def text(answer: object) -> str:
    return html.unescape(answer.content.decode())


def signed_in_as(client: Client) -> str | None:
    user_id = client.session.get("_auth_user_id")
    return None if user_id is None else get_user_model().objects.get(pk=user_id).get_username()


def entries(entry_type: str) -> list[dict]:
    bodies = AuditEntry.objects.filter(type=entry_type).order_by("pk").values_list("body", flat=True)
    return [json.loads(bytes(body)) for body in bodies]


def test_the_authorization_request_uses_pkce_a_nonce_and_a_state(client, oidc):
    start = client.get("/oidc/authenticate/?next=/history/")
    params = parse_qs(urlsplit(start["Location"]).query)
    assert start["Location"].startswith(oidc.discovery["authorization_endpoint"])
    assert params["code_challenge_method"] == ["S256"] and params["code_challenge"][0]
    assert params["nonce"][0] and params["state"][0] and params["client_id"] == [oidc.client_id]
    assert "prompt" not in params  # only a fresh sign-in asks the provider to ask again


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("iss", "Invalid issuer"),
        ("expired", "Signature has expired"),
        ("nonce", "the nonce does not match this sign-in"),
        ("unknown_kid", "Could not find a valid JWKS"),
        ("aud", "Audience doesn't match"),
        ("signature", "Signature verification failed"),
    ],
)
def test_an_id_token_that_cannot_be_trusted_is_refused_and_changes_nothing(client, oidc, tamper, reason, caplog):
    oidc.put_user(f"mallory-{tamper}", groups=["pd-admins"], tamper=tamper)
    answer = sso(client, oidc, f"mallory-{tamper}")

    assert answer.status_code == 403
    assert reason in text(answer)
    assert signed_in_as(client) is None
    assert not get_user_model().objects.filter(username=f"mallory-{tamper}").exists()
    assert not AuditEntry.objects.filter(type__startswith="user.").exists()
    assert any("single sign-on refused" in record.getMessage() for record in caplog.records)


def test_the_group_claim_gives_and_takes_roles_and_each_change_is_recorded(client, oidc):
    oidc.put_user("bob", groups=["oncall"])
    assert sso(client, oidc, "bob").status_code == 302 and signed_in_as(client) == "bob"
    bob = get_user_model().objects.get(username="bob")
    assert set(bob.groups.values_list("name", flat=True)) == {"responder", "viewer"}

    client.logout()
    oidc.put_user("bob", groups=["watchers"])
    sso(client, oidc, "bob")
    assert set(bob.groups.values_list("name", flat=True)) == {"viewer"}
    client.logout()
    oidc.put_user("bob", groups=["watchers", "pd-admins"])
    sso(client, oidc, "bob")
    bob.refresh_from_db()
    assert bob.is_superuser and bob.is_staff

    changes = entries("user.roles_changed")
    assert [entry["actor"] for entry in changes] == [{"kind": "oidc", "id": oidc.issuer}] * 2
    assert changes[0]["data"]["before"]["groups"] == ["responder", "viewer"]
    assert changes[0]["data"]["after"]["groups"] == ["viewer"]
    assert changes[1]["data"]["after"] == {"groups": ["responder", "viewer"], "is_staff": True, "is_superuser": True}
    assert len(entries("user.created")) == 1
    assert ExternalIdentity.objects.filter(user=bob).count() == 1


def test_a_role_without_provider_groups_mapped_is_left_as_the_admin_set_it(client, oidc, settings):
    settings.OIDC_ADMIN_GROUPS = []
    oidc.put_user("root", groups=["oncall"])
    sso(client, oidc, "root")
    root = get_user_model().objects.get(username="root")
    root.is_superuser = root.is_staff = True
    root.save()
    client.logout()
    sso(client, oidc, "root")
    root.refresh_from_db()
    assert root.is_superuser  # the provider does not decide who is admin here


def test_an_existing_local_account_is_never_taken_over(client, oidc):
    henry = get_user_model().objects.create_user(username="henry", password="pw-henry")
    henry.groups.add(Group.objects.get_or_create(name="responder")[0])
    oidc.put_user("henry", groups=["pd-admins"])
    answer = sso(client, oidc, "henry")

    assert answer.status_code == 403
    assert "an account named 'henry' already exists here" in text(answer)
    assert signed_in_as(client) is None
    henry.refresh_from_db()
    assert not henry.is_superuser and not ExternalIdentity.objects.exists()


def test_a_deactivated_person_cannot_sign_in_again_and_their_session_ends(client, oidc):
    oidc.put_user("leaver", groups=["oncall"])
    sso(client, oidc, "leaver")
    assert client.get("/").status_code == 200
    get_user_model().objects.filter(username="leaver").update(is_active=False)
    assert client.get("/")["Location"].startswith("/accounts/login/")

    answer = sso(client, oidc, "leaver")
    assert answer.status_code == 403 and "is deactivated here" in text(answer)


def test_a_fresh_sign_in_needs_the_provider_to_have_asked_again(client, oidc):
    # This provider answers prompt=login with an auth_time a day old: it did not ask again.
    oidc.put_user("frank", groups=["oncall"], tamper="stale_auth_time")
    assert sso(client, oidc, "frank").status_code == 302
    first = signins.current(client.session)

    start = client.get("/oidc/authenticate/?next=/&fresh=1")
    params = parse_qs(urlsplit(start["Location"]).query)
    assert params["prompt"] == ["login"] and params["max_age"] == ["900"]
    back = urlsplit(oidc.authorize(start["Location"], username="frank"))
    answer = client.get(f"{back.path}?{back.query}")

    assert answer.status_code == 403 and "did not ask you to sign in again" in text(answer)
    assert signed_in_as(client) == "frank"  # still signed in, with the old sign-in
    assert signins.current(client.session) == first


def test_a_fresh_sign_in_moves_the_recorded_sign_in_time(client, oidc):
    oidc.put_user("gina", groups=["oncall"])
    sso(client, oidc, "gina")
    session = client.session
    old = signins.current(session)
    session[signins.SIGN_IN] = replace(old, at=old.at - timedelta(hours=2)).as_record()
    session.save()

    assert sso(client, oidc, "gina", fresh=True).status_code == 302
    fresh = signins.current(client.session)
    assert timezone.now() - fresh.at < timedelta(minutes=1)
    assert (fresh.method, fresh.issuer, fresh.subject) == ("oidc", oidc.issuer, "testop-gina")


def test_cancelling_at_the_provider_keeps_the_session(client, oidc):
    oidc.put_user("kim", groups=["oncall"])
    sso(client, oidc, "kim")
    start = client.get("/oidc/authenticate/?next=/&fresh=1")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    answer = client.get(f"/oidc/callback/?error=access_denied&state={state}")
    assert answer.status_code == 400 and "the identity provider answered: access_denied" in text(answer)
    assert signed_in_as(client) == "kim"


def test_a_callback_this_session_did_not_start_is_refused(client, oidc):
    answer = client.get("/oidc/callback/?code=stolen&state=not-ours")
    assert answer.status_code == 400 and "started elsewhere or has expired" in text(answer)


def test_a_password_lockout_from_the_same_address_does_not_block_single_sign_on(client, oidc, settings):
    settings.AXES_FAILURE_LIMIT = 2
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    get_user_model().objects.create_user(username="lou", password="pw-lou")
    for _ in range(2):
        client.post("/accounts/login/", {"username": "lou", "password": "wrong"})
    assert client.post("/accounts/login/", {"username": "lou", "password": "pw-lou"}).status_code == 429

    oidc.put_user("lou-sso", groups=["oncall"])
    assert sso(client, oidc, "lou-sso").status_code == 302 and signed_in_as(client) == "lou-sso"


def test_signing_out_sends_the_browser_to_the_provider_with_the_id_token(client, oidc):
    oidc.put_user("nina", groups=["watchers"])
    sso(client, oidc, "nina")
    id_token = client.session["oidc_id_token"]
    answer = client.post("/accounts/logout/")

    target = urlsplit(answer["Location"])
    assert answer["Location"].startswith(oidc.discovery["end_session_endpoint"])
    assert parse_qs(target.query)["id_token_hint"] == [id_token]
    assert parse_qs(target.query)["post_logout_redirect_uri"] == ["http://testserver/accounts/login/"]
    assert signed_in_as(client) is None


def test_a_discovery_document_naming_another_issuer_is_refused(client, oidc, settings):
    # Reached through another name than the one it calls itself: not the provider we were told.
    settings.OIDC_OP_ISSUER = oidc.issuer.replace("127.0.0.1", "localhost")
    discovery.forget()
    answer = client.get("/oidc/authenticate/?next=/")
    assert answer.status_code == 502
    assert f"names issuer '{oidc.issuer}'" in text(answer)


@pytest.mark.parametrize(
    "tamper", ["future_auth_time", "text_auth_time", "bool_auth_time", "nan_auth_time", "huge_auth_time"]
)
def test_an_auth_time_that_is_not_a_plausible_time_is_refused_and_changes_nothing(client, oidc, tamper):
    oidc.put_user(f"odd-{tamper}", groups=["oncall"], tamper=tamper)
    answer = sso(client, oidc, f"odd-{tamper}")

    assert answer.status_code == 403 and "auth_time" in text(answer)
    assert signed_in_as(client) is None
    assert not get_user_model().objects.filter(username=f"odd-{tamper}").exists()


def test_a_sign_in_without_auth_time_is_recorded_without_a_time_and_is_never_fresh(client, oidc):
    oidc.put_user("ines", groups=["oncall"], tamper="no_auth_time")
    assert sso(client, oidc, "ines").status_code == 302
    sign_in = signins.current(client.session)
    assert (sign_in.method, sign_in.at, sign_in.subject) == ("oidc", None, "testop-ines")
    assert fresh_sign_in_refusal(sign_in=sign_in, now=timezone.now()) is not None

    # Asked with max_age, a conforming provider must say when: then it is fresh.
    assert sso(client, oidc, "ines", fresh=True).status_code == 302
    fresh = signins.current(client.session)
    assert fresh.at is not None and fresh_sign_in_refusal(sign_in=fresh, now=timezone.now()) is None


@pytest.mark.parametrize(
    ("claimed", "reason"),
    [
        ("Responder", "differs only in case from the account 'responder'"),
        ("r\u0435sponder", "letters, digits"),  # a Cyrillic e
        ("ｒｅｓｐｏｎｄｅｒ", "letters, digits"),  # fullwidth: NFKC would make it "responder"
        ("system:unattributed", "letters, digits"),
        ("respo\nnder", "letters, digits"),
        ("-responder", "start with a letter or a digit"),
        ("x" * 151, "at most 150"),
    ],
    ids=["case", "cyrillic", "fullwidth", "system-actor", "line-break", "leading-dash", "long"],
)
def test_a_username_that_could_pass_for_another_is_refused_and_nothing_is_created(client, oidc, claimed, reason):
    get_user_model().objects.create_user(username="responder", password="pw-responder")
    oidc.put_user("mallory", groups=["oncall"], preferred_username=claimed, email="")
    answer = sso(client, oidc, "mallory")

    assert answer.status_code == 403
    page = text(answer)
    assert "the identity provider's username" in page and reason in page
    assert "\n" not in claimed or "respo\nnder" not in page  # shown escaped, never as a line break
    assert signed_in_as(client) is None
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["responder"]
    assert not ExternalIdentity.objects.exists()
    assert [entry["data"]["username"] for entry in entries("user.created")] == ["responder"]  # the local one only


def test_a_username_of_ascii_letters_digits_and_email_punctuation_is_created(client, oidc):
    oidc.put_user("paula", groups=["oncall"], preferred_username="paula.smith+oncall@example.test")
    assert sso(client, oidc, "paula").status_code == 302
    assert signed_in_as(client) == "paula.smith+oncall@example.test"


@pytest.mark.parametrize("verified", [False, None, "false", 1])
def test_an_email_the_provider_has_not_verified_is_not_kept_for_matching(client, oidc, verified):
    # Slack clicks are matched to accounts by email: an address anyone could type at the provider
    # must not make its holder "alice" here.
    oidc.put_user("victor", groups=["oncall"], email="alice@example.test", email_verified=verified)
    assert sso(client, oidc, "victor").status_code == 302
    assert get_user_model().objects.get(username="victor").email == ""


def test_a_verified_email_is_kept_and_an_unverified_one_later_clears_it(client, oidc):
    oidc.put_user("wanda", groups=["oncall"], email="wanda@example.test", email_verified=True)
    sso(client, oidc, "wanda")
    wanda = get_user_model().objects.get(username="wanda")
    assert wanda.email == "wanda@example.test"
    client.logout()
    oidc.put_user("wanda", groups=["oncall"], email="wanda@other.test", email_verified=False)
    sso(client, oidc, "wanda")
    wanda.refresh_from_db()
    assert wanda.email == ""


# --- the sign-in's own requests go through operations.infrastructure.outbound ---------------------------------------


class _Redirector:
    """Answers every request with a redirect to `target` (a key set or userinfo moved elsewhere)."""

    def __init__(self, target: str) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        hits = self.hits = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.headers.get("Accept-Encoding"))
                self.send_response(302)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/keys"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize(("setting", "field"), [("OIDC_OP_JWKS_ENDPOINT", "jwks_uri")])
def test_a_provider_endpoint_that_redirects_is_refused_not_followed(client, oidc, settings, setting, field):
    """mozilla-django-oidc's own requests followed redirects, asked for compressed answers and read
    them whole; they go through operations.infrastructure.outbound now, like the discovery document: a redirect is
    an answer, and the sign-in says the provider could not be read."""
    redirector = _Redirector(oidc.discovery[field])
    try:
        setattr(settings, setting, redirector.url)
        oidc.put_user("rita", groups=["oncall"])
        answer = sso(client, oidc, "rita")
        assert answer.status_code == 502
        assert f"could not read the key set {redirector.url}: it answered HTTP 302" in text(answer)
        assert redirector.hits == ["identity"] and signed_in_as(client) is None
    finally:
        redirector.stop()


def test_the_sign_in_talks_to_the_provider_only_through_the_outbound_module(client, oidc, monkeypatch):
    """The token, the key set and userinfo are each one request of purpose `oidc`; the library's own
    HTTP client (requests) is never used."""
    import requests

    from operations.infrastructure import outbound

    def no_requests(*args: object, **kwargs: object) -> None:
        raise AssertionError("mozilla-django-oidc's requests call was used")

    for method in ("get", "post", "request"):
        monkeypatch.setattr(requests, method, no_requests)
    seen: list[tuple[str, str]] = []
    real = outbound.send

    def recording(**kwargs: object) -> outbound.Answer:
        target = kwargs["target"]
        seen.append((str(target.purpose), str(target.url)))
        return real(**kwargs)

    monkeypatch.setattr(outbound, "send", recording)
    oidc.put_user("sam", groups=["oncall"])
    assert sso(client, oidc, "sam").status_code == 302 and signed_in_as(client) == "sam"
    assert {purpose for purpose, _ in seen} == {"oidc"}
    endpoints = [oidc.discovery[name] for name in ("token_endpoint", "jwks_uri", "userinfo_endpoint")]
    assert [url for _, url in seen if url in endpoints] == endpoints
