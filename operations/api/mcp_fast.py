"""`tasks/get` answered without the SDK's per-request machinery: the call an agent repeats most.

A task's client polls `tasks/get` every few seconds for as long as its job runs. Through the SDK
(a Starlette request, the transport checks, the envelope's pydantic models, the middleware chain,
the extension's binding, the result's re-validation and stamping) that call cost about three times
the CPU of the work it does — one token check and one row read — and a second hop to the database
threads (and a second statement). Here the /mcp endpoint (operations/api/mcp_http.py) answers the ordinary case itself:

- before the body is read, one statement on the database threads checks the bearer token
  (revocation included) and reads, for a live token only, the task the routing header `Mcp-Name`
  names, as that token's agent (another agent's task reads as unknown);
- the body must then be a well-formed 2026-07-28 `tasks/get` that the SDK would serve: one JSON-RPC
  request, the SDK's own envelope ladder passed (`classify_inbound_request`: the `_meta` pair, the
  `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers agreeing with the body), the method's
  own parameter model (TaskParams) valid, the `taskId` the one read, the Tasks extension declared;
- the task must be running and its echoed requestState (when sent) this agent's, unaltered and
  unexpired (operations/api/mcp_state.py).

The answer is the SDK's byte for byte: the Task (operations/api/mcp_tasks.py), `resultType` and the
server's `serverInfo` stamp, in the SDK's JSON. Anything else — an unknown task, a refused state, a
finished task (its result is the whole Operation), another version, a batch, an odd header — goes
to the SDK with the agent already authenticated, which answers as it always has
(tests/api/test_mcp_fast.py compares the two answers).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from mcp.server.streamable_http import CONTENT_TYPE_JSON
from mcp.shared.inbound import InboundModernRoute, classify_inbound_request, find_duplicated_routing_header
from mcp_types import SERVER_INFO_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from operations.agents.identities import agent_authenticate
from operations.api import mcp_state
from operations.api.mcp_task_view import WORKING, TaskView, token_task
from operations.api.mcp_tasks import TaskParams, declares_tasks, detailed_task
from operations.models import Agent

METHOD = "tasks/get"
ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})


def routed_task(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The task id of a request whose routing headers say it is a 2026-07-28 `tasks/get` the SDK
    would take as JSON (Content-Type and Accept), each header once; None for any other request."""
    seen: dict[bytes, str] = {}
    for name, value in headers:
        key = name.lower()
        if key in (b"mcp-method", b"mcp-name", b"mcp-protocol-version", b"content-type", b"accept"):
            if key in seen:
                return None
            seen[key] = value.decode("latin-1")
    if seen.get(b"mcp-method") != METHOD or seen.get(b"mcp-protocol-version") not in MODERN_PROTOCOL_VERSIONS:
        return None
    if not seen.get(b"content-type", "").lower().startswith(CONTENT_TYPE_JSON):
        return None
    accepted = {part.split(";")[0].strip().lower() for part in seen.get(b"accept", "").split(",")}
    if not accepted & {CONTENT_TYPE_JSON, "application/*", "*/*"}:
        return None
    return seen.get(b"mcp-name")


def authenticate_and_load(*, token: str, task_id: str | None) -> tuple[Agent | None, TaskView | None]:
    """The token's agent (None: unknown or revoked) and, for a live token, its task `task_id`, in one
    statement (run with run_db)."""
    if task_id is None:
        return agent_authenticate(token=token), None
    return token_task(token=token, task_id=task_id)


def answer(
    body: bytes,
    *,
    headers: Iterable[tuple[bytes, bytes]],
    view: TaskView | None,
    agent_id: int,
    server_info: dict[str, Any],
) -> bytes | None:
    """The SDK's response body to this `tasks/get` of the running task `view`, or None when the SDK
    must answer the request itself."""
    if view is None or view.status != WORKING:
        return None
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(decoded, dict) or decoded.keys() != ENVELOPE_KEYS:
        return None
    request_id, params = decoded["id"], decoded["params"]
    if decoded["jsonrpc"] != "2.0" or decoded["method"] != METHOD or type(request_id) not in (int, str):
        return None
    if not isinstance(params, dict) or not declares_tasks(params.get("_meta")):
        return None
    pairs = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in headers]
    if find_duplicated_routing_header(pairs) is not None:
        return None
    if not isinstance(classify_inbound_request(decoded, headers=dict(pairs)), InboundModernRoute):
        return None
    try:
        typed = TaskParams.model_validate(params, by_name=False)
    except ValidationError:
        return None
    if typed.task_id != view.task_id:
        return None
    if typed.request_state is not None and not mcp_state.accepts(
        typed.request_state, agent_id=agent_id, task_id=view.task_id, digest=view.digest, now=time.time()
    ):
        return None
    result = {
        **detailed_task(view, agent_id=agent_id),
        "resultType": "complete",
        "_meta": {SERVER_INFO_META_KEY: server_info},
    }
    # The SDK's serialisation of a JSON-RPC response (mcp.server._streamable_http_modern._write).
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=(",", ":")).encode()
