"""The MCP server's tools over the agent services (docs/DESIGN.md section 9, "MCP").

Served over Streamable HTTP at /mcp inside the web process (operations/api/mcp_http.py): every
request carries the agent's bearer token, so the tools act as that agent with the same isolation,
quotas, problem codes and audit actor as the JSON API, and call the same services and selectors.
`wait_job` parks on the same shared watcher. With the Tasks extension (operations/api/mcp_tasks.py,
and the 2025-11-25 experimental tasks in operations/api/mcp_legacy_tasks.py) `watch_job` and
`wait_job` can answer a task instead, which the client polls; `subscriptions/listen` streams
task status (operations/api/mcp_listen.py). The tools: operations/api/mcp_tools.py; their words:
operations/api/mcp_results.py.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import SubscriptionsListenRequestParams

from operations.api.mcp_legacy_tasks import legacy_tasks, task_result
from operations.api.mcp_listen import listen
from operations.api.mcp_results import database_unavailable
from operations.api.mcp_tasks import TaskParams, TasksExtension
from operations.api.mcp_tools import TOOLS

INSTRUCTIONS = (
    "pollerdash watches long-running external jobs for you. Call list_open_jobs at the start of every run: "
    "it shows unfinished jobs and finished ones you have not acknowledged. Register a job with watch_job, then "
    "wait_job (at most 50 s per call) or get_job later; a client with the tasks extension gets a task to poll "
    "instead. A job is finished only when a result says DONE; NOT DONE, NEEDS HUMAN and TIMED OUT WAITING all "
    "mean it is not finished - never report it as complete, never resubmit a job a human is deciding on. After "
    "reading a DONE result, call ack_job."
)


def build_server() -> MCPServer:
    """The server the /mcp endpoint serves: tools, the Tasks extension, task status streams."""
    server = MCPServer(
        name="pollerdash",
        instructions=INSTRUCTIONS,
        version="1",
        extensions=[TasksExtension()],
        middleware=[database_unavailable, legacy_tasks],
        # subscriptions/listen is served below, for task status only.
        subscriptions=False,
    )
    for tool, description in TOOLS:
        server.tool(description=description)(tool)
    _refuse_unknown_arguments(server)
    # Methods the extension API cannot bind: a spec method served our way (task status only), and
    # a 2025-11-25 method the 2026-07-28 revision removed (it answers -32601 there). The pinned mcp
    # version keeps the low-level server in `_lowlevel_server` (tests/api/test_mcp.py guards this).
    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams, listen)
    lowlevel.add_request_handler("tasks/result", TaskParams, task_result)
    return server


def _refuse_unknown_arguments(server: MCPServer) -> None:
    """Like the JSON API's unknown_field: a misspelt argument (`deadlne`) is refused, never dropped.

    The SDK builds each tool's argument model with pydantic's default of ignoring extra keys; the
    pinned mcp version keeps the tools in `_tool_manager` (tests/api/test_mcp.py guards this)."""
    for tool in server._tool_manager.list_tools():
        model = tool.fn_metadata.arg_model
        model.model_config["extra"] = "forbid"
        model.model_rebuild(force=True)
