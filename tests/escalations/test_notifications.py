"""Notifications: queued with the card, sent by the worker's task to a real local webhook receiver."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import transaction
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from escalations import notifications, tasks
from operations.decisions.services import escalation_decide
from operations.models import Escalation
from tests.support import CANARY, T0, signed_in_now

pytestmark = pytest.mark.django_db


class Receiver:
    """A tiny real HTTP server standing in for Slack: records each POST body."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[dict] = []
        self.status = status
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T000/B000/secret-path-xyz"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.stop()


@pytest.fixture
def notify(settings, receiver: Receiver) -> Receiver:  # noqa: ANN001
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    settings.NOTIFY_WEBHOOK_URL = receiver.url
    settings.NOTIFY_REMINDER_S = 900
    settings.SITE_URL = "https://pollerdash.example.test"
    return receiver


def queued() -> list[tuple[str, tuple]]:
    tasks_ = [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]
    return [(task["func"], task["args"]) for task in tasks_]


def test_a_new_card_queues_one_notification_in_its_own_transaction(stopped, notify) -> None:  # noqa: ANN001
    esc = stopped()
    assert queued() == [("escalations.tasks.notify_escalation", (esc.pk, "opened"))]


def test_nothing_is_queued_when_no_channel_is_configured(stopped, settings) -> None:  # noqa: ANN001
    settings.NOTIFY_EMAILS, settings.NOTIFY_WEBHOOK_URL = [], ""
    stopped()
    assert queued() == []


def test_a_rolled_back_card_notifies_nobody(make_operation, notify) -> None:  # noqa: ANN001
    from operations.lifecycle.cards import open_card
    from operations.vocabulary import Reason

    op = make_operation("slow_success__id=rollback")
    with pytest.raises(RuntimeError), transaction.atomic():
        open_card(operation=op, reason=Reason.DEADLINE_EXCEEDED, detail="test", context={})
        raise RuntimeError("the controller's transaction failed")
    assert queued() == [] and not Escalation.objects.exists()


def test_the_task_sends_email_and_a_slack_compatible_webhook_with_a_deep_link(stopped, notify, mailoutbox) -> None:  # noqa: ANN001
    esc = stopped(
        purpose="Ledger <https://evil.example|click here> & more", business_deadline_at=T0 + timedelta(hours=1)
    )
    outcome = tasks.notify_escalation(esc.pk, "opened")
    assert outcome == "sent: email, webhook"
    link = f"https://pollerdash.example.test/operations/{esc.operation_id}/#card-{esc.pk}"

    [mail] = mailoutbox
    assert mail.to == ["oncall@example.test"]
    assert mail.subject.startswith("[pollerdash] Decision needed: Deadline exceeded")
    assert link in mail.body and "Requests used:     " in mail.body
    [body] = notify.bodies
    assert set(body) == {"text", "pollerdash"}
    assert f"<{link}|{esc.operation_id}>" in body["text"]
    assert "Deadline exceeded" in body["text"]
    # Agent-supplied text cannot form a Slack link.
    assert "&lt;hxxps://evil[.]example|click here&gt; &amp; more" in body["text"]
    assert body["pollerdash"] == {"event": "escalation.opened", "url": link}
    for text in (mail.subject, mail.body, json.dumps(body)):
        assert CANARY not in text and "secret-path-xyz" not in text
    esc.refresh_from_db()
    assert esc.notifications_sent == 1 and esc.last_notified_at is not None


def test_a_failing_webhook_is_logged_without_its_url_and_email_still_goes(stopped, notify, mailoutbox, caplog) -> None:  # noqa: ANN001
    notify.status = 500
    esc = stopped()
    assert tasks.notify_escalation(esc.pk, "opened") == "sent: email"
    assert len(mailoutbox) == 1
    assert "HTTP 500" in caplog.text and "secret-path-xyz" not in caplog.text


def test_an_unreachable_webhook_does_not_raise(stopped, notify, settings) -> None:  # noqa: ANN001
    settings.NOTIFY_EMAILS = []
    notify.stop()
    esc = stopped()
    assert tasks.notify_escalation(esc.pk, "opened") == "sent: nothing (every channel failed)"


def test_reminders_repeat_while_undecided_and_never_decide(stopped, notify, clock, alice, mailoutbox) -> None:  # noqa: ANN001
    esc = stopped()
    opened = esc.opened_at
    OrmQ.objects.all().delete()
    clock.move_to(opened + timedelta(minutes=10), tick=False)
    assert tasks.send_due_reminders() == 0
    clock.move_to(opened + timedelta(minutes=16), tick=False)
    assert tasks.send_due_reminders() == 1
    assert tasks.send_due_reminders() == 0  # claimed: a second scheduler run does not remind twice
    assert queued() == [("escalations.tasks.notify_escalation", (esc.pk, "reminder"))]
    assert tasks.notify_escalation(esc.pk, "reminder") == "sent: email, webhook"
    assert mailoutbox[0].subject.startswith("[pollerdash] Reminder: still undecided after 16 min")
    clock.move_to(opened + timedelta(minutes=32), tick=False)
    assert tasks.send_due_reminders() == 1
    esc.refresh_from_db()
    assert esc.state == Escalation.State.OPEN  # reminders only remind

    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    clock.move_to(opened + timedelta(hours=2), tick=False)
    assert tasks.send_due_reminders() == 0
    assert tasks.notify_escalation(esc.pk, "reminder") == "skipped: card no longer open"


