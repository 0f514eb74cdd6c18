"""Contract tests for docs/DESIGN.md section 9: every endpoint and every field of the Operation object."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from operations.api.schemas import ListOut, OperationOut
from operations.models import AuditEntry, IdempotencyKey, Operation
from operations.representation import rfc3339
from operations.vocabulary import TERMINAL_STATUSES
from tests.support import T0, job_id

pytestmark = pytest.mark.django_db

OPERATION_FIELDS = {
    "object", "id", "status", "done", "agent_hint", "hint_code", "provider", "provider_job_id", "provider_status",
    "purpose", "created_at", "updated_at", "completed_at", "acknowledged_at", "deadline", "business_deadline",
    "sequence", "poll", "retry_after_s", "progress", "result", "error", "escalation", "metadata", "links",
    # beyond DESIGN's list: the cancel request's progress and warnings (agents ignore unknown fields)
    "cancel", "warnings",
}  # fmt: skip
RFC3339_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def check_operation(obj: dict) -> dict:
    """The invariants every Operation object must satisfy, whatever its status."""
    OperationOut.model_validate(obj)
    assert set(obj) == OPERATION_FIELDS
    assert obj["object"] == "operation" and re.fullmatch(r"op_[0-9A-Z]{26}", obj["id"])
    assert obj["done"] == (obj["status"] in TERMINAL_STATUSES)
    if obj["done"]:
        assert (obj["result"] is None) != (obj["error"] is None), "exactly one of result/error when done"
        assert obj["retry_after_s"] is None and obj["completed_at"] is not None
    else:
        assert obj["result"] is None and obj["error"] is None
        assert obj["agent_hint"].startswith("NOT DONE.")
        # The next call and the earliest time to make it; waiting on a human is a GET later, not a wait.
        next_call = "/wait?timeout_s=" if obj["status"] != "needs_attention" else f"GET /api/v1/operations/{obj['id']} "
        assert next_call in obj["agent_hint"] and "no earlier than" in obj["agent_hint"]
        assert isinstance(obj["retry_after_s"], int) and 1 <= obj["retry_after_s"] <= 60
    if obj["status"] == "needs_attention":
        assert "human is deciding" in obj["agent_hint"] and "Do not resubmit" in obj["agent_hint"]
    for name in ("created_at", "updated_at", "deadline"):
        assert RFC3339_Z.match(obj[name]), name
    assert set(obj["poll"]) == {
        "count",
        "max",
        "transport_failures",
        "max_transport_failures",
        "last_polled_at",
        "next_poll_at",
    }
    assert set(obj["progress"]) == {"percent", "counts"}
    assert obj["links"] == {
        "self": f"/api/v1/operations/{obj['id']}",
        "wait": f"/api/v1/operations/{obj['id']}/wait?timeout_s=25",
        "ack": f"/api/v1/operations/{obj['id']}/ack",
        "cancel": f"/api/v1/operations/{obj['id']}/cancel",
    }
    return obj


def test_register_answers_202_with_location_retry_after_and_a_not_done_operation(api, profile, clock):
    job = job_id("slow_success", polls=2)
    response = api.register(
        provider=profile.slug,
        provider_job_id=job,
        purpose="weekly report",
        deadline="2026-12-01T11:00:00Z",
        business_deadline="2026-12-01T12:00:00+01:00",
        max_status_requests=7,
        request_fingerprint="fp-1",
        metadata={"run_id": "r-7"},
    )
    assert response.status_code == 202
    assert response["Content-Type"] == "application/json"
    obj = check_operation(response.json())
    assert response["Location"] == f"/api/v1/operations/{obj['id']}"
    assert response["Retry-After"] == str(obj["retry_after_s"])
    assert response["Cache-Control"] == "no-store"
    assert obj["status"] == "pending" and obj["done"] is False and obj["hint_code"] == "not_done_poll_later"
    assert (obj["provider"], obj["provider_job_id"], obj["purpose"]) == (profile.slug, job, "weekly report")
    assert obj["deadline"] == "2026-12-01T11:00:00Z" and obj["business_deadline"] == "2026-12-01T11:00:00Z"
    assert obj["poll"] == {
        "count": 0,
        "max": 7,
        "transport_failures": 0,
        "max_transport_failures": profile.default_max_transport_failures,
        "last_polled_at": None,
        "next_poll_at": "2026-12-01T10:00:00Z",
    }
    assert obj["metadata"] == {"run_id": "r-7"} and obj["created_at"] == "2026-12-01T10:00:00Z"
    op = Operation.objects.get(pk=obj["id"])
    assert op.agent.name == "report-bot" and op.registered_by == "agent:report-bot"


def test_get_right_after_register_finds_the_operation(api, register):
    for _ in range(5):
        created = register()
        response = api.get(f"/api/v1/operations/{created['id']}")
        assert response.status_code == 200
        assert check_operation(response.json())["id"] == created["id"]


def test_defaults_come_from_the_profile(api, register, profile, clock):
    obj = register()
    assert obj["deadline"] == (T0 + timedelta(seconds=profile.default_deadline_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert obj["poll"]["max"] == profile.default_max_status_requests
    assert obj["purpose"] == "" and obj["metadata"] == {} and obj["business_deadline"] is None


@pytest.mark.parametrize(
    ("scenario", "params", "status", "has"),
    [
        ("slow_success", {"polls": 1}, "succeeded", "result"),
        ("partial", {"total": 100, "failed": 3}, "partially_succeeded", "result"),
        ("late_failure", {"polls": 1}, "failed", "error"),
    ],
)
def test_done_operations_carry_exactly_one_of_result_and_error(api, register, drive, scenario, params, status, has):
    created = register(scenario, params=params)
    drive(Operation.objects.get(pk=created["id"]))
    response = api.get(f"/api/v1/operations/{created['id']}")
    obj = check_operation(response.json())
    assert obj["status"] == status and obj["done"] is True and obj[has] is not None
    assert "Retry-After" not in response
    assert obj["agent_hint"].startswith("DONE.") and "/ack" in obj["agent_hint"]
    if status == "partially_succeeded":
        assert obj["result"]["counts"]["failed"] == 3
    if status == "failed":
        assert obj["error"]["code"] == "provider_failed" and obj["error"]["provider_error"]
        # The provider's words are data in `error`, never part of the sentence the agent acts on.
        assert obj["error"]["message"] and obj["error"]["message"] not in obj["agent_hint"]
        assert "its own words are in `error`" in obj["agent_hint"]


def test_sequence_strictly_increases_over_the_whole_lifecycle(api, register, clock, rng):
    from operations.polls.controller import poll_once

    created = register("slow_success", params={"polls": 3})
    seen = [created["sequence"]]
    for _ in range(6):
        op = Operation.objects.get(pk=created["id"])
        if op.done:
            break
        clock.move_to(op.next_poll_at, tick=False)
        poll_once(operation_id=op.pk, fence=op.fence, rng=rng)
        seen.append(api.get(f"/api/v1/operations/{op.pk}").json()["sequence"])
    seen.append(api.post(f"/api/v1/operations/{created['id']}/ack").json()["sequence"])
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen
    assert len(seen) == 6  # register, four polls (running x3, then succeeded), ack


def test_needs_attention_says_a_human_is_deciding(api, register, drive):
    created = register("unknown_state", params={"value": "needs_payment"})
    drive(Operation.objects.get(pk=created["id"]))
    obj = check_operation(api.get(f"/api/v1/operations/{created['id']}").json())
    assert obj["status"] == "needs_attention" and obj["hint_code"] == "not_done_needs_human"
    assert obj["escalation"]["reason"] == "unknown_state" and obj["escalation"]["url"].endswith(
        f"/operations/{obj['id']}/"
    )
    assert obj["provider_status"] == "needs_payment"
    # The hint names a call that does what it says: a wait would return at once here.
    assert (
        "/wait" not in obj["agent_hint"] and f"GET /api/v1/operations/{obj['id']} no earlier than" in obj["agent_hint"]
    )


def test_a_passed_business_deadline_says_a_human_is_deciding_whether_the_result_is_still_wanted(
    api, register, drive, clock
):
    business = T0 + timedelta(minutes=2)
    created = register(
        "never_finishes", deadline=rfc3339(T0 + timedelta(minutes=30)), business_deadline=rfc3339(business)
    )
    drive(Operation.objects.get(pk=created["id"]))
    obj = check_operation(api.get(f"/api/v1/operations/{created['id']}").json())
    assert obj["status"] == "needs_attention" and obj["hint_code"] == "not_done_needs_human"
    assert obj["escalation"]["reason"] == "business_deadline_passed"
    assert "(Business deadline passed) and a human is deciding whether the result is still wanted" in obj["agent_hint"]
    assert obj["business_deadline"] == rfc3339(business) and obj["done"] is False


def test_another_agents_operation_is_not_found(api, other_api, register):
    created = register()
    for response in (
        other_api.get(f"/api/v1/operations/{created['id']}"),
        other_api.post(f"/api/v1/operations/{created['id']}/cancel"),
        other_api.post(f"/api/v1/operations/{created['id']}/ack"),
    ):
        assert response.status_code == 404
        assert response["Content-Type"] == "application/problem+json"
        assert response.json()["code"] == "operation_not_found"
    assert Operation.objects.get(pk=created["id"]).status == "pending"


# --- list-open --------------------------------------------------------------------------------------------


def test_open_list_puts_needs_attention_first_then_done_unacknowledged_then_the_rest(api, register, drive, clock):
    running = register("never_finishes")
    clock.shift(1)
    done = register("slow_success", params={"polls": 1})
    clock.shift(1)
    human = register("unknown_state")
    clock.shift(1)
    acked = register("slow_success", params={"polls": 1})
    for created in (done, human, acked):
        drive(Operation.objects.get(pk=created["id"]))
    assert api.post(f"/api/v1/operations/{acked['id']}/ack").status_code == 200
    body = api.get("/api/v1/operations?view=open").json()
    ListOut.model_validate(body)
    assert [item["id"] for item in body["data"]] == [human["id"], done["id"], running["id"]]
    assert body["counts"] == {"open_not_done": 2, "needs_attention": 1, "done_unacknowledged": 1}
    assert body["next_cursor"] is None and body["limit"] == 50
    assert body["agent_hint"].startswith("NOT DONE.") and f"{done['id']}/ack" in body["agent_hint"]
    for item in body["data"]:
        check_operation(item)


def test_open_list_pages_with_opaque_cursors_until_exhausted(api, register, clock):
    ids = []
    for _ in range(5):
        ids.append(register()["id"])
        clock.shift(1)
    seen, cursor = [], None
    while True:
        query = "/api/v1/operations?view=open&limit=2" + (f"&cursor={cursor}" if cursor else "")
        body = api.get(query).json()
        seen += [item["id"] for item in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
        assert "op_" not in cursor
    assert seen == ids


def test_open_list_is_empty_for_another_agent_and_says_so(other_api, register):
    register()
    body = other_api.get("/api/v1/operations").json()
    assert body["data"] == [] and body["counts"]["open_not_done"] == 0
    assert body["agent_hint"].startswith("Nothing open")


def test_a_cursor_from_another_agent_is_refused(api, other_api, register, clock):
    for _ in range(3):
        register()
        clock.shift(1)
    cursor = api.get("/api/v1/operations?limit=1").json()["next_cursor"]
    response = other_api.get(f"/api/v1/operations?limit=1&cursor={cursor}")
    assert response.status_code == 400 and response.json()["code"] == "invalid_cursor"


# --- ack and cancel -----------------------------------------------------------------------------------


def test_ack_is_idempotent_and_only_for_done_operations(api, register, drive):
    created = register("slow_success", params={"polls": 1})
    early = api.post(f"/api/v1/operations/{created['id']}/ack")
    assert early.status_code == 409 and early.json()["code"] == "operation_not_done"
    assert early.json()["operation"]["id"] == created["id"]
    drive(Operation.objects.get(pk=created["id"]))
    first = api.post(f"/api/v1/operations/{created['id']}/ack")
    second = api.post(f"/api/v1/operations/{created['id']}/ack", {})
    assert first.status_code == second.status_code == 200
    assert first.json()["acknowledged_at"] == second.json()["acknowledged_at"] is not None
    assert first.json()["sequence"] == second.json()["sequence"]
    assert first.json()["hint_code"] == "done_acknowledged"
    assert AuditEntry.objects.filter(operation_id=created["id"], type="operation.acknowledged").count() == 1
    assert api.get("/api/v1/operations").json()["data"] == []


def test_cancel_stops_watching_and_forwards_to_the_provider_in_the_background(api, register, fake_provider):
    from operations.tasks import forward_provider_cancel

    created = register("cancel_ok")
    response = api.post(f"/api/v1/operations/{created['id']}/cancel", {"reason": "user changed their mind"})
    assert response.status_code == 202
    obj = check_operation(response.json())
    assert obj["status"] == "closed" and obj["done"] is True and obj["error"]["code"] == "watch_cancelled"
    assert obj["cancel"]["state"] == "requested" and obj["cancel"]["reason"] == "user changed their mind"
    assert not [r for r in fake_provider.requests(created["provider_job_id"]) if r["kind"] == "cancel"]
    assert forward_provider_cancel(created["id"]) in {"confirmed", "forwarded"}
    assert [r["kind"] for r in fake_provider.requests(created["provider_job_id"])] == ["cancel"]
    after = api.get(f"/api/v1/operations/{created['id']}").json()
    assert after["cancel"]["state"] in {"confirmed", "forwarded"} and after["sequence"] > obj["sequence"]
    assert forward_provider_cancel(created["id"]) == "stale"  # a redelivered task sends nothing
    again = api.post(f"/api/v1/operations/{created['id']}/cancel")
    assert again.status_code == 202 and again.json()["status"] == "closed"
    types = list(AuditEntry.objects.filter(operation_id=created["id"]).values_list("type", flat=True))
    assert types.count("operation.cancelled") == 1 and types.count("operation.cancel_forwarded") == 1


def test_after_a_refused_provider_cancel_the_agent_is_told_the_job_may_still_run(api, register):
    from operations.tasks import forward_provider_cancel

    created = register("cancel_unsupported")
    obj = api.post(f"/api/v1/operations/{created['id']}/cancel").json()
    assert "being sent to the provider" in obj["error"]["message"]
    assert forward_provider_cancel(created["id"]) == "not_supported"
    after = check_operation(api.get(f"/api/v1/operations/{created['id']}").json())
    assert after["cancel"]["state"] == "not_supported" and after["error"]["code"] == "watch_cancelled"
    assert "refused the cancel request" in after["error"]["message"] and "may still run" in after["error"]["message"]
    assert "being sent" not in after["agent_hint"]


def test_cancel_of_a_finished_operation_is_refused_with_its_state(api, register, drive):
    created = register("slow_success", params={"polls": 1})
    drive(Operation.objects.get(pk=created["id"]))
    response = api.post(f"/api/v1/operations/{created['id']}/cancel")
    assert response.status_code == 409 and response.json()["code"] == "operation_already_terminal"
    assert response.json()["operation"]["status"] == "succeeded"


# --- replays ------------------------------------------------------------------------------------------------


def test_same_idempotency_key_and_body_replays_and_another_body_is_422(api, profile):
    body = {"provider": profile.slug, "provider_job_id": job_id("slow_success"), "purpose": "a"}
    first = api.post("/api/v1/operations", body, **{"Idempotency-Key": '"8e03978e-40d5-43e8-bc93-6894a57f9324"'})
    again = api.post("/api/v1/operations", body, **{"Idempotency-Key": "8e03978e-40d5-43e8-bc93-6894a57f9324"})
    assert first.status_code == 202 and again.status_code == 200
    assert again["Idempotent-Replayed"] == "true" and again.json()["id"] == first.json()["id"]
    other = api.post(
        "/api/v1/operations", {**body, "purpose": "b"}, **{"Idempotency-Key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}
    )
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    assert Operation.objects.count() == 1 and IdempotencyKey.objects.count() == 1


def test_same_job_while_not_done_replays_or_conflicts_on_the_natural_key(api, profile):
    body = {"provider": profile.slug, "provider_job_id": job_id("slow_success"), "purpose": "a"}
    first = api.post("/api/v1/operations", body)
    again = api.post("/api/v1/operations", body)
    assert (first.status_code, again.status_code) == (202, 200)
    assert again["Idempotent-Replayed"] == "true" and again.json()["id"] == first.json()["id"]
    conflict = api.post("/api/v1/operations", {**body, "purpose": "b"})
    assert conflict.status_code == 409 and conflict.json()["code"] == "operation_exists"
    assert conflict.json()["operation_id"] == first.json()["id"]
    assert Operation.objects.count() == 1


def test_sending_back_the_deadlines_the_server_showed_is_a_replay(api, profile):
    from datetime import timedelta

    from django.utils import timezone

    soon = timezone.now().astimezone(timezone.get_fixed_timezone(120)) + timedelta(minutes=20)
    body = {
        "provider": profile.slug,
        "provider_job_id": job_id("slow_success"),
        "deadline": soon.isoformat(timespec="milliseconds"),
        "business_deadline": (soon + timedelta(minutes=5)).isoformat(timespec="microseconds"),
    }
    first = api.post("/api/v1/operations", body)
    assert first.status_code == 202
    shown = first.json()
    echoed = {**body, "deadline": shown["deadline"], "business_deadline": shown["business_deadline"]}
    again = api.post("/api/v1/operations", echoed)
    assert again.status_code == 200 and again.json()["id"] == shown["id"]
    assert api.post("/api/v1/operations", body).status_code == 200


def test_a_done_job_may_be_registered_again(api, profile, drive):
    body = {"provider": profile.slug, "provider_job_id": job_id("slow_success", polls=1)}
    first = api.post("/api/v1/operations", body).json()
    drive(Operation.objects.get(pk=first["id"]))
    second = api.post("/api/v1/operations", body)
    assert second.status_code == 202 and second.json()["id"] != first["id"]


def test_openapi_document_lists_every_endpoint(api):
    response = api.get("/api/v1/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert set(paths) == {
        "/api/v1/operations",
        "/api/v1/operations/{operation_id}",
        "/api/v1/operations/{operation_id}/wait",
        "/api/v1/operations/{operation_id}/ack",
        "/api/v1/operations/{operation_id}/cancel",
        "/api/v1/operations/{operation_id}/events",
    }
    assert set(paths["/api/v1/operations"]) == {"get", "post"}
    assert paths["/api/v1/operations"]["post"]["responses"]["422"]["content"]["application/problem+json"]


def test_cancel_while_a_human_is_deciding_supersedes_the_card(api, register, drive):
    from operations.models import Escalation

    created = register("unknown_state")
    drive(Operation.objects.get(pk=created["id"]))
    card = Escalation.objects.get(operation_id=created["id"])
    assert card.state == "open"
    response = api.post(f"/api/v1/operations/{created['id']}/cancel", {"reason": "not needed"})
    assert response.status_code == 202
    obj = check_operation(response.json())
    assert obj["status"] == "closed" and obj["escalation"] is None
    card.refresh_from_db()
    assert card.state == "superseded" and card.version == 2


def test_a_database_outage_is_a_503_problem_with_retry_after(rf):
    from django.db import OperationalError

    from operations.api.errors import unexpected

    response = unexpected(rf.get("/api/v1/operations"), OperationalError("server closed the connection"))
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert response["Content-Type"] == "application/problem+json"
    assert json.loads(response.content)["code"] == "unavailable"
    crash = unexpected(rf.get("/api/v1/operations"), RuntimeError("bug"))
    assert crash.status_code == 500 and json.loads(crash.content)["code"] == "internal"
