"""Every authenticated dashboard response says `Cache-Control: no-store`; static files stay cacheable."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def no_store(response) -> bool:
    return "no-store" in response.get("Cache-Control", "")


def test_every_signed_in_page_fragment_and_export_is_no_store(client: Client, alice, stopped, signing_key, settings):
    settings.METRICS_TOKEN = "metrics-token-for-tests"
    esc = stopped()
    op = esc.operation_id
    client.force_login(alice)
    urls = [
        (reverse("inbox"), {}),
        (reverse("inbox"), {**HTMX, "HX-Target": "inbox-rows"}),
        (reverse("escalation_card", args=[esc.pk]), HTMX),
        (reverse("operation_list"), {}),
        (reverse("operation_detail", args=[op]), {}),
        (reverse("operation_report", args=[op]), {}),
        (reverse("operation_audit_jsonl", args=[op]), {}),
        (reverse("operation_checks_csv", args=[op]), {}),
        (reverse("operation_decisions_csv", args=[op]), {}),
        (reverse("decision_history"), {}),
        (reverse("decision_history_csv"), {}),
        (reverse("decision_history_jsonl"), {}),
        (reverse("decision_history_report"), {}),
        (reverse("system"), {}),
    ]
    for url, headers in urls:
        response = client.get(url, headers=headers)
        assert response.status_code == 200, url
        assert no_store(response), f"{url} may be cached: {response.get('Cache-Control')!r}"
    decided = client.post(reverse("escalation_decide", args=[esc.pk]), {"option": "close", "version": esc.version})
    assert decided.status_code == 303 and no_store(decided)
    metrics = Client().get(reverse("metrics"), headers={"Authorization": "Bearer metrics-token-for-tests"})
    assert metrics.status_code == 200 and no_store(metrics)


def test_static_files_stay_cacheable_for_a_signed_in_user(client: Client, alice) -> None:
    client.force_login(alice)
    response = client.get("/static/css/app.css")
    assert response.status_code == 200
    assert not no_store(response)
