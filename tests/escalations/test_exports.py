"""Exports for incident review from the operation page and the history."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections
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
    # People are shown with their kind, as in the timeline: no username passes for pollerdash itself.
    assert decisions_table.count("<td>user:") == 2 and "<td>user:alice<br>" in decisions_table
    assert "— user:alice: Extend 15 min / 4 checks · applied" in page


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
    assert "user:alice noted: &#x27;=on the phone" in report  # the timeline, from the audit entries
    assert "<td>user:alice</td>" in report and "<td>user:bob</td>" not in report.split("Timeline")[0]
    history = client.get(reverse("decision_history")).content.decode()
    assert "Acknowledgements, hand-overs and notes" in history and "handed the card to bob" in history
    printable = client.get(reverse("decision_history_report")).content.decode()
    assert "noted: “=on the phone with the vendor, ETA 20 min”" in printable
    assert "<td>user:alice</td>" in printable
    # Outcome and option filters are about decisions: the activity list leaves them.
    assert (
        "handed the card to bob" not in client.get(reverse("decision_history"), {"outcome": "applied"}).content.decode()
    )


# --- Streaming exports hold a database connection until their last byte: capped, and sized -------


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_person_streams_one_export_at_a_time_and_is_told_when_to_come_back(
    alice, bob, decided, settings, signing_key
) -> None:
    settings.AUDIT_EXPORT_WEB_CONCURRENT = 5
    settings.AUDIT_EXPORT_WEB_CONCURRENT_PER_USER = 1
    alices, bobs = signed_in(alice), signed_in(bob)
    streaming = alices.get(reverse("decision_history_jsonl"))  # full, and not read yet
    assert streaming.status_code == 200
    again = alices.get(reverse("decision_history_jsonl"), {"since": "2026-12-01"})
    assert again.status_code == 429 and again["Retry-After"] == "60"
    assert b"You already have 1 audit export streaming" in again.content
    assert bobs.get(reverse("decision_history_jsonl")).status_code == 200  # someone else's is not held up
    # An operation's export is small: never held back.
    assert alices.get(reverse("operation_audit_jsonl", args=[decided.operation_id])).status_code == 200
    body(streaming)  # read to the end: the slot is free again
    assert alices.get(reverse("decision_history_jsonl")).status_code == 200


def test_streaming_exports_are_capped_for_everyone_and_a_closed_one_frees_its_slot(
    alice, bob, decided, settings, signing_key
) -> None:
    settings.AUDIT_EXPORT_WEB_CONCURRENT = 1
    alices, bobs = signed_in(alice), signed_in(bob)
    streaming = alices.get(reverse("decision_history_jsonl"), {"since": "2026-12-01"})
    assert streaming.status_code == 200
    waiting = bobs.get(reverse("decision_history_jsonl"))
    assert waiting.status_code == 429 and waiting["Retry-After"] == "60"
    assert b"1 audit export is already streaming" in waiting.content
    assert bobs.get(reverse("operation_audit_jsonl", args=[decided.operation_id])).status_code == 200
    # The reader went away mid-stream: the server closes the response (keeping the test's
    # database connection open, as the test client does when it closes one).
    request_finished.disconnect(close_old_connections)
    try:
        streaming.close()
    finally:
        request_finished.connect(close_old_connections)
    served = bobs.get(reverse("decision_history_jsonl"))
    assert served.status_code == 200
    assert audit_verify.verify_export(io.BytesIO(body(served)), keys=[signing_key])["ok"] is True


def test_an_export_too_large_for_the_web_names_the_command(alice, decided, settings, signing_key) -> None:
    from operations.models import AuditEntry

    settings.AUDIT_EXPORT_WEB_CONCURRENT = 1
    entries = AuditEntry.objects.count()
    settings.AUDIT_EXPORT_WEB_MAX_ENTRIES = entries - 1
    alices = signed_in(alice)
    for query in ({}, {"since": "2026-12-01"}):
        refused = alices.get(reverse("decision_history_jsonl"), query)
        assert refused.status_code == 409, query
        assert b"manage.py audit_export" in refused.content and f"{entries - 1:,}".encode() in refused.content
    # An operation's export has no such limit.
    assert alices.get(reverse("operation_audit_jsonl", args=[decided.operation_id])).status_code == 200
    # A refusal frees its slot: within the limit, the same export streams.
    settings.AUDIT_EXPORT_WEB_MAX_ENTRIES = entries
    served = alices.get(reverse("decision_history_jsonl"))
    assert served.status_code == 200
    assert audit_verify.verify_export(io.BytesIO(body(served)), keys=[signing_key])["entries"] == entries


def test_a_slot_is_a_row_every_web_process_sees(alice, bob, decided, settings, signing_key) -> None:
    # Another uvicorn process's export (on another host, or through PgBouncer on any server
    # connection) is a row holding the slot.
    from datetime import timedelta

    from django.utils import timezone

    from escalations import export_slots
    from operations.models import ExportSlot

    settings.AUDIT_EXPORT_WEB_CONCURRENT = 1
    key = export_slots.shared_key(0)
    ExportSlot.objects.create(key=key, holder="web-2/77/1/elsewhere", lease_until=timezone.now() + timedelta(minutes=2))
    assert signed_in(alice).get(reverse("decision_history_jsonl")).status_code == 429
    ExportSlot.objects.filter(key=key).delete()
    served = signed_in(bob).get(reverse("decision_history_jsonl"))
    assert served.status_code == 200
    # Held in the database while it streams; let go there once it is read.
    assert ExportSlot.objects.filter(key=key).exclude(holder__startswith="web-2/").count() == 1
    body(served)
    assert not ExportSlot.objects.filter(key=key).exists()


def test_a_killed_processs_slot_frees_itself_when_its_lease_runs_out(alice, decided, settings, signing_key) -> None:
    from datetime import timedelta

    import time_machine
    from django.utils import timezone

    from escalations import export_slots
    from operations.models import ExportSlot

    settings.AUDIT_EXPORT_WEB_CONCURRENT = 1
    settings.AUDIT_EXPORT_SLOT_LEASE_S = 120
    now = timezone.now()
    ExportSlot.objects.create(
        key=export_slots.shared_key(0), holder="web-2/77/1/killed", lease_until=now + timedelta(seconds=120)
    )
    with time_machine.travel(now + timedelta(seconds=119), tick=False):
        assert signed_in(alice).get(reverse("decision_history_jsonl")).status_code == 429
    with time_machine.travel(now + timedelta(seconds=121), tick=False):
        served = signed_in(alice).get(reverse("decision_history_jsonl"))
        assert served.status_code == 200
        assert ExportSlot.objects.get(key=export_slots.shared_key(0)).holder != "web-2/77/1/killed"
        body(served)


def test_a_streaming_export_renews_its_lease_and_a_stranger_cannot_free_it(
    alice, decided, settings, signing_key
) -> None:
    from datetime import timedelta

    import time_machine
    from django.utils import timezone

    from escalations import export_slots
    from operations.models import ExportSlot

    settings.AUDIT_EXPORT_WEB_CONCURRENT = 1
    settings.AUDIT_EXPORT_WEB_CONCURRENT_PER_USER = 0
    settings.AUDIT_EXPORT_SLOT_LEASE_S = 60
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        slot = export_slots.take(user_id=alice.pk)
    # Another holder's release (a forged or stale one) frees nothing.
    export_slots.Slot(slot.keys, "someone-else").release()
    assert ExportSlot.objects.filter(key=export_slots.shared_key(0), holder=slot.holder).exists()
    with time_machine.travel(start + timedelta(seconds=50), tick=False):
        slot._renew_at = 0.0  # a third of the lease has passed on the monotonic clock too
        assert list(slot.kept(iter([b"a\n"]))) == [b"a\n"]
    row = ExportSlot.objects.get(key=export_slots.shared_key(0))
    assert row.lease_until == start + timedelta(seconds=110)
    with time_machine.travel(start + timedelta(seconds=100), tick=False):
        with pytest.raises(export_slots.ExportsBusy):
            export_slots.take(user_id=alice.pk)
    slot.release()
    assert not ExportSlot.objects.exists()


@pytest.fixture
def uvicorn_url(transactional_db: None) -> Iterator[str]:
    """The real ASGI application under uvicorn, in a thread of this process (so `settings` reach it)."""
    import gc
    import threading
    import time

    import uvicorn

    from pollerdash.asgi import application

    server = uvicorn.Server(uvicorn.Config(application, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="uvicorn-exports", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        gc.collect()  # the request threads' database connections, closed before the database goes


def test_under_uvicorn_a_reader_who_goes_away_frees_the_slot(uvicorn_url, make_user, settings, signing_key) -> None:
    import socket
    import time

    import httpx
    from django.db import transaction

    from operations.audit import entries as audit
    from tests.audit.helpers import OP_A, decision_data

    settings.AUDIT_EXPORT_WEB_CONCURRENT = 1
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    # About 23 MB: more than the socket buffers between her and the server hold, so the export is
    # still streaming (its slot held) while she reads nothing more.
    with transaction.atomic():
        long_reason = {"reason": "r" * 4000}
        audit.append_many(
            entries=[
                audit.NewEntry("controller.decision", audit.SYSTEM_CONTROLLER, OP_A, decision_data(n) | long_reason)
                for n in range(5000)
            ]
        )
    cookies = {name: signed_in(make_user(name)).cookies["sessionid"].value for name in ("alice", "bob")}
    url = f"{uvicorn_url}{reverse('decision_history_jsonl')}"

    # Her socket's receive buffer is kept small (Linux would let it grow to tens of MB).
    small = httpx.HTTPTransport(socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)])
    with (
        httpx.Client(timeout=10, transport=small, cookies={"sessionid": cookies["alice"]}) as her,
        httpx.Client(timeout=10, cookies={"sessionid": cookies["bob"]}) as his,
    ):
        with her.stream("GET", url) as leaving:
            assert leaving.status_code == 200
            chunks = leaving.iter_raw()  # kept: dropping the iterator would close the response
            next(chunks)  # the first bytes; then she reads nothing more
            busy = his.get(url)
            assert busy.status_code == 429 and busy.headers["Retry-After"] == "60"
        # The server notices the closed connection, closes the response, and frees the slot.
        deadline = time.monotonic() + 10
        while (after := his.get(url)).status_code == 429:
            assert time.monotonic() < deadline, "the slot was not freed after the reader left"
            time.sleep(0.05)
        assert after.status_code == 200 and after.content.count(b"\n") > 5000
        # Read to the end: free again at once.
        assert her.get(url).status_code == 200
