"""Exports for incident review: CSV of status checks and decisions, the verifiable JSONL audit
export, and a printable HTML report (docs/DESIGN.md section 8, "Export").

CSV and JSONL stream row by row in bounded memory. CSV cells that a spreadsheet would run as a
formula (starting with = + - @ or a tab) are prefixed with a quote: purposes, provider states and
comments come from outside and must stay data.
"""

from __future__ import annotations

import csv
import json
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from datetime import datetime

from django.core.handlers.asgi import ASGIRequest
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse

from operations.audit.export import as_async_lines
from operations.cards.words import decision_words, option_title
from operations.models import CardActivity, Decision, StatusCheck

CHUNK = 2000
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class _Echo:
    def write(self, value: str) -> str:
        return value


def cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = str(value)
    if text.startswith(_FORMULA_START) and not _is_number(text):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def csv_lines(header: list[str], rows: Iterable[list[object]]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow([cell(value) for value in row])


def streamed(request: HttpRequest, lines: Iterator) -> Iterator | AsyncIterator:
    """Under ASGI a sync iterator would be buffered whole: pull it in batches from the request's thread."""
    if isinstance(request, ASGIRequest):
        return as_async_lines(lines)
    return lines


def csv_response(
    request: HttpRequest, *, filename: str, header: list[str], rows: Iterable[list[object]]
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(streamed(request, csv_lines(header, rows)), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class _ClosingResponse(StreamingHttpResponse):
    """Runs ON_CLOSE when the server closes the response: after the last byte, or when the reader
    went away (uvicorn through Django's ASGI handler, in the request's thread, before the request's
    database connection is closed or handed back)."""

    def __init__(self, *args: object, on_close: Callable[[], None], **kwargs: object) -> None:
        # Typing: the arguments are StreamingHttpResponse's own, passed through.
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._on_close = on_close

    def close(self) -> None:
        try:
            self._on_close()
        finally:
            super().close()


def jsonl_response(
    request: HttpRequest, *, filename: str, lines: Iterator[bytes], on_close: Callable[[], None] | None = None
) -> StreamingHttpResponse:
    content_type = "application/jsonl; charset=utf-8"
    response = (
        StreamingHttpResponse(streamed(request, lines), content_type=content_type)
        if on_close is None
        else _ClosingResponse(streamed(request, lines), content_type=content_type, on_close=on_close)
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


CHECK_HEADER = [
    "operation_id",
    "sent_at",
    "received_at",
    "http_status",
    "transport_error",
    "provider_request_id",
    "retry_after",
    "provider_state",
    "interpreted_state",
    "decision",
    "reason",
    "delay_source",
    "delay_ms",
    "next_poll_at",
    "body_digest",
    "charged_transport",
    "due_at",
    "fence",
]


def check_rows(checks: QuerySet[StatusCheck]) -> Iterator[list[object]]:
    for check in checks.order_by("sent_at", "pk").iterator(chunk_size=CHUNK):
        yield [
            check.operation_id,
            check.sent_at,
            check.received_at,
            check.http_status,
            check.transport_error,
            check.provider_request_id,
            check.retry_after,
            check.provider_state,
            check.interpreted_state,
            check.decision,
            check.reason,
            check.delay_source,
            check.delay_ms,
            check.next_poll_at,
            check.body_digest,
            check.charged_transport,
            check.due_at,
            check.fence,
        ]


DECISION_HEADER = [
    "decided_at",
    "user",
    "operation_id",
    "provider",
    "provider_job_id",
    "escalation_id",
    "reason",
    "option",
    "outcome",
    "refusal_reason",
    "comment",
    "card_version",
    "new_deadline_at",
    "new_max_status_requests",
    "authorization_number",
    "confirms_decision_id",
    "provider_response",
    "audit_entry_id",
    "decision_id",
    # Identical refusals counted on this row instead of recorded again (operations.decisions.services._refuse).
    "repeat_count",
    "last_repeated_at",
    # The same words as the pages, the reports and the audit story (operations.cards.words);
    # `option` and `outcome` above keep the ids.
    "option_label",
    "outcome_label",
    # Taken as one member of a bulk decision over a group (operations.decisions.bulk).
    "bulk_decision_id",
    # How and when the decider had authenticated: {"method", "at", "issuer", "subject"} (JSON).
    "authentication",
    # Where the decision came from (web, slack, pagerduty, api) and the identity that channel
    # verified ("slack:T1/U1"; empty on the web).
    "channel",
    "channel_identity",
]


def decision_rows(decisions: QuerySet[Decision]) -> Iterator[list[object]]:
    query = decisions.select_related("escalation", "operation__provider", "authorization", "confirmed_by")
    for decision in query.iterator(chunk_size=CHUNK):
        yield [
            decision.decided_at,
            decision.username,
            decision.operation_id,
            decision.operation.provider.slug,
            decision.operation.provider_job_id,
            decision.escalation_id,
            decision.escalation.reason,
            decision.option,
            decision.outcome,
            decision.refusal_reason,
            decision.comment,
            decision.card_version,
            decision.new_deadline_at,
            decision.new_max_status_requests,
            decision.authorization.number if decision.authorization else None,
            decision.confirms_id,
            decision.provider_response,
            decision.audit_entry_id,
            decision.pk,
            decision.repeat_count,
            decision.last_repeated_at,
            option_title(decision.option),
            decision_words(decision).label,
            decision.bulk_id,
            decision.authentication,
            decision.channel,
            decision.channel_identity,
        ]


# Acknowledgements, hand-overs and notes: what people did on cards without deciding.
ACTIVITY_HEADER = [
    "at",
    "user",
    "kind",
    "operation_id",
    "provider",
    "provider_job_id",
    "escalation_id",
    "reason",
    "to_user",
    "previous_holder",
    "text",
    "audit_entry_id",
    "activity_id",
    # As for decisions; a notice (kind "notice": what a channel reported that changed nothing) has no user.
    "channel",
    "channel_identity",
    # A snooze (kind "snoozed"): when its reminders resume; empty for every other kind.
    "snoozed_until",
]


def activity_rows(activities: QuerySet[CardActivity]) -> Iterator[list[object]]:
    query = activities.select_related("escalation", "operation__provider")
    for activity in query.iterator(chunk_size=CHUNK):
        yield [
            activity.at,
            activity.username,
            activity.kind,
            activity.operation_id,
            activity.operation.provider.slug,
            activity.operation.provider_job_id,
            activity.escalation_id,
            activity.escalation.reason,
            activity.to_username,
            activity.previous_username,
            activity.text,
            activity.audit_entry_id,
            activity.pk,
            activity.channel,
            activity.channel_identity,
            activity.until if activity.kind == CardActivity.Kind.SNOOZED else None,
        ]
