"""Server-sent events for one operation: GET /api/v1/operations/{id}/events (optional viewer).

One `operation` event per observable change, `id:` = the operation's `sequence`, `data:` = the
Operation object, so a reconnect with Last-Event-ID resumes exactly (only newer sequences are
sent). The stream ends after the event that shows the operation done; reconnecting after that
final event answers 204, which tells EventSource clients to stop. A comment line every
API_EVENTS_KEEPALIVE_S keeps proxies from dropping the idle connection, and a stream lasts at
most API_EVENTS_MAX_S (clients reconnect with Last-Event-ID). Changes are seen by the shared
wait watcher (operations.api.wait): an open stream holds no thread.

Never the only way to learn about completion: the wait, GET and callbacks say the same.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator

from django.conf import settings

from operations.api import wait as api_wait
from operations.api.problems import ApiProblem, not_found, problem_body

RETRY_MS = 5000
_LAST_EVENT_ID = re.compile(r"[0-9]{1,18}")


def last_event_id(value: str | None) -> int | None:
    """The sequence a reconnecting client last saw; anything unreadable means "from the start"."""
    if value is not None and _LAST_EVENT_ID.fullmatch(value.strip()):
        return int(value.strip())
    return None


def _event(obj: dict) -> str:
    return f"id: {obj['sequence']}\nevent: operation\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def first_state(*, agent_id: int, operation_id: str) -> dict:
    obj = await api_wait.run_db(api_wait.load_operation, agent_id=agent_id, operation_id=operation_id)
    if obj is None:
        raise not_found(operation_id)
    return obj


async def stream(*, agent_id: int, operation_id: str, first: dict, after: int | None) -> AsyncIterator[str]:
    """The event stream, starting from the state already loaded (`first`)."""
    yield f"retry: {RETRY_MS}\n\n"
    obj = first
    if after is None or obj["sequence"] > after:
        yield _event(obj)
    seen = obj["sequence"]
    ends_at = time.monotonic() + settings.API_EVENTS_MAX_S
    while not obj["done"]:
        remaining = ends_at - time.monotonic()
        if remaining <= 0:
            return
        try:
            woke = await api_wait.wait_for_change(
                agent_id=agent_id,
                operation_id=operation_id,
                timeout_s=min(settings.API_EVENTS_KEEPALIVE_S, remaining),
                after_sequence=seen,
            )
        except ApiProblem as exc:
            # Too many open waits and streams: say so in-band and end; the client retries later.
            yield f"event: error\ndata: {json.dumps(problem_body(exc), separators=(',', ':'))}\n\n"
            return
        if woke is api_wait.TIMED_OUT:
            yield ": keep-alive\n\n"
            continue
        latest = woke or await api_wait.run_db(api_wait.load_operation, agent_id=agent_id, operation_id=operation_id)
        if latest is None:
            return
        # TIMED_OUT went on above (mypy does not narrow a sentinel object by identity).
        obj = latest  # type: ignore[assignment]
        if obj["sequence"] > seen:
            seen = obj["sequence"]
            yield _event(obj)
