"""One vocabulary, checked everywhere (issue 25): every option kind and every outcome, decided through
the real services, then read on every surface a person or an agent reads — the card, the operation
page, the history, the printable reports, the CSV exports, the audit story, the notifications and
the agent API. None may name a decision "unknown" or show a raw option id where words belong
(operations/cards/words.py is the one vocabulary)."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.utils import timezone

from escalations.oncall.channels import email, pagerduty, slack_blocks, teams_webhook
from escalations.oncall.channels.base import Message
from escalations.oncall.facts import card_facts, card_status
from operations.audit.story import story_line
from operations.cards.options import Kind
from operations.cards.signin import PASSWORD, SignIn
from operations.decisions.bulk import Member, decide_bulk
from operations.decisions.services import escalation_decide
from operations.models import AuditEntry, Decision, Escalation, Operation
from operations.notify.rules import Event
from operations.providers.credentials import credentials_publish_all
from operations.representation import operation_object
from operations.vocabulary import CancelState, Reason
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db

# A decision named by a word nobody chose, or by the id a program uses. ("Unknown provider state"
# and "unknown state" are the words of the reason unknown_state.)
UNKNOWN = re.compile(r"unknown(?! (?:provider )?state)", re.IGNORECASE)
RAW_ID = re.compile(
    r"\b(?:extend|treat_as_pending):\d+m:\d+\b|\b(?:"
    + "|".join(kind.value for kind in Kind if "_" in kind.value)
    + r")\b"
)


class VisibleText(HTMLParser):
    """What a person reads on a page: its text, not its tags, attributes, scripts or styles."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style", "template"):
            self._hidden += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "template") and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def visible(html: str) -> str:
    parser = VisibleText()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def words_problems(where: str, text: str, *, machine_ids: bool = False) -> list[str]:
    """`machine_ids`: a payload for programs (PagerDuty's, the API's), whose reason fields are ids."""
    # The job ids are the agent's (here named after the fake provider's scenarios): data, not words.
    for job in Operation.objects.values_list("provider_job_id", flat=True):
        text = text.replace(job, "<job>")
    if machine_ids:
        text = text.replace('"unknown_state"', '"<reason>"')
    problems = []
    for pattern in (UNKNOWN, RAW_ID):
        for found in pattern.finditer(text):
            problems.append(f"{where}: {found.group(0)!r} in …{text[max(found.start() - 80, 0) : found.end() + 40]}…")
    return problems


def csv_words(content: bytes, *, id_columns: set[str]) -> str:
    """The CSV's cells but the columns that keep ids for programs (option, outcome, reason, …)."""
    rows = list(csv.DictReader(io.StringIO(content.decode())))
    return "\n".join(" | ".join(v for k, v in row.items() if k not in id_columns) for row in rows)


def decide(esc: Escalation, user, option: str, *, comment: str = "", version=None, sign_in=None):
    return escalation_decide(
        sign_in=sign_in or signed_in_now(),
        escalation_id=esc.pk,
        user=user,
        option_id=option,
        card_version=Escalation.objects.get(pk=esc.pk).version if version is None else version,
        comment=comment,
    )


@pytest.fixture
def every_decision(stopped, make_profile, make_operation, alice, bob, monkeypatch, settings, pump):
    """Every option kind and every outcome, through the real services: the operations they were taken on."""
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    ops: list[Operation] = []

    extended = stopped()
    stale_version = extended.version
    assert decide(extended, alice, "extend:15m:4", comment="vendor says 15 min").outcome == "applied"
    assert decide(extended, bob, "extend:15m:4", version=stale_version).refused  # refused — state changed
    ops.append(extended.operation)

    inspected = stopped()
    assert decide(inspected, alice, "inspect").outcome == "recorded"
    assert decide(inspected, alice, "keep_waiting").refused  # refused — option not offered
    old = SignIn(method=PASSWORD, at=timezone.now() - timedelta(hours=2))
    assert decide(inspected, alice, "close", sign_in=old).refused  # refused — needs a recent sign-in
    assert decide(inspected, alice, "close", comment="not needed any more").outcome == "applied"
    ops.append(inspected.operation)

    pending = stopped("unknown_state", params={"value": "needs_payment"})
    assert decide(pending, alice, "treat_as_pending:15m:4").outcome == "applied"
    ops.append(pending.operation)

    business = stopped(business_deadline_at=timezone.now() + timedelta(seconds=5), deadline_at=None)
    assert business.reason == Reason.BUSINESS_DEADLINE_PASSED
    assert decide(business, alice, "keep_waiting", comment="still useful").outcome == "applied"
    ops.append(business.operation)

    gated = stopped("slow_success", provider=make_profile(approval_mode="per_call"), params={"polls": 5})
    assert decide(gated, alice, "approve_one_check").outcome == "applied"
    ops.append(gated.operation)

    denied = stopped("auth_revoked", params={"accept": "rotated42"})
    monkeypatch.setenv("PROVIDER_FAKE_TOKEN", "new-token-rotated42")
    credentials_publish_all()
    assert decide(denied, alice, "retry_after_rotation").outcome == "applied"
    ops.append(denied.operation)

    accepted = stopped("succeeded_no_result")
    assert decide(accepted, alice, "accept_output").refused  # refused — comment required
    assert decide(accepted, alice, "accept_output", comment="checked by hand").outcome == "awaiting_second"
    pump()  # the other responders are told, before the second one confirms
    assert decide(accepted, alice, "accept_output", comment="again").refused  # needs a different responder
    assert decide(accepted, bob, "accept_output", comment="confirmed").outcome == "applied"
    ops.append(accepted.operation)

    confirmed = stopped("cancel_ok")
    assert decide(confirmed, alice, "cancel_at_provider", comment="withdrawn").outcome == "applied"
    ops.append(confirmed.operation)
    refused_cancel = stopped("cancel_unsupported")
    assert decide(refused_cancel, alice, "cancel_at_provider").outcome == "applied"
    assert decide(refused_cancel, bob, "close").outcome == "applied"
    ops.append(refused_cancel.operation)
    watched_twice = stopped("cancel_ok")
    make_operation(watched_twice.operation.provider_job_id)
    assert decide(watched_twice, alice, "cancel_at_provider").outcome == "applied"  # not sent
    ops.append(watched_twice.operation)

    # A bulk decision over two cards of the deadline group, and one refused whole.
    outage = [stopped(), stopped()]
    group_id = outage[0].group_id
    members = [Member(card.pk, Escalation.objects.get(pk=card.pk).version) for card in outage]
    bulk = decide_bulk(
        sign_in=signed_in_now(),
        group_id=group_id,
        user=alice,
        option_id="extend:60m:8",
        members=members,
        comment="outage",
        confirmed_count=2,
    )
    assert len(bulk.applied) == 2
    refused_whole = decide_bulk(
        sign_in=signed_in_now(),
        group_id=group_id,
        user=alice,
        option_id="inspect",
        members=members,
        comment="",
        confirmed_count=2,
    )
    assert refused_whole.refused_whole
    ops += [card.operation for card in outage]

    # Every outcome of the vocabulary was reached.
    outcomes = set(Decision.objects.values_list("outcome", flat=True))
    assert outcomes == {"applied", "refused", "awaiting_second", "recorded"}
    kinds = {option.split(":")[0] for option in Decision.objects.values_list("option", flat=True)}
    assert kinds == {kind.value for kind in Kind}
    states = set(Operation.objects.exclude(cancel_state="").values_list("cancel_state", flat=True))
    assert states >= {CancelState.CONFIRMED, CancelState.NOT_SUPPORTED, CancelState.NOT_FORWARDED}
    return ops


