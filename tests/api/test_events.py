"""Server-sent events on the live server: ids are sequences, Last-Event-ID resumes, 204 at the end."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from operations.models import Operation
from operations.polls.controller import poll_once
from tests.support import job_id

pytestmark = pytest.mark.django_db(transaction=True)


def parse_events(text: str) -> list[dict[str, str]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":"):
                continue
            key, _, value = line.partition(": ")
            fields[key] = value
        if fields:
            events.append(fields)
    return events


def poll_now(operation_id: str) -> None:
    Operation.objects.filter(pk=operation_id).update(next_poll_at=None)
    op = Operation.objects.get(pk=operation_id)
    poll_once(operation_id=op.pk, fence=op.fence)


def next_event(lines: Iterator[str]) -> dict[str, str]:
    """The next `operation` event of a stream (comments and the retry line skipped)."""
    fields: dict[str, str] = {}
    for line in lines:
        if not line:
            if fields.get("event") == "operation":
                return fields
            fields = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(": ")
            fields[key] = value
    raise AssertionError("the stream ended")


def test_events_stream_every_change_until_done_and_resume_exactly(live_api, agent, profile):
    headers = {"Authorization": f"Bearer {agent.token}"}
    with httpx.Client(base_url=live_api.url, headers=headers, timeout=30) as client:
        created = client.post(
            "/api/v1/operations", json={"provider": profile.slug, "provider_job_id": job_id("slow_success", polls=1)}
        ).json()
        with client.stream("GET", f"/api/v1/operations/{created['id']}/events") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["x-accel-buffering"] == "no"
            lines = response.iter_lines()
            assert next(lines) == "retry: 5000"
            events = [next_event(lines)]
            for _ in range(2):
                poll_now(created["id"])  # running, then succeeded
                events.append(next_event(lines))
            assert list(lines) == []  # the stream ends with the final event
        sequences = [int(e["id"]) for e in events]
        statuses = [json.loads(e["data"])["status"] for e in events]
        assert sequences == sorted(set(sequences)) and statuses == ["pending", "running", "succeeded"]
        # Resuming after the second event sends only what came later; after the last one: 204.
        resumed = client.get(f"/api/v1/operations/{created['id']}/events", headers={"Last-Event-ID": str(sequences[1])})
        assert [int(e["id"]) for e in parse_events(resumed.text) if "id" in e] == sequences[2:]
        final = client.get(f"/api/v1/operations/{created['id']}/events", headers={"Last-Event-ID": str(sequences[-1])})
        assert final.status_code == 204
        missing = client.get("/api/v1/operations/op_01ARZ3NDEKTSV4RRFFQ69G5FAV/events")
        assert missing.status_code == 404 and missing.json()["code"] == "operation_not_found"
