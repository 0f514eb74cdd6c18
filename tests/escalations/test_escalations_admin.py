"""Admins can read cards and decisions in the Django admin, but never decide or edit there."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from escalations.services import escalation_decide

pytestmark = pytest.mark.django_db


def test_cards_and_decisions_are_read_only_in_the_admin(client: Client, stopped, alice) -> None:  # noqa: ANN001
    esc = stopped()
    decision = escalation_decide(escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version).decision
    client.force_login(get_user_model().objects.create_superuser(username="root", password="x", email=""))
    for url in (
        "/admin/escalations/escalation/",
        f"/admin/escalations/escalation/{esc.pk}/change/",
        "/admin/escalations/decision/",
        f"/admin/escalations/decision/{decision.pk}/change/",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        assert b'name="_save"' not in response.content
    assert client.get("/admin/escalations/decision/add/").status_code == 403
    assert client.post(f"/admin/escalations/decision/{decision.pk}/delete/", {"post": "yes"}).status_code == 403
    assert b"credential_fingerprint" not in client.get(f"/admin/escalations/escalation/{esc.pk}/change/").content
