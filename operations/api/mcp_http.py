"""MCP over Streamable HTTP at /mcp, inside the uvicorn web process (docs/DESIGN.md section 9, "MCP").

An agent's host holds its bearer token and nothing else: every request to /mcp carries
`Authorization: Bearer pdt_…`, checked here (401 with `WWW-Authenticate: Bearer` for none, an
unknown or a revoked token) before the MCP server sees it, after the checks the JSON API makes
too: the Host against ALLOWED_HOSTS (400 `host_not_allowed`), an Origin, when a browser sends
one, against SITE_URL and CSRF_TRUSTED_ORIGINS (403 `origin_not_allowed`: DNS rebinding), no
query string (400 `unknown_field`: a token belongs in the header, where no log writes it) and the
API's body cap (413 `body_too_large`); only POST is served (405 `method_not_allowed`: there is no
standalone stream and no session to delete). Every answer is `Cache-Control: no-store`. Each of
those refusals comes before the body is read, so it says `Connection: close` (the unread body
must not be read as a next request). The body of an authenticated request is read here, whole,
before the SDK sees it: a client that goes away mid-body is dropped without an answer (the body
guard logs one line), where the SDK would log a traceback and try a 500.

The SDK's session manager runs stateless: each request is served on its own, from the database
and the deployment's key, so a second web replica answers any request (a task's state travels in
its HMAC-sealed requestState, operations/api/mcp_state.py). The manager starts with the first
request on each event loop (uvicorn runs with `--lifespan off`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import DatabaseError
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

from operations.agents.identities import bearer_token
from operations.api import mcp_fast
from operations.api.mcp_caller import SCOPE_KEY, McpCaller
from operations.api.mcp_results import logger, unavailable
from operations.api.problems import PROBLEM_CONTENT_TYPE, ApiProblem, problem_body
from operations.api.wait import run_db

Scope = dict[str, Any]
Receive = Callable[..., Any]
Send = Callable[..., Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]

MCP_PATHS = frozenset({"/mcp", "/mcp/"})
security_logger = logging.getLogger("django.security.DisallowedHost")
UNAUTHENTICATED = (
    "Send Authorization: Bearer <token> with a live token on every request to /mcp "
    "(manage.py create_agent_token NAME makes one)."
)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def host_allowed(host: str) -> bool:
    """Django's own rule (ALLOWED_HOSTS, with DEBUG's local defaults), as the API applies it."""
    domain, _port = split_domain_port(host)
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return bool(domain) and validate_host(domain, allowed)


def origin_allowed(origin: str) -> bool:
    """A browser's Origin must be the site's own or one of CSRF_TRUSTED_ORIGINS (wildcards as Django)."""
    parts = urlsplit(origin)
    if not parts.scheme or not parts.netloc:
        return False
    site = urlsplit(settings.SITE_URL)
    if (parts.scheme, parts.netloc) == (site.scheme, site.netloc):
        return True
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        allowed = urlsplit(trusted)
        # "https://*.example.com" means any subdomain, as in Django's CSRF check (".example.com").
        if allowed.scheme == parts.scheme and is_same_domain(parts.netloc, allowed.netloc.lstrip("*")):
            return True
    return False


async def send_problem(send: Send, problem: ApiProblem, *, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(problem_body(problem, instance="/mcp"), separators=(",", ":")).encode()
    extra = {**problem.headers, **(headers or {})}
    await send(
        {
            "type": "http.response.start",
            "status": problem.http_status,
            "headers": [
                (b"content-type", PROBLEM_CONTENT_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"x-content-type-options", b"nosniff"),
                # Sent before the body is read: the connection ends, so no byte of it is read as a request.
                (b"connection", b"close"),
                *((name.lower().encode(), value.encode("latin-1")) for name, value in extra.items()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, body: bytes) -> None:
    """A 200 JSON answer with the headers the SDK's own carries (Starlette's Response)."""
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def no_store(send: Send) -> Send:
    """Every answer to a bearer token is uncacheable (the SDK's own responses say nothing)."""

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"cache-control"]
            message = {**message, "headers": [*headers, (b"cache-control", b"no-store")]}
        await send(message)

    return sending


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body (the body guard in front caps it), or None when the client left first."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


def replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for the SDK: the body read above as one message, then the client's own messages
    (a disconnect while the tool runs)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receiving() -> dict[str, Any]:
        return pending.pop() if pending else await receive()

    return receiving


