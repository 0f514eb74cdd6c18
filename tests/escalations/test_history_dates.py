"""Days in the history's filters and export links: every day a database holds is searchable, and
anything else is a 400 naming the field on the page, both CSVs' sibling exports and the report."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import reverse

from operations.decisions.services import escalation_decide
from tests.support import T0, signed_in_now

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


@pytest.fixture
def decided_at_t0(stopped, alice, time_machine):
    """A decision at 2026-12-01 10:00 UTC: 02:00 in Los Angeles, 00:00 on 2 December at Kiritimati."""
    time_machine.move_to(T0, tick=False)
    esc = stopped()
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    return esc


@pytest.mark.parametrize(
    ("query", "found"),
    [
        # Local minutes, as the history form's date-and-time fields send them with the browser's zone.
        ({"tz": "America/Los_Angeles", "since": "2026-12-01T01:59", "until": "2026-12-01T02:00"}, True),
        ({"tz": "America/Los_Angeles", "since": "2026-12-01T02:01"}, False),
        ({"tz": "America/Los_Angeles", "until": "2026-12-01T01:59"}, False),
        # A day is the whole local day: 10:00 UTC is already 2 December at UTC+14.
        ({"tz": "Pacific/Kiritimati", "since": "2026-12-01", "until": "2026-12-01"}, False),
        ({"tz": "Pacific/Kiritimati", "since": "2026-12-02", "until": "2026-12-02"}, True),
        ({"tz": "Asia/Tokyo", "since": "2026-12-01", "until": "2026-12-01"}, True),
        # Links without a zone keep meaning whole UTC days.
        ({"since": "2026-12-01", "until": "2026-12-01"}, True),
        ({"since": "2026-12-01T10:01"}, False),
    ],
)
def test_a_range_is_read_in_the_persons_time_zone(client: Client, alice, decided_at_t0, query, found):
    client.force_login(alice)
    for view in ("decision_history", "decision_history_csv"):
        response = client.get(reverse(view), query)
        assert response.status_code == 200
        assert (decided_at_t0.operation_id in body(response)) is found, (view, query)


@pytest.mark.parametrize(
    ("query", "field", "said"),
    [
        ({"tz": "Mars/Olympus", "since": "2026-12-01"}, "tz", "not a time zone this server knows"),
        ({"tz": "../../etc/passwd"}, "tz", "not a time zone name"),
        ({"since": "2026-12-01T25:00"}, "since", "not a real time of day"),
    ],
)
def test_a_zone_or_time_that_cannot_be_read_is_a_400_naming_the_field(client: Client, alice, query, field, said):
    client.force_login(alice)
    response = client.get(reverse("decision_history"), query)
    assert response.status_code == 400
    page = body(response)
    assert f"<strong>{field}</strong>" in page and said in page
