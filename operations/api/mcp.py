"""MCP tools over the agent services (docs/DESIGN.md section 9): `manage.py mcp_server` (stdio).

The server acts as one agent: the owner of the token in POLLERDASH_TOKEN (checked on every call,
so revoking the token stops the server's access at once), or, for an operator running it
locally, the agent named by `--agent NAME`. Tools call the same services and selectors as the
JSON API; `wait_job` parks on the same shared watcher.

Every result's text starts with `DONE (<status>)`, `NOT DONE`, `NEEDS HUMAN` or
`TIMED OUT WAITING`, and its structured content is the Operation object (the list object for
`list_open_jobs`). Bad input comes back as an error result naming the problem code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from django.conf import settings
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import StrictInt

from operations import quotas, registration, selectors, services
from operations.agents import agent_authenticate
from operations.api import selectors as api_selectors
from operations.api import wait as api_wait
from operations.api.lists import LIMIT_DEFAULT, LIMIT_MAX, open_list
from operations.api.parsing import parse_deadline, parse_limit, parse_timeout
from operations.api.problems import ApiProblem, not_found, problem_body, quota_exceeded
from operations.api.schemas import ListOut, OperationOut
from operations.models import Agent
from operations.representation import operation_object

INSTRUCTIONS = (
    "pollerdash watches long-running external jobs for you. Call list_open_jobs at the start of every run: "
    "it shows unfinished jobs and finished ones you have not acknowledged. Register a job with watch_job, then "
    "wait_job (at most 50 s per call) or get_job later. A job is finished only when a result says DONE; NOT DONE, "
    "NEEDS HUMAN and TIMED OUT WAITING all mean it is not finished - never report it as complete, never resubmit "
    "a job a human is deciding on. After reading a DONE result, call ack_job."
)


@dataclass(frozen=True)
class Identity:
    """Who the server acts as: a token (re-checked every call) or a named agent."""

    token: str | None = None
    agent_name: str | None = None

    def agent(self) -> Agent:
        if self.token is not None:
            agent = agent_authenticate(token=self.token)
            if agent is None:
                raise ApiProblem("unauthenticated", "POLLERDASH_TOKEN is unknown or revoked.")
            return agent
        agent = Agent.objects.filter(name=self.agent_name).first()
        if agent is None:
            raise ApiProblem("unauthenticated", f"There is no agent named {self.agent_name!r}.")
        return agent


def headline(obj: dict[str, Any], *, timed_out: bool = False) -> str:
    """The first words of every tool result: the one thing a model must not misread."""
    if obj["done"]:
        return f"DONE ({obj['status']})"
    if obj["status"] == "needs_attention":
        return "NEEDS HUMAN"
    if timed_out:
        return "TIMED OUT WAITING (job still running)"
    return "NOT DONE"


def next_step(obj: dict[str, Any]) -> str:
    """What to do next, in this server's tools: an MCP agent has no HTTP access to follow the
    API's own hint (which names HTTP calls)."""
    later = f"in {obj['retry_after_s']} s or later" if obj["retry_after_s"] is not None else "later"
    if obj["status"] == "needs_attention":
        reason = (obj.get("escalation") or {}).get("reason") or "stopped"
        deciding = "whether the result is still wanted" if reason == "business_deadline_passed" else "what happens next"
        return (
            f"A human is deciding {deciding} ({reason}). Do not resubmit the job and do not report it as "
            f"complete. Check again with get_job {later}, or end your turn: list_open_jobs shows it next run."
        )
    if not obj["done"]:
        return (
            "Do not report it as complete. Call wait_job now (it returns when the job finishes), or get_job "
            f"{later}, or end your turn: list_open_jobs shows it next run."
        )
    ack = "" if obj["acknowledged_at"] else " Then call ack_job."
    if obj["result"] is not None:
        return f"The result is in the structured content (`result`).{ack}"
    error = obj["error"] or {}
    return (
        f"It ended {obj['status']} ({error.get('code')}); details are in `error`. Do not resubmit it "
        f"automatically; report the outcome.{ack}"
    )