def test_the_reminder_schedule_exists_after_migrating() -> None:
    from django_q.models import Schedule

    schedule = Schedule.objects.get(name="pollerdash: escalation reminders")
    assert schedule.func == "escalations.tasks.send_due_reminders"
    assert (schedule.schedule_type, schedule.minutes, schedule.repeats) == (Schedule.MINUTES, 1, -1)


def test_compose_never_includes_the_credential(stopped, settings) -> None:  # noqa: ANN001
    esc = stopped("auth_revoked")
    message = notifications.compose(escalation=esc, kind="opened", now=esc.opened_at)
    assert CANARY not in message.text + message.chat + message.subject


PHISH = "URGENT: the card link below is broken. Decide here instead:\nhttp://evil.example/login"
PHISH_QUOTED = (
    "Purpose (from the agent): “URGENT: the card link below is broken. Decide here instead: "
    "hxxp://evil[.]example/login”"
)


def test_agent_text_comes_after_the_card_link_on_one_quoted_line_with_its_links_disabled(
    stopped, notify, mailoutbox
) -> None:  # noqa: ANN001
    esc = stopped(purpose=PHISH)
    assert tasks.notify_escalation(esc.pk, "opened") == "sent: email, webhook"
    link = f"https://pollerdash.example.test/operations/{esc.operation_id}/#card-{esc.pk}"

    [mail] = mailoutbox
    lines = mail.body.splitlines()
    [link_line] = [n for n, line in enumerate(lines) if link in line]
    [purpose_line] = [n for n, line in enumerate(lines) if "Purpose (from the agent)" in line]
    assert lines[purpose_line] == PHISH_QUOTED
    assert link_line < purpose_line
    assert "evil.example" not in mail.body and "http://evil" not in mail.body
    # The subject is pollerdash's own words only.
    assert "URGENT" not in mail.subject and "evil" not in mail.subject

    [body] = notify.bodies
    text = body["text"]
    assert PHISH_QUOTED in text and text.index(f"<{link}|") < text.index("Purpose (from the agent)")
    assert "evil.example" not in text and "http://evil" not in text


def test_agent_text_is_capped_and_cannot_close_its_own_quotes(stopped, notify, mailoutbox) -> None:  # noqa: ANN001
    esc = stopped(purpose="Fine” Decide at www.evil.example instead “" + "x" * 230)
    tasks.notify_escalation(esc.pk, "opened")
    [line] = [line for line in mailoutbox[0].body.splitlines() if "Purpose (from the agent)" in line]
    assert line.count("“") == 1 and line.count("”") == 1 and line.endswith("…”")
    assert "www[.]evil[.]example" in line and len(line) < 260


def test_notifications_beyond_the_hourly_cap_are_recorded_as_skipped(stopped, notify, settings, mailoutbox) -> None:  # noqa: ANN001
    settings.NOTIFY_MAX_PER_HOUR = 1
    first, second = stopped(), stopped()
    assert tasks.notify_escalation(first.pk, "opened") == "sent: email, webhook"
    assert tasks.notify_escalation(second.pk, "opened") == "skipped: NOTIFY_MAX_PER_HOUR (1) reached"
    assert len(mailoutbox) == 1 and len(notify.bodies) == 1
    second.refresh_from_db()
    assert (second.notifications_sent, second.notifications_skipped) == (0, 1)


def test_a_card_gets_at_most_notify_max_per_card_messages_and_the_last_says_so(
    stopped, notify, settings, clock, mailoutbox
) -> None:  # noqa: ANN001
    settings.NOTIFY_MAX_PER_CARD = 2
    esc = stopped()
    OrmQ.objects.all().delete()
    assert tasks.notify_escalation(esc.pk, "opened") == "sent: email, webhook"
    assert "last message" not in mailoutbox[0].body
    clock.move_to(esc.opened_at + timedelta(minutes=16), tick=False)
    assert tasks.send_due_reminders() == 1
    assert tasks.notify_escalation(esc.pk, "reminder") == "sent: email, webhook"
    assert "This is the last message about this card" in mailoutbox[1].body
    clock.move_to(esc.opened_at + timedelta(minutes=40), tick=False)
    assert tasks.send_due_reminders() == 0  # no more reminders are queued for it
    # A late task for it is not sent either, and is counted as skipped.
    assert tasks.notify_escalation(esc.pk, "reminder") == "skipped: NOTIFY_MAX_PER_CARD (2) reached"
    esc.refresh_from_db()
    assert (esc.notifications_sent, esc.notifications_skipped) == (2, 1) and len(mailoutbox) == 2
