"""Request bodies capped before anything reads them: the ASGI layer in front of Django.

Django's ASGI handler reads a whole request body into a temporary file (on disk past
FILE_UPLOAD_MAX_MEMORY_SIZE) before the first line of a view or middleware runs, so before the
API token, the session or the Slack signature is checked: a 200 MiB chunked POST with a bad token
cost 200 MiB of disk and the time to write it. This layer decides first, per request path:

- a `Content-Length` over the path's cap is answered 413 at once, and no byte of the body is read;
- a body without one (chunked) is counted as it arrives; at the first byte over the cap the
  client is answered 413 and Django is told the client went away, so it reads nothing more;
- a body at or under the cap goes through untouched, and Django's own limits still apply.

The cap of a path is the one of the longest matching prefix in REQUEST_BODY_PATH_CAPS, else
REQUEST_BODY_MAX_BYTES. A refusal is RFC 9457 problem JSON with the agent API's code
`body_too_large`, and closes the connection, so a client still sending stops being read.

Any answer that starts before the body was read to its end (this layer's 413, /mcp's refusals,
the MCP SDK's own) carries `Connection: close`, so the server ends the connection after it: the
unread rest of the body is never parsed as the client's next request (request smuggling through a
proxy that reuses its upstream connections). A client that goes away in the middle of its body is
one log line here; Django and /mcp then drop the request and answer nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("pollerdash.requests")
CLOSE = (b"connection", b"close")


def cap_for(path: str, *, caps: Mapping[str, int], default: int) -> tuple[str, int]:
    """The prefix that decides `path`'s cap (the longest that matches; "" for the default) and the cap."""
    matching = [prefix for prefix in caps if path.startswith(prefix)]
    if not matching:
        return "", default
    prefix = max(matching, key=len)
    return prefix, caps[prefix]


def declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, or None without one that is a single whole number (the body is
    then counted as it arrives, like a chunked one; the HTTP server refuses most such requests first)."""
    values = {value.strip() for name, value in scope.get("headers", ()) if name.lower() == b"content-length"}
    if len(values) != 1:
        return None
    (value,) = values
    return int(value) if value.isdigit() else None


def has_body(scope: Scope) -> bool:
    """Whether the request says a body follows (a Content-Length above 0, or any Transfer-Encoding)."""
    for name, value in scope.get("headers", ()):
        name = name.lower()
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"0", b"")):
            return True
    return False


def closing(message: Message) -> Message:
    """A response start that ends the connection after it (its own `Connection` header replaced)."""
    headers = [(name, value) for name, value in message.get("headers", ()) if name.lower() != b"connection"]
    return {**message, "headers": [*headers, CLOSE]}


def _too_large(path: str, *, prefix: str, cap: int) -> tuple[Message, Message]:
    where = f"to {prefix}" if prefix else "here"
    body = json.dumps(
        {
            "type": "https://pollerdash.dev/problems/body_too_large",
            "title": "Request body too large",
            "status": 413,
            "detail": f"Request bodies {where} are limited to {cap} bytes.",
            "instance": path[:200],
            "code": "body_too_large",
        },
        separators=(",", ":"),
    ).encode()
    start = {
        "type": "http.response.start",
        "status": 413,
        "headers": [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
            # The rest of the body will not be read: the connection ends with this answer.
            CLOSE,
        ],
    }
    return start, {"type": "http.response.body", "body": body, "more_body": False}


def with_body_limits(app: ASGIApp, *, caps: Mapping[str, int], default: int) -> ASGIApp:
    """`app` behind the caps (bytes per path prefix; `default` for every other path)."""
    caps = dict(caps)

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path = scope.get("path", "")
        prefix, cap = cap_for(path, caps=caps, default=default)
        declared = declared_length(scope)
        if declared is not None and declared > cap:
            for message in _too_large(path, prefix=prefix, cap=cap):
                await send(message)
            return

        received = 0
        refused = False
        response_started = False
        body_read = not has_body(scope)

        async def limited_receive() -> Message:
            nonlocal received, refused, body_read
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.disconnect" and not body_read:
                body_read = True  # nothing more will come; said once
                logger.info(
                    "client went away mid-body: %s %s after %d bytes", scope.get("method"), path[:200], received
                )
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    refused = True
                    if not response_started:
                        for answer in _too_large(path, prefix=prefix, cap=cap):
                            await send(answer)
                    # What Django does when a client goes away mid-body: drop the request, answer nothing.
                    return {"type": "http.disconnect"}
                body_read = body_read or not message.get("more_body", False)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal response_started
            if refused and not response_started:
                return  # the 413 was the answer
            if message["type"] == "http.response.start":
                response_started = True
                if not body_read:
                    # Answered before the body's end: what is left of it must not become a request.
                    message = closing(message)
            await send(message)

        await app(scope, limited_receive, guarded_send)

    return application
