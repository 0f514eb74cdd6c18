"""Serve the agent API on the event loop and a fixed database thread pool, without middleware.

Django's ASGI handler gives every request its own thread (a per-request thread-sensitive
executor, with its own database connection) and runs sync-only middleware such as WhiteNoise in
a thread that blocks while an async view runs. For the agent API that means one parked thread per
open wait, and a new thread and a new database connection for every short GET.

Under uvicorn, this router sends /api/v1/ to a Django handler with no middleware and no
per-request thread context:

- async views (the wait) run on the event loop; their database work goes to the API's small,
  fixed thread pool (operations.api.wait.run_db), so an open wait holds no thread at all;
- sync views run on that same pool, whose threads keep their database connections (CONN_MAX_AGE),
  so a GET costs one pooled query round trip, not a thread and a connection setup.

The API needs none of the skipped middleware: it is CSRF-exempt and token-authenticated, keeps no
session and serves no static files. The two things the middleware does that the API needs are
done here: the Host header is checked against ALLOWED_HOSTS (CommonMiddleware's `get_host()`; a
request for another host is a 400 `host_not_allowed`, as the dashboard answers 400), and
authenticated answers say `Cache-Control: no-store` (operations/infrastructure/no_store.py). The dashboard and
the admin go through the ordinary Django ASGI application. Tests that use Django's test client (WSGI) run
the same views through the ordinary stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.urls import set_script_prefix
from django.utils.cache import patch_cache_control

from operations.agents.identities import bearer_token
from operations.api import answers
from operations.api import selectors as api_selectors
from operations.api.errors import problem, unexpected
from operations.api.mcp_http import host_allowed
from operations.api.problems import ApiProblem
from operations.api.wait import run_db
from operations.infrastructure.no_store import mark_no_store

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]

API_PREFIX = "/api/v1/"
# getOperation, the read an agent repeats most: answered by the direct route below when it can be.
OPERATION_PATH = re.compile(r"/api/v1/operations/(op_[0-9A-HJKMNP-TV-Z]{26})")
# Where Django reports a refused Host, so one log filter sees the dashboard's and the API's.
security_logger = logging.getLogger("django.security.DisallowedHost")


class ThreadlessHandler(ASGIHandler):
    """Django's ASGI request handling minus the middleware chain and the per-request thread."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware: list[Callable[..., Any]] = []
        self._template_response_middleware: list[Callable[..., Any]] = []
        self._exception_middleware: list[Callable[..., Any]] = []
        self._middleware_chain = self._answer_in_json

    async def _answer_in_json(self, request: HttpRequest) -> HttpResponseBase:
        try:
            request.get_host()
        except DisallowedHost as exc:
            security_logger.warning("%s", exc)
            return problem(
                request,
                ApiProblem("host_not_allowed", "This server does not answer for that Host; use its own address."),
            )
        # Instead of Django's HTML error page: even a failure outside the views is a problem.
        try:
            # Django's own step after the middleware (private, so the stubs leave it out).
            return await self._get_response_async(request)  # type: ignore[attr-defined]
        except Exception as exc:  # answered as problem+json, logged there
            return unexpected(request, exc)

    def make_view_atomic(self, view: Callable) -> Callable:
        view = super().make_view_atomic(view)
        if iscoroutinefunction(view):
            return view

        async def on_api_db_threads(request: object, *args: Any, **kwargs: Any) -> object:
            return await run_db(view, request, *args, **kwargs)

        return on_api_db_threads

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Callable, send: Callable) -> None:
        """Django's ASGIHandler.handle without the request_started/finished signals.

        Their receivers (close_old_connections, reset_queries) are sync, so Django runs them on a
        thread for every request; here they have nothing to do: the API's database threads check
        their own connections (run_db). Everything else is Django's: the body, the request, the
        response, and cancelling the view when the client goes away (a wait must not outlive it).
        """
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            # create_request hands back an error response whenever it hands back no request.
            await self.send_response(error_response, send)  # type: ignore[arg-type]
            return
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(self._respond(request, send)),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                with contextlib.suppress(RequestAborted, asyncio.CancelledError):
                    task.result()
            else:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        body_file.close()

    async def _respond(self, request: HttpRequest, send: Callable) -> None:
        response = mark_no_store(request, await self.get_response_async(request))
        if not response.streaming and not response.has_header("Content-Length"):
            # What CommonMiddleware would add: lets keep-alive clients skip chunked decoding.
            # Not streaming, so an HttpResponse with content (the stubs type the base class).
            response["Content-Length"] = str(len(response.content))  # type: ignore[attr-defined]
        try:
            await self.send_response(response, send)
        finally:
            # The response's own resources to release (a private Django field, so not in the stubs).
            for closer in response._resource_closers:  # type: ignore[attr-defined]
                with contextlib.suppress(Exception):
                    closer()


def _operation_for_token(*, token: str, operation_id: str) -> HttpResponse | None:
    """getOperation's 200 for a live token's own operation, else None (run with run_db): the
    token check and the row in one statement, then the view's own rendering."""
    agent, op = api_selectors.token_operation(token=token, operation_id=operation_id)
    return None if agent is None or op is None else answers.operation_response(answers.render(op))


async def answer_directly(handler: ThreadlessHandler, scope: Scope, send: Callable) -> bool:
    """Answer a plain getOperation with one call on the database threads (the token and the row),
    without building a Django request, resolving the URL or running django-ninja, which cost more
    CPU than that call. Plain: GET, no query string, no body, a Host in ALLOWED_HOSTS, a bearer
    token. The answer is the view's own (answers.operation_response), with the headers the
    handler adds. False, having sent nothing, when the full handler must answer: any other request, an
    unknown or revoked token, an operation that is not the agent's, a database error."""
    if scope.get("method") != "GET" or scope.get("query_string"):
        return False
    match = OPERATION_PATH.fullmatch(scope.get("path", ""))
    if match is None or settings.USE_X_FORWARDED_HOST:
        return False
    headers: dict[bytes, bytes] = {}
    for name, value in scope.get("headers") or ():
        key = name.lower()
        if key in headers or key in (b"content-length", b"transfer-encoding"):
            return False  # repeated headers and request bodies: the full handler's to judge
        headers[key] = value
    token = bearer_token(headers.get(b"authorization", b"").decode("latin-1"))
    if token is None or not host_allowed(headers.get(b"host", b"").decode("latin-1")):
        return False
    try:
        response = await run_db(_operation_for_token, token=token, operation_id=match[1])
    except Exception:  # a database outage or worse: the full handler answers it as problem+json, and logs it
        return False
    if response is None:
        return False
    # What ThreadlessHandler._respond adds to an authenticated answer.
    patch_cache_control(response, no_store=True)
    response["Content-Length"] = str(len(response.content))
    await handler.send_response(response, send)
    return True


def with_threadless_api(django_app: ASGIApp) -> ASGIApp:
    threadless = ThreadlessHandler()

    async def application(scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and scope.get("path", "").startswith(API_PREFIX):
            if not await answer_directly(threadless, scope, send):
                await threadless(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return application
