"""Exports for incident review from the operation page and the history."""

from __future__ import annotations

import csv
import io

import pytest
from django.test import Client
from django.urls import reverse

from escalations.exports import cell
from operations.audit import verify as audit_verify
from operations.decisions.services import escalation_decide
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.fixture
def decided(stopped, alice, bob):
    """A card refused once (stale) and then extended: the interesting history."""
    esc = stopped(purpose='=HYPERLINK("http://evil.example","click")')
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=alice,
        option_id="extend:15m:4",
        card_version=esc.version,
        comment="ok",
    )
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=bob, option_id="close", card_version=esc.version
    )
    return esc


def test_the_operation_jsonl_export_verifies_offline(client: Client, alice, decided, signing_key) -> None:
    client.force_login(alice)
    response = client.get(reverse("operation_audit_jsonl", args=[decided.operation_id]))
    assert response.status_code == 200 and response["Content-Type"].startswith("application/jsonl")
    assert response["Content-Disposition"] == f'attachment; filename="{decided.operation_id}-audit.jsonl"'
    data = body(response)
    result = audit_verify.verify_export(io.BytesIO(data), keys=[signing_key])
    assert result["ok"] is True and result["operation_id"] == decided.operation_id
    assert b'"type":"human.decision"' in data and b'"type":"human.refused"' in data


def test_the_jsonl_export_in_format_2_for_an_older_verifier(client: Client, alice, decided, signing_key) -> None:
    client.force_login(alice)
    url = reverse("operation_audit_jsonl", args=[decided.operation_id])
    formats = {}
    for wanted in ("", "2", "3"):
        data = body(client.get(url, {"format": wanted} if wanted else {}))
        formats[wanted] = audit_verify.verify_export(io.BytesIO(data), keys=[signing_key])["format"]
    assert formats == {
        "": audit_verify.EXPORT_FORMAT_V3,
        "2": audit_verify.EXPORT_FORMAT_V2,
        "3": audit_verify.EXPORT_FORMAT_V3,
    }
    history = body(client.get(reverse("decision_history_jsonl"), {"since": "2026-12-01", "format": "2"}))
    assert audit_verify.verify_export(io.BytesIO(history), keys=[signing_key])["format"] == "pollerdash-audit-export/2"
    refused = client.get(url, {"format": "4"})
    assert refused.status_code == 400 and b"format 3 (the default) or 2" in refused.content


def test_the_history_jsonl_export_covers_the_chosen_days_and_verifies(
    client: Client, alice, decided, signing_key
) -> None:
    client.force_login(alice)
    response = client.get(reverse("decision_history_jsonl"), {"since": "2026-12-01", "until": "2026-12-01"})
    assert response.status_code == 200
    assert audit_verify.verify_export(io.BytesIO(body(response)), keys=[signing_key])["ok"] is True


def test_the_history_jsonl_export_of_one_operation_holds_only_that_operation(
    client: Client, alice, decided, signing_key
) -> None:
    client.force_login(alice)
    response = client.get(reverse("decision_history_jsonl"), {"operation": decided.operation_id, "user": "bob"})
    result = audit_verify.verify_export(io.BytesIO(body(response)), keys=[signing_key])
    assert result["ok"] is True and result["operation_id"] == decided.operation_id
    page = client.get(reverse("decision_history"), {"operation": decided.operation_id}).content.decode()
    assert "Audit log (JSONL, this operation)" in page


def test_without_a_signing_key_the_export_says_why_instead_of_a_500(client: Client, alice, decided, settings) -> None:
    settings.AUDIT_SIGNING_KEY_FILE = ""
    client.force_login(alice)
    response = client.get(reverse("operation_audit_jsonl", args=[decided.operation_id]))
    assert response.status_code == 409 and b"could not be made" in response.content


def test_csv_exports_hold_every_check_and_decision_with_formulas_defused(client: Client, alice, decided) -> None:
    client.force_login(alice)
    checks = list(
        csv.DictReader(
            io.StringIO(body(client.get(reverse("operation_checks_csv", args=[decided.operation_id]))).decode())
        )
    )
    assert len(checks) == decided.operation.status_requests_used
    assert {row["http_status"] for row in checks} == {"200"}
    decisions = list(
        csv.DictReader(
            io.StringIO(body(client.get(reverse("operation_decisions_csv", args=[decided.operation_id]))).decode())
        )
    )
    assert [(d["user"], d["option"], d["outcome"]) for d in decisions] == [
        ("alice", "extend:15m:4", "applied"),
        ("bob", "close", "refused"),
    ]
    # The ids keep their columns; the words are the pages' words.
    assert [(d["option_label"], d["outcome_label"]) for d in decisions] == [
        ("Extend 15 min / 4 checks", "applied"),
        ("Close — stop watching", "refused — state changed"),
    ]
    assert decisions[0]["authorization_number"] == "2" and decisions[0]["comment"] == "ok"
    history = body(client.get(reverse("decision_history_csv"), {"user": "bob"})).decode()
    assert history.count("\n") == 2 and "state changed" in history
    assert cell('=HYPERLINK("x")') == '\'=HYPERLINK("x")' and cell("-5") == "-5" and cell("@SUM(A1)") == "'@SUM(A1)"


