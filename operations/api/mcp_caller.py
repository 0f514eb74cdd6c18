"""Who is calling over MCP: the agent whose bearer token came with this HTTP request.

The /mcp endpoint (operations/api/mcp_http.py) authenticates every request before the MCP server
sees it and leaves the caller in the ASGI scope; tools and task methods read it from there. Nothing
is kept between requests, so any web replica answers any request. A stream that stays open (a
bounded wait, a `subscriptions/listen` stream) checks the token again before it hands out more,
so revoking a token also ends what it already opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from operations.agents.identities import agent_authenticate
from operations.api.problems import ApiProblem
from operations.api.wait import run_db
from operations.models import Agent

SCOPE_KEY = "pollerdash.mcp_caller"
REVOKED = "Your token was revoked or is unknown; nothing more is sent on it."
# A server-defined JSON-RPC code (-32000 to -32099): the bearer token stopped being valid mid-call.
UNAUTHENTICATED_CODE = -32001


@dataclass(frozen=True)
class McpCaller:
    agent: Agent
    # Held in memory only, to check again on long streams; never logged, never stored.
    token: str

    @property
    def agent_id(self) -> int:
        return self.agent.pk

    async def still_valid(self) -> bool:
        found = await run_db(agent_authenticate, token=self.token)
        return found is not None and found.pk == self.agent.pk

    async def ensure_valid(self) -> None:
        if not await self.still_valid():
            raise ApiProblem("unauthenticated", REVOKED)


def caller_in(request: Any) -> McpCaller:
    """The caller the endpoint put in this request's scope (a Starlette request, or the context's)."""
    scope = getattr(request, "scope", None) or {}
    caller = scope.get(SCOPE_KEY)
    if not isinstance(caller, McpCaller):
        # Only the /mcp endpoint serves these handlers, and it never passes a request without one.
        raise ApiProblem("unauthenticated", "Send Authorization: Bearer <token> with every request to /mcp.")
    return caller
