"""django-q2 entry points. Thin: arguments are ids and ints only; the services do the work."""

from __future__ import annotations


def run_poll(operation_id: str, fence: int) -> str:
    from operations.controller import poll_once

    return str(poll_once(operation_id=operation_id, fence=fence))
