"""A captured Slack click replayed to another web process changes nothing: the request is remembered
in the database, not in one process's memory (escalations/oncall/slack_replays.py)."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from demo.fakeslack import FakeSlack, interaction, signed
from escalations.oncall.channels.slack_blocks import ACK_ACTION_ID
from operations.decisions import ownership
from operations.models import AuditEntry, Escalation
from tests.integration.support import start_web
from tests.support import CANARY_SLACK_BOT, CANARY_SLACK_SECRET, job_id

pytestmark = [pytest.mark.integration]

TEAM, APP = "T0000000", "A0000000"


def test_a_click_replayed_to_a_second_web_process_after_a_give_back_changes_nothing(
    processes, make_operation, drive, clock
) -> None:
    alice = get_user_model().objects.create_user("alice", "alice@example.test")
    alice.groups.add(Group.objects.get_or_create(name="responder")[0])
    op = make_operation(job_id("never_finishes"), deadline_at=timezone.now() + timedelta(seconds=11))
    drive(op)
    card = Escalation.objects.get(operation=op, state=Escalation.State.OPEN)
    # The web processes sign-check with the real time.
    clock.move_to(time_machine.escape_hatch.time.time(), tick=True)

    chat = FakeSlack(bot_token=CANARY_SLACK_BOT).start()
    try:
        chat.state.users["U123"] = {
            "id": "U123",
            "team_id": TEAM,
            "profile": {"email": "alice@example.test"},
            "is_email_confirmed": True,
        }
        env = {
            "SLACK_SIGNING_SECRET": CANARY_SLACK_SECRET,
            "SLACK_BOT_TOKEN": CANARY_SLACK_BOT,
            "SLACK_TEAM_ID": TEAM,
            "SLACK_APP_ID": APP,
            "SLACK_API_URL": f"{chat.base_url}/api",
            "NOTIFY_ALLOWED_HOSTS": chat.base_url.removeprefix("http://"),
            "ALLOWED_HOSTS": "127.0.0.1",
        }
        _, first = start_web(processes, **env)
        _, second = start_web(processes, **env)

        body = interaction(
            user_id="U123",
            team_id=TEAM,
            app_id=APP,
            action_id=ACK_ACTION_ID,
            value=str(card.pk),
            response_url=chat.new_response_url(replaces="none"),
        )
        headers = signed(body=body, secret=CANARY_SLACK_SECRET, timestamp=int(time_machine.escape_hatch.time.time()))
        assert httpx.post(f"{first}/slack/interactions", content=body, headers=headers, timeout=30).status_code == 200
        assert Escalation.objects.get(pk=card.pk).acknowledged_by == alice

        ownership.card_unacknowledge(escalation_id=card.pk, user=alice)
        entries = AuditEntry.objects.count()
        replayed = httpx.post(f"{second}/slack/interactions", content=body, headers=headers, timeout=30)
        assert replayed.status_code == 200 and replayed.content == b""
        assert Escalation.objects.get(pk=card.pk).acknowledged_by is None
        assert AuditEntry.objects.count() == entries
        # And to the first process again.
        assert httpx.post(f"{first}/slack/interactions", content=body, headers=headers, timeout=30).status_code == 200
        assert Escalation.objects.get(pk=card.pk).acknowledged_by is None
    finally:
        chat.stop()
