"""Reads. Views, the API and commands get their data here; nothing in this module writes."""

from __future__ import annotations

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet

from operations.models import Operation, StatusCheck
from operations.vocabulary import Status

PAGE_SIZE = 50


def operation_get(*, operation_id: str) -> Operation | None:
    return Operation.objects.select_related("provider", "agent").filter(pk=operation_id).first()


def operation_queryset(*, status: str = "") -> QuerySet[Operation]:
    query = Operation.objects.select_related("provider").order_by("-created_at")
    if status in {s.value for s in Status}:
        query = query.filter(status=status)
    return query


def operation_page(*, status: str = "", page: str | int = 1) -> Page:
    return Paginator(operation_queryset(status=status), PAGE_SIZE).get_page(page)


def operation_checks(*, operation: Operation, limit: int = 500) -> list[StatusCheck]:
    return list(operation.checks.order_by("sent_at")[:limit])


def open_escalation(*, operation: Operation) -> object | None:
    """The operation's open decision card, if it has one."""
    from escalations.models import Escalation

    return Escalation.objects.filter(operation=operation, state=Escalation.State.OPEN).first()