def refusal(scope: Scope) -> tuple[ApiProblem, dict[str, str] | None] | None:
    """The refusal of a request on its URL, Host, Origin, method or declared length (each before
    its token is looked at and its body read), with its extra headers; None when none applies."""
    if scope.get("query_string"):
        # Never read, never authenticated with: a token in a URL ends up in logs and histories.
        return ApiProblem(
            "unknown_field", "/mcp takes no query parameters; send the token as Authorization: Bearer."
        ), None
    host = _header(scope, b"host") or ""
    if not host_allowed(host):
        security_logger.warning("Invalid HTTP_HOST header for /mcp: %r.", host[:100])
        return ApiProblem("host_not_allowed", "This server does not answer for that Host; use its own address."), None
    origin = _header(scope, b"origin")
    if origin is not None and not origin_allowed(origin):
        return ApiProblem(
            "origin_not_allowed",
            "Requests from this web origin are refused; MCP clients send no Origin, or the site's own.",
        ), None
    if scope.get("method") != "POST":
        # Stateless: there is no standalone stream to open (GET) and no session to end (DELETE).
        return ApiProblem("method_not_allowed", f"{scope.get('method')} is not allowed here; use POST."), {
            "Allow": "POST"
        }
    length = _header(scope, b"content-length")
    if length is not None and length.strip().isdigit() and int(length) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return ApiProblem("body_too_large", f"Request bodies are limited to {limit} bytes."), None
    return None


@dataclass
class _Running:
    manager: Any
    ready: asyncio.Event
    task: asyncio.Task


class McpEndpoint:
    """The /mcp ASGI endpoint: the checks above, then the SDK's Streamable HTTP session manager."""

    def __init__(self) -> None:
        self._server: Any = None
        self._running: dict[asyncio.AbstractEventLoop, _Running] = {}

    def _lowlevel(self) -> Any:
        if self._server is None:
            # Built on first use: the tools' modules need Django's app registry, which asgi.py
            # loads before any request arrives.
            from operations.api.mcp import build_server

            self._server = build_server()._lowlevel_server
        return self._server

    async def _manager(self) -> Any:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        loop = asyncio.get_running_loop()
        running = self._running.get(loop)
        if running is None:
            for old in [key for key in self._running if key.is_closed()]:
                del self._running[old]
            manager = StreamableHTTPSessionManager(
                self._lowlevel(),
                stateless=True,
                json_response=True,
                max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
            )
            ready = asyncio.Event()
            task = loop.create_task(self._serve(manager, ready), name="pollerdash-mcp-manager")
            running = self._running[loop] = _Running(manager=manager, ready=ready, task=task)
        await running.ready.wait()
        return running.manager

    @staticmethod
    async def _serve(manager: Any, ready: asyncio.Event) -> None:
        async with manager.run():
            ready.set()
            # Until the event loop stops (the task is cancelled then, which closes the manager).
            await asyncio.Event().wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        send = no_store(send)
        refused = refusal(scope)
        if refused is not None:
            problem, headers = refused
            await send_problem(send, problem, headers=headers)
            return
        token = bearer_token(_header(scope, b"authorization") or "")
        # A plain tasks/get names its task in a routing header: read with the token check, in one
        # call on the database threads (operations/api/mcp_fast.py).
        task_id = mcp_fast.routed_task(scope.get("headers") or ())
        try:
            agent, task = (
                await run_db(mcp_fast.authenticate_and_load, token=token, task_id=task_id) if token else (None, None)
            )
        except DatabaseError as exc:
            logger.warning("MCP: database unavailable (%s)", exc)
            await send_problem(send, unavailable())
            return
        if agent is None or token is None:
            await send_problem(
                send,
                ApiProblem("unauthenticated", UNAUTHENTICATED),
                headers={"WWW-Authenticate": 'Bearer realm="pollerdash"'},
            )
            return
        body = await read_body(receive)
        if body is None:
            return  # the client went away mid-body: nobody to answer
        if task_id is not None:
            fast = mcp_fast.answer(
                body,
                headers=scope["headers"],
                view=task,
                agent_id=agent.pk,
                server_info=self._lowlevel().server_info_stamp,
            )
            if fast is not None:
                await send_json(send, fast)
                return
        scope = {**scope, SCOPE_KEY: McpCaller(agent=agent, token=token)}
        manager = await self._manager()
        await manager.handle_request(scope, replay(body, receive), send)


def with_mcp(app: ASGIApp) -> ASGIApp:
    """Serve /mcp here and everything else with `app`."""
    endpoint = McpEndpoint()

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path", "") in MCP_PATHS:
            await endpoint(scope, receive, send)
        else:
            await app(scope, receive, send)

    return application