def test_every_option_and_outcome_reads_in_words_on_every_surface(
    every_decision, alice, client: Client, pump, mailoutbox
) -> None:
    client.force_login(alice)
    problems: list[str] = []

    def page(url: str, **headers: str) -> str:
        response = client.get(url, **headers)
        assert response.status_code == 200, url
        return visible(response.content.decode())

    # The dashboard: the inbox, each card, each operation page (card, decisions, story) and its report.
    problems += words_problems("inbox", page("/"))
    for op in every_decision:
        problems += words_problems(f"operation page {op.pk}", page(f"/operations/{op.pk}/"))
        problems += words_problems(f"operation report {op.pk}", page(f"/operations/{op.pk}/report/"))
        for esc in Escalation.objects.filter(operation=op):
            problems += words_problems(f"card {esc.pk}", page(f"/cards/{esc.pk}/", HTTP_HX_REQUEST="true"))
    groups = set(Escalation.objects.exclude(group=None).values_list("group_id", flat=True))
    for group_id in groups:
        problems += words_problems(f"group {group_id}", page(f"/groups/{group_id}/"))
    # The history, its printable report and its exports.
    problems += words_problems("history", page("/history/"))
    problems += words_problems("history report", page("/history/report/"))
    ids = {"option", "outcome", "reason", "refusal_reason", "operation_id", "provider", "kind", "event"}
    problems += words_problems(
        "decisions.csv", csv_words(b"".join(client.get("/history/decisions.csv")), id_columns=ids)
    )
    activity = b"".join(client.get("/history/card-activity.csv"))
    problems += words_problems("card-activity.csv", csv_words(activity, id_columns=ids))

    # The audit story, entry by entry (the operation page shows the latest; the report all of them).
    for seq, body in AuditEntry.objects.order_by("pk").values_list("seq", "body"):
        problems += words_problems(f"story entry {seq}", story_line(seq=seq, body=bytes(body)).text)

    # What on-call is sent about each card: email, Slack, PagerDuty, Teams (with the card's status as it is now).
    now = timezone.now()
    for esc in Escalation.objects.all():
        facts = card_facts(escalation=esc, now=now)
        status = card_status(escalation=esc, now=now)
        level = Message(event=Event.LEVEL, address="x@example.test", head="", intro="", first=True, last=False, now=now)
        message = email.card_email(level, facts=facts)
        problems += words_problems(f"email {esc.pk}", f"{message.subject}\n{message.text}\n{visible(message.html)}")
        blocks = slack_blocks.card_message(facts=facts, status=status, interactive=True)
        problems += words_problems(f"slack {esc.pk}", json.dumps(blocks, ensure_ascii=False))
        event = pagerduty.trigger_event(facts=facts, instance="test")
        problems += words_problems(f"pagerduty {esc.pk}", json.dumps(event, ensure_ascii=False), machine_ids=True)
        card = teams_webhook.card_card(facts=facts, head="Decision needed", now=now)
        problems += words_problems(f"teams {esc.pk}", json.dumps(card, ensure_ascii=False))

    # And what was actually sent: each card's "Decision needed", the acceptance waiting for a second responder.
    assert any("Second responder needed" in message.subject for message in mailoutbox)
    for message in mailoutbox:
        html = "".join(content for content, _ in getattr(message, "alternatives", []))
        problems += words_problems(
            f"sent email {message.subject!r}", f"{message.subject}\n{message.body}\n{visible(html)}"
        )

    # The agent API's Operation object.
    for op in every_decision:
        op = Operation.objects.select_related("provider").get(pk=op.pk)
        shown = json.dumps(operation_object(op), ensure_ascii=False)
        problems += words_problems(f"API {op.pk}", shown, machine_ids=True)

    assert not problems, "\n".join(problems)
