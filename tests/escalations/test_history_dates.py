"""Days in the history's filters and export links: every day a database holds is searchable, and
anything else is a 400 naming the field on the page, both CSVs' sibling exports and the report."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import reverse

from operations.decisions.services import escalation_decide
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db

HISTORY_VIEWS = ["decision_history", "decision_history_csv", "decision_history_jsonl", "decision_history_report"]


def body(response) -> str:
    return (b"".join(response.streaming_content) if response.streaming else response.content).decode()


@pytest.fixture
def decided(stopped, alice):
    esc = stopped()
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    return esc


@pytest.mark.parametrize("view", HISTORY_VIEWS)
@pytest.mark.parametrize(
    ("query", "field", "said"),
    [
        ({"until": "9999-12-31"}, "until", "outside the days pollerdash can search"),
        ({"since": "2026-01-01", "until": "9999-12-31"}, "until", "outside the days pollerdash can search"),
        ({"since": "2026-02-30"}, "since", "not a real day"),
        ({"since": "not-a-date"}, "since", "not a day written YYYY-MM-DD"),
        ({"until": "+10000-01-01"}, "until", "not a day written YYYY-MM-DD"),
    ],
)
def test_a_day_that_cannot_be_searched_is_a_400_naming_the_field(client: Client, alice, view, query, field, said):
    client.force_login(alice)
    response = client.get(reverse(view), query)
    assert response.status_code == 400
    page = body(response)
    assert f"<strong>{field}</strong>" in page and said in page
    kept = {key: value for key, value in query.items() if key != field}
    back = reverse("decision_history") + (f"?{urlencode(kept)}" if kept else "")
    assert f'href="{back}"' in page  # the way back keeps the other filters


@pytest.mark.parametrize("view", HISTORY_VIEWS)
def test_the_first_and_last_searchable_days_reach_the_database(client: Client, alice, decided, signing_key, view):
    client.force_login(alice)
    response = client.get(reverse(view), {"since": "0001-01-01", "until": "9999-12-30"})
    assert response.status_code == 200
    assert decided.operation_id in body(response)
