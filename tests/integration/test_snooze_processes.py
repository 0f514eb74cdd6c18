"""A snooze with real processes: a responder snoozes a card's reminders from the Slack message
(a web process takes the click), and while the snooze runs the dispatcher and the worker send no
level and no repetition, though the policy would send one every two seconds; when it ends, the
reminders resume. The snooze's full hour under an injected clock is tests/escalations/test_snooze.py;
here its end is brought forward in the database, as the acknowledgement-timeout test does."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from operations.models import Escalation, NotificationDelivery, PolicyRun
from tests.escalations.test_slack_modal import snooze_click
from tests.integration.support import wait_until
from tests.integration.test_slack_modal_processes import CHANNEL, open_card, post, start_slack_world

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

WAIT_S = 2
POLICY = f"""
[[policy]]
name = "chat"
repeat_last_level = 10

[[policy.levels]]
wait_s = {WAIT_S}
targets = [{{ slack_channel = "{CHANNEL}" }}]

[[policy.levels]]
wait_s = {WAIT_S}
targets = [{{ user = "alice" }}]
"""


@pytest.fixture
def reminding_world(processes, make_profile, settings, tmp_path: Path):
    yield from start_slack_world(processes, make_profile, settings, tmp_path, policy=POLICY)


def reminders(card: Escalation, *, after: object) -> list[tuple[int, int, str]]:
    """The policy's steps sent after `after`: (level, repetition, channel); in-place updates and
    replies to a click are not reminders."""
    return list(
        NotificationDelivery.objects.filter(escalation=card, created_at__gt=after, event="level").values_list(
            "level", "repetition", "channel"
        )
    )


def test_a_snooze_from_slack_silences_the_reminders_until_its_end_and_they_resume_after(reminding_world) -> None:
    profile, chat, (web, _) = reminding_world
    card, _ = open_card(profile, chat)
    click = snooze_click(chat, card, 15)
    assert post(web, click).status_code == 200
    snoozed = wait_until(
        lambda: PolicyRun.objects.filter(pk=card.pk, snoozed_until__isnull=False).first(), timeout=30, what="the snooze"
    )
    assert snoozed.snoozed_until - timezone.now() > timedelta(minutes=14)
    since = timezone.now()
    # Without the snooze, three more steps would go out in this time.
    wait_until(lambda: (timezone.now() - since).total_seconds() > 3 * WAIT_S + 1, timeout=30, what="three policy waits")
    assert reminders(card, after=since) == []

    # The snooze's end, brought forward: the dispatcher reads the run's own clock.
    ended = timezone.now()
    assert PolicyRun.objects.get(pk=card.pk).next_step_at >= snoozed.snoozed_until  # held until the end
    PolicyRun.objects.filter(pk=card.pk).update(snoozed_until=ended, next_step_at=ended)
    Escalation.objects.filter(pk=card.pk).update(snoozed_until=ended)
    resumed = wait_until(lambda: reminders(card, after=ended), timeout=60, what="the reminders to resume")
    assert resumed
