"""The agent API's authentication: `Authorization: Bearer <token>` (docs/DESIGN.md section 9)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.security import HttpBearer

from operations.agents.identities import agent_authenticate, bearer_token
from operations.api import wait as api_wait
from operations.models import Agent


class BearerToken(HttpBearer):
    """`Authorization: Bearer <token>`; the token's SHA-256 must match a live AgentToken."""

    def __init__(self, *, asynchronous: bool = False) -> None:
        super().__init__()
        # django-ninja awaits the result when this is set: the async wait authenticates on the
        # API's database threads, never on the event loop.
        self.is_async = asynchronous

    def __call__(self, request: HttpRequest) -> Any:
        token = bearer_token(request.headers.get("Authorization", ""))
        if self.is_async:
            return self._authenticate_async(token)
        return agent_authenticate(token=token) if token else None

    async def _authenticate_async(self, token: str | None) -> Agent | None:
        return await api_wait.run_db(agent_authenticate, token=token) if token else None

    def authenticate(self, request: HttpRequest, token: str) -> Agent | None:
        return agent_authenticate(token=token)
