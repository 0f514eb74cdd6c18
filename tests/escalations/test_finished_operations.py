"""A finished operation's page shows what is true now: no countdown, no next poll or lease, and the
warnings of the polls it no longer makes kept apart from those that are still news."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from operations.lifecycle.agents import warn_callback_failed
from operations.models import CallbackDelivery, Operation
from tests.support import job_id

pytestmark = pytest.mark.django_db


def test_a_finished_operation_shows_no_pending_facts_and_keeps_old_warnings_apart(
    make_operation, drive, viewer
) -> None:
    op = make_operation(job_id("bad_hint", value=-1, polls=2), business_deadline_at=timezone.now() + timedelta(hours=2))
    drive(op)
    op = Operation.objects.get(pk=op.pk)
    assert op.status == "succeeded" and op.warnings, op.warnings  # the ignored hint, from a poll
    while_watched = list(op.warnings)
    # After the end, a callback gives up: that warning is news.
    delivery = CallbackDelivery.objects.create(
        id="evt_test",
        operation=op,
        event_type="operation.completed",
        sequence=op.sequence,
        payload=b"{}",
        url="https://hooks.example.com/done",
        created_at=timezone.now(),
    )
    assert warn_callback_failed(delivery=delivery, reason="HTTP 500 eight times")

    client = Client()
    client.force_login(viewer)
    page = client.get(reverse("operation_detail", args=[op.pk])).content.decode()
    facts = page[page.index("<h2>Facts</h2>") : page.index("Status requests over time")]
    assert "Next poll" not in facts and "Lease" not in facts
    assert 'data-rel="countdown"' not in page
    assert "finished " in page and " before the business deadline" in page
    now_part, _, earlier_part = facts.partition("Earlier warnings")
    assert "callback evt_test (operation.completed) not delivered" in now_part
    assert all(escape(warning) in earlier_part and escape(warning) not in now_part for warning in while_watched)
    assert "from while it was watched (no longer current)" in earlier_part

    listing = client.get(reverse("operation_list")).content.decode()
    assert "none — done" in listing


def test_an_operation_still_watched_shows_its_countdowns_and_next_poll(make_operation, viewer) -> None:
    op = make_operation(job_id("never_finishes"), business_deadline_at=timezone.now() + timedelta(hours=2))
    client = Client()
    client.force_login(viewer)
    page = client.get(reverse("operation_detail", args=[op.pk])).content.decode()
    assert 'data-rel="countdown"' in page and "Next poll" in page and "Lease" in page
    assert "Earlier warnings" not in page
