"""Authorization matrix over every dashboard URL and method.

anonymous -> login redirect (htmx: 401 + HX-Redirect); no role -> 403; viewer -> reads, every
decision POST is 403 and records nothing; responder -> decides; a POST without a CSRF token -> 403.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from operations.models import BulkDecision, CardActivity, Decision, Escalation

pytestmark = pytest.mark.django_db

# Everything outside the dashboard has its own access rules: the admin, the sign-in pages (password
# and single sign-on), the agent API (bearer tokens) and static files.
# Signed webhooks (Slack, PagerDuty) and the API answer machines, not a signed-in person.
NOT_DASHBOARD = ("admin/", "accounts/", "oidc/", "api/", "static/", "metrics", "slack/", "pagerduty/")


@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str  # GET or POST
    kind: str  # read | decide
    htmx: bool = False


ENDPOINTS = [
    Endpoint("inbox", "GET", "read"),
    Endpoint("escalation_card", "GET", "read", htmx=True),
    Endpoint("escalation_decide", "POST", "decide"),
    Endpoint("escalation_assign", "POST", "decide"),
    Endpoint("escalation_acknowledge", "POST", "decide"),
    Endpoint("escalation_unacknowledge", "POST", "decide"),
    Endpoint("escalation_reassign", "POST", "decide"),
    Endpoint("escalation_note", "POST", "decide"),
    Endpoint("escalation_snooze", "POST", "decide"),
    Endpoint("card_group", "GET", "read"),
    Endpoint("card_group_acknowledge", "POST", "decide"),
    Endpoint("card_group_bulk", "POST", "decide"),
    Endpoint("decision_history", "GET", "read"),
    Endpoint("decision_history_csv", "GET", "read"),
    Endpoint("decision_history_jsonl", "GET", "read"),
    Endpoint("decision_history_activity_csv", "GET", "read"),
    Endpoint("decision_history_report", "GET", "read"),
    Endpoint("operation_list", "GET", "read"),
    Endpoint("operation_detail", "GET", "read"),
    Endpoint("operation_audit_jsonl", "GET", "read"),
    Endpoint("operation_checks_csv", "GET", "read"),
    Endpoint("operation_decisions_csv", "GET", "read"),
    Endpoint("operation_activity_csv", "GET", "read"),
    Endpoint("operation_report", "GET", "read"),
    Endpoint("system", "GET", "read"),
]


def dashboard_url_names() -> set[str]:
    names: set[str] = set()

    def walk(patterns: list, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if route.startswith(NOT_DASHBOARD):
                continue
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and pattern.name:
                names.add(pattern.name)

    walk(get_resolver().url_patterns, "")
    return names


@pytest.fixture
def card(stopped) -> Escalation:
    return stopped()


def url_for(endpoint: Endpoint, esc: Escalation) -> str:
    if endpoint.name.startswith("card_group"):
        return reverse(endpoint.name, args=[esc.group_id])
    if endpoint.name.startswith("escalation_"):
        return reverse(endpoint.name, args=[esc.pk])
    if endpoint.name.startswith("operation_") and endpoint.name != "operation_list":
        return reverse(endpoint.name, args=[esc.operation_id])
    return reverse(endpoint.name)


def post_data(endpoint: Endpoint, esc: Escalation) -> dict[str, str]:
    if endpoint.name == "escalation_decide":
        return {"option": "extend:15m:4", "version": str(esc.version)}
    if endpoint.name == "escalation_reassign":
        return {"to": "alice"}
    if endpoint.name == "escalation_note":
        return {"note": "on the phone with the vendor"}
    if endpoint.name == "escalation_snooze":
        return {"minutes": "15"}
    if endpoint.name == "card_group_bulk":
        return {"step": "apply", "option": "close", "card": f"{esc.pk}:{esc.version}", "confirm_count": "1"}
    return {"take": "1"}


def call(client: Client, endpoint: Endpoint, esc: Escalation, **extra: object):
    url = url_for(endpoint, esc)
    headers = {"HX-Request": "true"} if endpoint.htmx else {}
    if endpoint.method == "POST":
        return client.post(url, post_data(endpoint, esc), headers=headers, **extra)
    return client.get(url, headers=headers, **extra)


def test_the_matrix_covers_every_dashboard_url() -> None:
    known = {endpoint.name for endpoint in ENDPOINTS}
    # The System page belongs to the scheduling work; it is covered by the anonymous check below.
    assert dashboard_url_names() <= known, "a dashboard URL is missing from the matrix"


def test_anonymous_users_see_nothing_but_the_login_page(client: Client, card: Escalation) -> None:
    for endpoint in ENDPOINTS:
        for method in ("GET", "POST"):
            url = url_for(endpoint, card)
            response = client.get(url) if method == "GET" else client.post(url, post_data(endpoint, card))
            assert response.status_code == 302, (endpoint.name, method)
            assert response["Location"].startswith(reverse("login") + "?next="), endpoint.name
            htmx = client.generic(method, url, headers={"HX-Request": "true"})
            assert htmx.status_code == 401 and htmx["HX-Redirect"].startswith(reverse("login")), endpoint.name
    for name in dashboard_url_names() - {e.name for e in ENDPOINTS}:
        response = client.get(reverse(name))
        assert response.status_code == 302 and reverse("login") in response["Location"], name
    assert Decision.objects.count() == 0
    login = client.get(reverse("login"))
    assert login.status_code == 200 and b"Log in" in login.content


def test_a_signed_in_user_without_a_role_is_refused_everywhere(client: Client, make_user, card: Escalation) -> None:
    client.force_login(make_user("norole", role=None))
    for endpoint in ENDPOINTS:
        assert call(client, endpoint, card).status_code == 403, endpoint.name
    assert Decision.objects.count() == 0


def test_a_viewer_reads_everything_and_every_decision_post_is_403(
    client: Client,
    viewer,
    card: Escalation,
    signing_key,
) -> None:
    client.force_login(viewer)
    for endpoint in ENDPOINTS:
        response = call(client, endpoint, card)
        if endpoint.kind == "read":
            assert response.status_code == 200, endpoint.name
        else:
            assert response.status_code == 403, endpoint.name
    detail = client.get(reverse("operation_detail", args=[card.operation_id]))
    assert b"Needs a decision" in detail.content
    assert b'name="option"' not in detail.content and b"Deciding needs the" in detail.content
    assert Decision.objects.count() == 0 and not CardActivity.objects.exists() and not BulkDecision.objects.exists()
    assert Escalation.objects.get(pk=card.pk).assignee is None


def test_a_responder_reads_and_decides(client: Client, alice, card: Escalation, signing_key) -> None:
    client.force_login(alice)
    for endpoint in ENDPOINTS:
        if endpoint.kind == "read":
            assert call(client, endpoint, card).status_code == 200, endpoint.name
    assign = call(client, Endpoint("escalation_assign", "POST", "decide"), card)
    assert assign.status_code == 303 and Escalation.objects.get(pk=card.pk).assignee == alice
    decide = call(client, Endpoint("escalation_decide", "POST", "decide"), card)
    assert decide.status_code == 303
    assert decide["Location"].endswith(f"/operations/{card.operation_id}/#card-{card.pk}")
    assert Decision.objects.get(escalation=card).outcome == "applied"


def test_decision_endpoints_accept_only_post(client: Client, alice, card: Escalation) -> None:
    client.force_login(alice)
    for name in (
        "escalation_decide",
        "escalation_assign",
        "escalation_acknowledge",
        "escalation_unacknowledge",
        "escalation_reassign",
        "escalation_note",
        "escalation_snooze",
    ):
        assert client.get(reverse(name, args=[card.pk])).status_code == 405
    for endpoint in ENDPOINTS:
        if endpoint.kind == "read":
            assert client.post(url_for(endpoint, card)).status_code == 405, endpoint.name


def test_a_post_without_the_csrf_token_is_403_and_records_nothing(alice, card: Escalation) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    for endpoint in ENDPOINTS:
        if endpoint.method == "POST":
            response = call(client, endpoint, card)
            assert response.status_code == 403, endpoint.name
    assert Decision.objects.count() == 0 and not CardActivity.objects.exists() and not BulkDecision.objects.exists()
    # The same POST with the token from the page goes through.
    page = client.get(reverse("operation_detail", args=[card.operation_id]))
    token = page.context["csrf_token"]
    response = client.post(
        reverse("escalation_decide", args=[card.pk]),
        {"option": "close", "version": str(card.version), "csrfmiddlewaretoken": str(token)},
    )
    assert response.status_code == 303 and Decision.objects.get().option == "close"