def operation_result(obj: dict[str, Any], *, timed_out: bool = False, note: str = "") -> CallToolResult:
    text = (
        f"{headline(obj, timed_out=timed_out)} {obj['id']} ({obj['provider']} job {obj['provider_job_id']}). "
        f"{note}{next_step(obj)}"
    )
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=obj)


def error_result(problem: ApiProblem) -> CallToolResult:
    body = problem_body(problem)
    text = f"ERROR {problem.code}: {problem.detail}"
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=body, is_error=True)


def _problem_of(exc: Exception) -> ApiProblem | None:
    if isinstance(exc, ApiProblem):
        return exc
    if isinstance(exc, registration.OperationNotFound):
        return not_found(str(exc))
    if isinstance(exc, registration.OperationConflict):
        return ApiProblem(exc.code, exc.message + ".")
    if isinstance(exc, quotas.QuotaExceeded):
        return quota_exceeded(quota=exc.quota, message=exc.message, retry_after_s=exc.retry_after_s)
    if isinstance(exc, registration.RegistrationError):
        return ApiProblem(
            exc.problems[0].code if exc.problems[0].code != "invalid_field" else "invalid_value",
            f"{exc}.",
            status=422,
        )
    return None


def build_server(*, identity: Identity) -> MCPServer:
    server = MCPServer(name="pollerdash", instructions=INSTRUCTIONS, version="1")

    async def call(work: Callable[[Agent], dict[str, Any]]) -> dict[str, Any]:
        return await api_wait.run_db(lambda: work(identity.agent()))

    async def guarded(make: Callable[[], Awaitable[CallToolResult]]) -> CallToolResult:
        try:
            return await make()
        except Exception as exc:
            problem = _problem_of(exc)
            if problem is None:
                raise
            return error_result(problem)

    def render(op: Any) -> dict[str, Any]:
        return operation_object(op, open_escalation=selectors.open_escalation(operation=op))

    @server.tool(
        description="Start watching a provider job. Returns at once with NOT DONE and the operation id (op_...); "
        "registering the same job again returns the same operation. deadline: RFC 3339 with offset."
    )
    async def watch_job(
        provider: str,
        provider_job_id: str,
        purpose: str | None = None,
        deadline: str | None = None,
        max_status_requests: StrictInt | None = None,
        metadata: dict[str, str] | None = None,
    ) -> Annotated[CallToolResult, OperationOut]:
        def work(agent: Agent) -> dict[str, Any]:
            request = registration.AgentRegistration(
                provider=provider,
                provider_job_id=provider_job_id,
                purpose=purpose or "",
                deadline_at=parse_deadline(deadline, pointer="/deadline") if deadline is not None else None,
                max_status_requests=max_status_requests,
                metadata=metadata,
            )
            return render(registration.operation_register_for_agent(agent=agent, request=request).operation)

        return await guarded(lambda: _op(call(work)))

    @server.tool(description="The job's status now. DONE (<status>) means finished; anything else is not.")
    async def get_job(operation_id: str) -> Annotated[CallToolResult, OperationOut]:
        def work(agent: Agent) -> dict[str, Any]:
            op = api_selectors.agent_operation(agent_id=agent.pk, operation_id=operation_id)
            if op is None:
                raise not_found(operation_id)
            return render(op)

        return await guarded(lambda: _op(call(work)))

    @server.tool(
        description="Wait up to timeout_s seconds (0-50, default 25) for the job to finish or need a human. "
        "TIMED OUT WAITING means still running: call again, or end your turn and use list_open_jobs next run."
    )
    async def wait_job(operation_id: str, timeout_s: StrictInt = 25) -> Annotated[CallToolResult, OperationOut]:
        async def run() -> CallToolResult:
            # The HTTP API's rule, from the same parser: 0-9999 seconds, above the maximum lowered to it.
            requested, applied = parse_timeout(str(timeout_s), default_s=25, max_s=settings.API_WAIT_MAX_S)
            agent = await api_wait.run_db(identity.agent)
            body = await api_wait.wait_result(
                agent_id=agent.pk, operation_id=operation_id, requested_s=requested, applied_s=applied
            )
            note = f"(Waited at most {applied} s, the longest one call waits.) " if applied < requested else ""
            return operation_result(body["operation"], timed_out=body["timed_out"], note=note)

        return await guarded(run)

    @server.tool(
        description="Your open jobs: unfinished ones (a human deciding first) and finished ones not yet "
        "acknowledged. Call this at the start of every run."
    )
    async def list_open_jobs(limit: StrictInt = 50, cursor: str | None = None) -> Annotated[CallToolResult, ListOut]:
        def work(agent: Agent) -> dict[str, Any]:
            applied = parse_limit(str(limit), default=LIMIT_DEFAULT, maximum=LIMIT_MAX)
            return open_list(agent_id=agent.pk, limit=applied, cursor=cursor)

        async def run() -> CallToolResult:
            body = await call(work)
            counts = body["counts"]
            if counts["needs_attention"]:
                head = "NEEDS HUMAN"
            elif counts["open_not_done"]:
                head = "NOT DONE"
            elif counts["done_unacknowledged"]:
                head = f"DONE ({counts['done_unacknowledged']} finished, not acknowledged)"
            else:
                head = "DONE (nothing open)"
            summary = (
                f"{counts['open_not_done']} unfinished ({counts['needs_attention']} with a human deciding), "
                f"{counts['done_unacknowledged']} finished and not acknowledged. Never report an unfinished job as "
                "complete; read each finished one with get_job, then ack_job it."
            )
            if body.get("next_cursor"):
                summary += " More: call list_open_jobs again with cursor=next_cursor."
            lines = [f"{head}: {summary}"]
            lines += [
                f"- {headline(item)} {item['id']} {item['provider']} job {item['provider_job_id']}"
                for item in body["data"]
            ]
            return CallToolResult(content=[TextContent(type="text", text="\n".join(lines))], structured_content=body)

        return await guarded(run)

    @server.tool(description="Acknowledge a finished job after reading its outcome; it leaves the open list.")
    async def ack_job(operation_id: str) -> Annotated[CallToolResult, OperationOut]:
        def work(agent: Agent) -> dict[str, Any]:
            return render(services.operation_acknowledge(agent=agent, operation_id=operation_id))

        return await guarded(lambda: _op(call(work)))

    @server.tool(
        description="Stop watching a job (it ends as closed, error watch_cancelled); pollerdash also sends the "
        "provider's cancel request where the provider has one."
    )
    async def cancel_job(operation_id: str, reason: str | None = None) -> Annotated[CallToolResult, OperationOut]:
        def work(agent: Agent) -> dict[str, Any]:
            return render(
                services.operation_cancel_by_agent(agent=agent, operation_id=operation_id, reason=reason or "")
            )

        return await guarded(lambda: _op(call(work)))

    _refuse_unknown_arguments(server)
    return server


def _refuse_unknown_arguments(server: MCPServer) -> None:
    """Like the JSON API's unknown_field: a misspelt argument (`deadlne`) is refused, never dropped.

    The SDK builds each tool's argument model with pydantic's default of ignoring extra keys; the
    pinned mcp version keeps the tools in `_tool_manager` (tests/api/test_mcp.py guards this)."""
    for tool in server._tool_manager.list_tools():
        model = tool.fn_metadata.arg_model
        model.model_config["extra"] = "forbid"
        model.model_rebuild(force=True)


async def _op(pending: Awaitable[dict[str, Any]]) -> CallToolResult:
    return operation_result(await pending)
