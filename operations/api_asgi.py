"""Serve long API waits on the event loop alone: no middleware thread, no per-request thread.

Django's ASGI handler gives every request its own thread-sensitive executor (a thread that lives
as long as the request) and runs sync-only middleware such as WhiteNoise in a thread that blocks
while the async view runs. For a 25-50 s wait that is one parked thread per waiting agent. This
router sends only the wait requests to a Django handler without middleware and without a
per-request thread context; the wait view then runs entirely on the event loop, doing its
database work on the API's small fixed thread pool (operations.api_wait.run_db). Everything
else goes through the ordinary Django ASGI application.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]

# The API's async, read-only endpoints (GET only: nothing here runs middleware such as CSRF).
THREADLESS_PATHS = re.compile(r"^/api/v1/operations/[^/]+/wait$")


class ThreadlessHandler(ASGIHandler):
    """Django's ASGI request handling minus the middleware chain and the thread context."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._middleware_chain = convert_exception_to_response(self._get_response_async)

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        await self.handle(scope, receive, send)


def with_threadless_api(django_app: ASGIApp) -> ASGIApp:
    threadless = ThreadlessHandler()

    async def application(scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and scope.get("method") == "GET" and THREADLESS_PATHS.match(scope.get("path", "")):
            await threadless(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return application
