"""Every decision is an entry: an operation's whole life, against the real fake provider, ends up in
the log in order - and reads back as the timeline an incident reviewer sees."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from operations.audit.checkpoints import sign_checkpoint, verify_chain
from operations.audit.export import stream_export
from operations.audit.integrate import integrate_all
from operations.audit.story import operation_story, story_line
from operations.decisions.services import escalation_decide
from operations.models import AuditEntry, Escalation, Operation
from operations.vocabulary import Status
from tests.audit.helpers import verify_bytes
from tests.support import T0, job_id, signed_in_now

pytestmark = pytest.mark.django_db


def responder(name: str) -> object:
    user = get_user_model().objects.create_user(username=name, password=f"pw-{name}")
    user.groups.add(Group.objects.get_or_create(name="responder")[0])
    return user


def entries(op: Operation) -> list[dict]:
    integrate_all()
    rows = AuditEntry.objects.filter(operation_id=op.pk).order_by("seq").values_list("seq", "body")
    return [json.loads(bytes(body)) | {"seq": seq} for seq, body in rows]


@pytest.fixture
def lived(make_operation, drive, clock, signing_key) -> Operation:
    """Registered; a 503 with Retry-After; still running with the budget spent; a human inspects and
    extends, a decision on the card as it was before is refused; then the job succeeds."""
    alice, bob = responder("alice"), responder("bob")
    op = make_operation(job_id("retry_after_seconds", value=120, times=1), max_status_requests=2)
    drive(op)
    escalation = Escalation.objects.get(operation=op, state=Escalation.State.OPEN)
    seen_version = escalation.version
    clock.move_to(T0 + timedelta(minutes=10), tick=False)
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=escalation.pk, user=alice, option_id="inspect", card_version=seen_version
    )
    escalation.refresh_from_db()
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=escalation.pk,
        user=alice,
        option_id="extend:15m:4",
        card_version=escalation.version,
    )
    # bob acts on the card as he saw it before alice's decision: refused and recorded, never applied
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=escalation.pk,
        user=bob,
        option_id="extend:15m:4",
        card_version=seen_version,
    )
    drive(op)
    return Operation.objects.get(pk=op.pk)


def test_the_chain_holds_every_decision_in_order(lived):
    assert lived.status == Status.SUCCEEDED
    chain = entries(lived)
    assert [(e["type"], e["data"].get("decision") or e["data"].get("option")) for e in chain] == [
        ("operation.registered", None),
        ("controller.decision", "wait"),
        ("provider.paused", None),
        ("controller.decision", "escalate"),
        ("escalation.opened", None),
        ("human.inspect", None),
        ("human.decision", "extend:15m:4"),
        ("human.refused", "extend:15m:4"),
        ("controller.decision", "succeeded"),
    ]
    seqs = [e["seq"] for e in chain]
    assert seqs == sorted(seqs)
    registered, first, _, stop, opened, inspect, extend, refused, done = chain
    assert registered["data"]["max_requests"] == 2 and registered["actor"] == {"kind": "operator", "id": "test"}
    assert first["data"] | {"deadline": None, "provider_request_id": None} == {
        "state": "running",
        "next_poll_at": "2026-12-01T10:02:00.000000Z",
        "delay_source": "provider_retry_after",
        "delay_ms": 120_000,
        "request_count": 1,
        "max_requests": 2,
        "transport_failures": 1,
        "max_transport_failures": 3,
        "deadline": None,
        "http_status": 503,
        "provider_state": None,
        "provider_request_id": None,
        "retry_after": "120",
        "interpreted_state": "server_error",
        "decision": "wait",
        "reason": first["data"]["reason"],
    }
    assert first["at"] == "2026-12-01T10:00:00.000000Z"
    assert stop["data"]["http_status"] == 200 and stop["data"]["provider_state"] == "running"
    assert stop["data"]["reason"].startswith("request_budget_exhausted") and stop["data"]["request_count"] == 2
    assert opened["data"]["reason"] == "request_budget_exhausted" and opened["data"]["request_count"] == 2
    assert inspect["actor"] == {"kind": "user", "id": "alice"}
    assert extend["actor"] == {"kind": "user", "id": "alice"} and extend["data"]["outcome"] == "applied"
    assert extend["data"]["new_deadline"] == "2026-12-01T10:55:00.000000Z" and extend["data"]["new_max_requests"] == 6
    assert refused["actor"] == {"kind": "user", "id": "bob"}
    assert done["data"]["request_count"] == 3 and done["data"]["delay_source"] is None


def test_the_lived_chain_verifies_in_the_database_and_offline(lived, signing_key):
    sign_checkpoint()
    assert verify_chain(keys=[signing_key])["ok"] is True
    full = verify_bytes(b"".join(stream_export()), [signing_key])
    scoped = verify_bytes(b"".join(stream_export(operation_id=lived.pk)), [signing_key])
    assert full["entries"] == AuditEntry.objects.count()
    assert scoped["entries"] == AuditEntry.objects.filter(operation_id=lived.pk).count() == 9  # its own only


def test_the_story_reads_like_the_incident_timeline(lived):
    pending = operation_story(operation_id=lived.pk)
    assert {line.seq for line in pending} == {None}  # told before the integrator numbers the entries
    ordered = [e["seq"] for e in entries(lived)]
    story = operation_story(operation_id=lived.pk)
    assert [line.seq for line in story] == ordered and [line.text for line in pending] == [line.text for line in story]
    text = [line.as_text() for line in story]
    assert text[0].startswith("10:00:00 registered by operator:test: ") and "up to 2 requests" in text[0]
    assert text[1] == (
        "10:00:00 received 503, Retry-After 120, next poll 10:02:00 UTC from provider guidance (request 1 of 2)"
    )
    assert text[2].startswith("10:00:00 provider account ") and "paused until 10:02:00 UTC after 503" in text[2]
    assert text[3].startswith("10:02:00 received 200 'running'; stopped polling: request budget exhausted: ")
    assert text[3].endswith("(request 2 of 2)")
    assert text[4] == "10:02:00 escalated: request budget exhausted (2 of 2 requests)"
    assert text[5] == "10:10:00 user:alice inspected the job at the provider console"
    assert text[6] == (
        "10:10:00 user:alice extended by 15 min / 4 checks (a check about every 11 min, new deadline 10:55:00 UTC)"
    )
    assert text[7] == "10:10:00 user:bob tried “Extend 15 min / 4 checks”: refused — state changed"
    assert text[8] == "10:10:00 received 200 'succeeded': the job succeeded (request 3 of 6)"
    assert {line.actor for line in story} >= {"controller", "user:alice", "user:bob", "operator:test"}
    assert story[5].kind == "human.inspect" and story[5].actor == "user:alice"


@pytest.mark.parametrize(
    ("entry_type", "data", "expected"),
    [
        ("operation.cancelled", {"state": "closed", "reason": "agent gave up"}, "stopped watching (closed)"),
        ("operation.acknowledged", {"state": "succeeded"}, "acknowledged the result (succeeded)"),
        ("callback.failed", {"event_type": "operation.completed", "attempts": 8}, "gave up after 8 attempts"),
        (
            "provider.cancel_response",
            {"cancel_state": "confirmed", "http_status": 202},
            "applied — provider confirmed (HTTP 202)",
        ),
        (
            "provider.cancel_response",
            {"cancel_state": "not_supported", "http_status": 405},
            "sent — provider refused (HTTP 405)",
        ),
        (
            "operation.cancel_forwarded",
            {"cancel_state": "failed_to_forward"},
            "to the provider: sent — failed (no answer)",
        ),
        (
            "operation.cancelled",
            {"state": "closed", "cancel_state": "requested"},
            "cancel at the provider: requested — not sent yet",
        ),
        (
            "human.refused",
            {"option": "close", "reason": "a new kind of refusal"},
            "tried “Close — stop watching”: refused: 'a new kind of refusal'",
        ),
        ("future.type", {"a": 1}, "future.type: agent:bot: a='1'"),
    ],
)
def test_every_entry_type_reads_as_a_sentence(entry_type, data, expected):
    body = json.dumps(
        {
            "at": "2026-12-01T10:00:00.000000Z",
            "type": entry_type,
            "actor": {"kind": "agent", "id": "bot"},
            "data": data,
        }
    ).encode()
    line = story_line(seq=7, body=body)
    assert expected in line.text and line.kind == entry_type and line.seq == 7


def test_every_known_entry_type_has_its_own_sentence():
    from operations.audit import sentences
    from operations.audit.types import DATA_KEYS

    assert set(DATA_KEYS) <= set(sentences.RENDERERS)


@pytest.mark.parametrize("name", ["controller", "unattributed", "archiver"])
def test_a_person_named_like_a_system_actor_never_reads_as_one(name):
    def told(actor: dict, entry_type: str = "human.acknowledged", **data: object) -> object:
        body = {"at": "2026-12-01T10:00:00.000000Z", "type": entry_type, "actor": actor, "data": data}
        return story_line(seq=1, body=json.dumps(body).encode())

    person = told({"kind": "user", "id": name}, previous_holder=name)
    system = told({"kind": "system", "id": name})
    assert person.actor == f"user:{name}" != system.actor == name
    assert person.text == f"user:{name} took over the card from user:{name} and is on it"
    handed = told({"kind": "user", "id": "alice"}, "human.reassigned", to=name, previous_holder="alice")
    assert handed.text == f"user:alice handed the card to user:{name}"
