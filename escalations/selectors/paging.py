"""Paging helpers shared by the dashboard's lists."""

from __future__ import annotations

from django.core.paginator import Paginator

PAGE_SIZE = 50


def page_number(value: object) -> int:
    text = str(value or "1")
    return int(text) if text.isascii() and text.isdigit() and 0 < len(text) < 7 else 1


def with_count(paginator: Paginator, count: int | None) -> Paginator:
    # The count is already known from an aggregate: save the COUNT(*) query.
    if count is not None:
        paginator.__dict__["count"] = count
    return paginator
