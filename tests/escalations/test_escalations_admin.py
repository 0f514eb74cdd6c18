"""Admins can read cards and decisions in the Django admin, but never decide or edit there."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from operations.decisions.services import escalation_decide
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db


def test_cards_and_decisions_are_read_only_in_the_admin(client: Client, stopped, alice) -> None:
    esc = stopped()
    decision = escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    ).decision
    client.force_login(get_user_model().objects.create_superuser(username="root", password="x", email=""))
    for url in (
        "/admin/operations/escalation/",
        f"/admin/operations/escalation/{esc.pk}/change/",
        "/admin/operations/decision/",
        f"/admin/operations/decision/{decision.pk}/change/",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        assert b'name="_save"' not in response.content
    assert client.get("/admin/operations/decision/add/").status_code == 403
    assert client.post(f"/admin/operations/decision/{decision.pk}/delete/", {"post": "yes"}).status_code == 403
    assert b"credential_fingerprint" not in client.get(f"/admin/operations/escalation/{esc.pk}/change/").content


def test_old_admin_addresses_of_cards_and_decisions_still_lead_there(client: Client) -> None:
    client.force_login(get_user_model().objects.create_superuser(username="root", password="x", email=""))
    response = client.get("/admin/escalations/decision/?outcome=refused")
    assert response.status_code == 301
    assert response["Location"] == "/admin/operations/decision/?outcome=refused"
