"""`notifications/tasks/status` on an open `subscriptions/listen` stream (MCP 2026-07-28).

A client that keeps a stream open names the tasks it follows (`notifications.taskIds`; the
extension's earlier draft called it `tasksStatus`). The acknowledgement lists the ones it will
hear about — the caller's own, so another agent's id is left out exactly like an unknown one —
then each gets its current state and one notification per change, the same DetailedTask a
`tasks/get` would answer at that moment (with a fresh requestState). The stream ends on its own,
gracefully, once every followed task is done.

It parks on the same per-process watcher as the API's waits (one query per tick for all of them),
and checks the caller's token before every notification and at least every MCP_STREAM_RECHECK_S:
a revoked token's stream ends with an error instead of handing out more.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Literal, cast

from django.conf import settings
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import (
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    Notification,
    ServerNotification,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from operations.api.mcp_caller import REVOKED, UNAUTHENTICATED_CODE, McpCaller, caller_in
from operations.api.mcp_tasks import EXTENSION_ID, WORKING, TaskView, declares_tasks, detailed_task, load_tasks
from operations.api.problems import ApiProblem
from operations.api.wait import TIMED_OUT, run_db, wait_for_change

STATUS_METHOD = "notifications/tasks/status"


class TaskStatusNotification(Notification[dict[str, Any], Literal["notifications/tasks/status"]]):
    method: Literal["notifications/tasks/status"] = "notifications/tasks/status"
    params: dict[str, Any]


def _requested(params: SubscriptionsListenRequestParams) -> list[str]:
    extra = params.notifications.model_extra or {}
    wanted = extra.get("taskIds", extra.get("tasksStatus"))
    if wanted is None:
        return []
    if not isinstance(wanted, list) or not all(isinstance(item, str) for item in wanted):
        raise MCPError(code=INVALID_PARAMS, message="notifications.taskIds must be a list of task ids")
    if len(wanted) > settings.MCP_LISTEN_MAX_TASKS:
        raise MCPError(
            code=INVALID_PARAMS, message=f"Follow at most {settings.MCP_LISTEN_MAX_TASKS} tasks on one stream"
        )
    return list(dict.fromkeys(wanted))


async def listen(ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams) -> Any:
    caller = caller_in(ctx.request)
    subscription_id = ctx.request_id
    if subscription_id is None:
        raise MCPError(code=INVALID_PARAMS, message="subscriptions/listen requires a request id")
    wanted = _requested(params)
    if wanted and not declares_tasks(ctx.meta):
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="Missing required client capability",
            data={"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}},
        )
    views = await run_db(load_tasks, agent_id=caller.agent_id, task_ids=wanted)
    honored = [task_id for task_id in wanted if task_id in views]
    meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
    # Only task status is served on these streams: the tool list, prompts and resources never change.
    ack = SubscriptionsAcknowledgedNotification(
        params=SubscriptionsAcknowledgedNotificationParams(
            notifications=SubscriptionFilter.model_validate({"taskIds": honored}), _meta=meta
        )
    )
    await ctx.session.send_notification(ack, related_request_id=subscription_id)
    for task_id in honored:
        await _notify(ctx, caller, views[task_id], meta)
    following = {task_id: views[task_id] for task_id in honored if views[task_id].status == WORKING}
    while following:
        changed = await _next_change(caller, following)
        if not await caller.still_valid():
            raise MCPError(code=UNAUTHENTICATED_CODE, message=REVOKED)
        if not changed:
            continue
        fresh = await run_db(load_tasks, agent_id=caller.agent_id, task_ids=changed)
        for task_id in changed:
            view = fresh.get(task_id)
            if view is None:
                following.pop(task_id, None)
                continue
            await _notify(ctx, caller, view, meta)
            if view.status == WORKING:
                following[task_id] = view
            else:
                following.pop(task_id, None)
    return SubscriptionsListenResult(_meta=meta)


async def _notify(ctx: ServerRequestContext[Any, Any], caller: McpCaller, view: TaskView, meta: dict) -> None:
    notification = TaskStatusNotification(params={**detailed_task(view, agent_id=caller.agent_id), "_meta": meta})
    # The session sends any notification model; its annotation names the spec's union only.
    await ctx.session.send_notification(cast(ServerNotification, notification), related_request_id=ctx.request_id)


async def _next_change(caller: McpCaller, following: dict[str, TaskView]) -> list[str]:
    """The followed tasks whose operation changed, or [] after MCP_STREAM_RECHECK_S without a change."""
    waits = {
        asyncio.ensure_future(
            wait_for_change(
                agent_id=caller.agent_id,
                operation_id=task_id,
                timeout_s=settings.MCP_STREAM_RECHECK_S,
                after_sequence=view.sequence,
            )
        ): task_id
        for task_id, view in following.items()
    }
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            if not wait.done():
                wait.cancel()
        for wait in waits:
            with contextlib.suppress(asyncio.CancelledError, ApiProblem):
                await wait
    changed = []
    for wait in done:
        exc = wait.exception()
        if isinstance(exc, ApiProblem):
            raise MCPError(code=INVALID_PARAMS, message=exc.detail, data={"code": exc.code})
        if exc is not None:
            raise exc
        if wait.result() is not TIMED_OUT:
            changed.append(waits[wait])
    return changed