def test_the_printable_report_has_the_timeline_and_every_decision(client: Client, alice, decided) -> None:
    client.force_login(alice)
    page = client.get(reverse("operation_report", args=[decided.operation_id])).content.decode()
    assert "Incident report" in page and "Timeline" in page
    assert "escalated" in page  # a timeline line from the audit story
    assert "Extend 15 min / 4 checks · applied" in page and "Close — stop watching · refused — state changed" in page
    assert "state changed — review again" in page  # the recorded reason, in full
    assert "Options offered:" in page and "Extend 15 min / 4 checks" in page
    history = client.get(reverse("decision_history_report"), {"operation": decided.operation_id}).content.decode()
    decisions_table = history.split("<h2>Acknowledgements")[0]
    assert decisions_table.count("<tr>") == 3  # header + two decisions


def test_under_asgi_every_export_streams_through_an_async_iterator(alice, decided, signing_key) -> None:
    # Served under uvicorn, a synchronous iterator would be read whole into memory by Django.
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    client = AsyncClient()
    client.force_login(alice)
    urls = [
        reverse("operation_audit_jsonl", args=[decided.operation_id]),
        reverse("operation_checks_csv", args=[decided.operation_id]),
        reverse("operation_decisions_csv", args=[decided.operation_id]),
        reverse("decision_history_csv"),
        reverse("decision_history_jsonl"),
    ]
    for url in urls:
        response = async_to_sync(client.get)(url)
        assert response.status_code == 200 and response.streaming and response.is_async, url


def test_ownership_and_notes_appear_in_every_export_and_report(
    client: Client, stopped, alice, bob, signing_key
) -> None:
    from operations.decisions import ownership

    esc = stopped()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    ownership.card_note(escalation_id=esc.pk, user=alice, text="=on the phone with the vendor, ETA 20 min")
    ownership.card_reassign(escalation_id=esc.pk, by=alice, to="bob")
    client.force_login(alice)
    op_id = esc.operation_id

    rows = list(csv.DictReader(io.StringIO(body(client.get(reverse("operation_activity_csv", args=[op_id]))).decode())))
    assert [(r["user"], r["kind"], r["to_user"]) for r in rows] == [
        ("alice", "acknowledged", ""),
        ("alice", "note", ""),
        ("alice", "reassigned", "bob"),
    ]
    assert rows[1]["text"] == "'=on the phone with the vendor, ETA 20 min"  # a formula stays text
    assert all(r["audit_entry_id"] for r in rows)
    history_csv = body(client.get(reverse("decision_history_activity_csv"), {"operation": op_id})).decode()
    assert "on the phone with the vendor" in history_csv

    jsonl = body(client.get(reverse("operation_audit_jsonl", args=[op_id])))
    assert audit_verify.verify_export(io.BytesIO(jsonl), keys=[signing_key])["ok"] is True
    for entry_type in ("human.acknowledged", "human.note", "human.reassigned"):
        assert f'"type":"{entry_type}"'.encode() in jsonl
    assert b"on the phone with the vendor, ETA 20 min" in jsonl

    report = client.get(reverse("operation_report", args=[op_id])).content.decode()
    assert "noted: “=on the phone with the vendor, ETA 20 min”" in report
    assert "handed the card to bob" in report and "acknowledged the card (on it)" in report
    assert "alice noted: &#x27;=on the phone" in report  # the timeline, from the audit entries
    history = client.get(reverse("decision_history")).content.decode()
    assert "Acknowledgements, hand-overs and notes" in history and "handed the card to bob" in history
    printable = client.get(reverse("decision_history_report")).content.decode()
    assert "noted: “=on the phone with the vendor, ETA 20 min”" in printable
    # Outcome and option filters are about decisions: the activity list leaves them.
    assert (
        "handed the card to bob" not in client.get(reverse("decision_history"), {"outcome": "applied"}).content.decode()
    )
