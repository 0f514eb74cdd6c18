"""pollerdash-mcp: MCP over stdio for hosts that launch a command, holding the agent's token only.

    POLLERDASH_URL=https://pollerdash.example POLLERDASH_TOKEN=pdt_… pollerdash-mcp

It reads nothing else (no database URL, no SECRET_KEY, no Django: it imports httpx and the
standard library only) and relays each JSON-RPC message the host writes on stdin to
$POLLERDASH_URL/mcp with `Authorization: Bearer $POLLERDASH_TOKEN`, writing the answers (and any
notifications on a streamed answer) to stdout, one message per line. The server decides
everything; the bridge only adds the HTTP headers Streamable HTTP asks for (MCP-Protocol-Version,
Mcp-Method, Mcp-Name) and turns an HTTP refusal (401, 403, 413, …) into a JSON-RPC error for the
request it answered. A `notifications/cancelled` from the host stops that request.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

URL_ENV = "POLLERDASH_URL"
TOKEN_ENV = "POLLERDASH_TOKEN"
USER_AGENT = "pollerdash-mcp/1"
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
# The params key each method's Mcp-Name header mirrors (Streamable HTTP, and the Tasks extension).
NAME_PARAMS = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
    "tasks/result": "taskId",
}
# A server-defined JSON-RPC code (-32000 to -32099), as the server uses it: the token was refused.
UNAUTHENTICATED = -32001
HEADER_SAFE = re.compile(r"^[\x20-\x7e]*$")
# A line longer than this is not a message the server would accept either (its body cap is 64 KiB).
MAX_LINE = 1 << 20

Write = Callable[[dict[str, Any]], Awaitable[None]]


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def header_value(value: str) -> str:
    """A header-safe form of a name: as it is when printable ASCII, else the base64 sentinel form."""
    if HEADER_SAFE.match(value) and value == value.strip():
        return value
    return "=?base64?" + base64.b64encode(value.encode()).decode() + "?="


def routing_headers(message: dict[str, Any], *, handshake_version: str | None) -> dict[str, str]:
    """The headers Streamable HTTP wants beside the body, read from the body itself."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    method = message.get("method")
    params = _object(message.get("params"))
    modern = _object(params.get("_meta")).get(PROTOCOL_VERSION_META)
    if isinstance(modern, str) and isinstance(method, str):
        headers["MCP-Protocol-Version"] = modern
        headers["Mcp-Method"] = method
        key = NAME_PARAMS.get(method)
        name = params.get(key) if key is not None else None
        if isinstance(name, str):
            headers["Mcp-Name"] = header_value(name)
    elif handshake_version is not None and method != "initialize":
        headers["MCP-Protocol-Version"] = handshake_version
    return headers


def error(message_id: Any, code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": text}}


def refusal(message_id: Any, status: int, body: bytes) -> dict[str, Any]:
    """An HTTP refusal (the server's problem+json) as the JSON-RPC error of the request it answered."""
    try:
        problem = json.loads(body)
    except ValueError:
        problem = {}
    if isinstance(problem, dict) and isinstance(problem.get("error"), dict) and "jsonrpc" in problem:
        # Already a JSON-RPC answer (the MCP server's own 4xx): pass it on as it is.
        return problem
    detail = problem.get("detail") if isinstance(problem, dict) else None
    code = UNAUTHENTICATED if status == 401 else -32600
    return error(message_id, code, f"pollerdash answered HTTP {status}: {detail or 'refused'}")


async def sse_messages(response: httpx.Response) -> Any:
    """The JSON of each `data:` event of a text/event-stream answer."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield json.loads("\n".join(data))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield json.loads("\n".join(data))


class Bridge:
    def __init__(self, *, endpoint: str, token: str, write: Write, transport: httpx.AsyncBaseTransport | None = None):
        self.endpoint = endpoint
        self.write = write
        # No read timeout: a bounded wait or a stream lasts as long as the server says; the host
        # ends a request it no longer wants with notifications/cancelled.
        self.http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT},
            timeout=httpx.Timeout(30.0, read=None),
            follow_redirects=False,
            # Nothing from the environment but the two variables: no proxy, CA bundle or .netrc the
            # host's environment happens to name (a proxy would see the bearer token).
            trust_env=False,
            transport=transport,
        )
        self.handshake_version: str | None = None
        self.in_flight: dict[Any, asyncio.Task] = {}

    async def close(self) -> None:
        for task in list(self.in_flight.values()):
            task.cancel()
        await asyncio.gather(*self.in_flight.values(), return_exceptions=True)
        await self.http.aclose()

    async def handle_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            await self.write(error(None, -32700, "Parse error"))
            return
        if not isinstance(message, dict):
            await self.write(error(None, -32600, "Send one JSON-RPC message per line (no batches)"))
            return
        if "id" not in message:
            await self.notify(message)
            return
        if "method" not in message:
            # An answer to a server request: the stateless server sends none, so there is no one to give it to.
            return
        key = message["id"]
        task = asyncio.create_task(self.relay(message))
        self.in_flight[key] = task

        def forget(_done: asyncio.Task) -> None:
            self.in_flight.pop(key, None)

        task.add_done_callback(forget)

    async def notify(self, message: dict[str, Any]) -> None:
        if message.get("method") == "notifications/cancelled":
            task = self.in_flight.get(_object(message.get("params")).get("requestId"))
            if task is not None:
                task.cancel()
            return
        try:
            await self.http.post(
                self.endpoint,
                content=json.dumps(message).encode(),
                headers=routing_headers(message, handshake_version=self.handshake_version),
            )
        except httpx.HTTPError:
            pass  # a notification has no answer to carry the failure

    async def relay(self, message: dict[str, Any]) -> None:
        message_id = message["id"]
        headers = routing_headers(message, handshake_version=self.handshake_version)
        try:
            async with self.http.stream(
                "POST", self.endpoint, content=json.dumps(message).encode(), headers=headers
            ) as response:
                content_type = response.headers.get("content-type", "")
                if content_type.startswith("text/event-stream"):
                    async for event in sse_messages(response):
                        await self.write(event)
                    return
                body = await response.aread()
                if response.status_code >= 400 and not content_type.startswith("application/json"):
                    await self.write(refusal(message_id, response.status_code, body))
                    return
                answer = json.loads(body) if body else None
        except asyncio.CancelledError:
            raise
        except (httpx.HTTPError, ValueError) as exc:
            await self.write(error(message_id, -32603, f"pollerdash could not be reached: {type(exc).__name__}"))
            return
        if not isinstance(answer, dict):
            await self.write(error(message_id, -32603, "pollerdash sent no JSON-RPC answer"))
            return
        if message.get("method") == "initialize" and isinstance(answer.get("result"), dict):
            version = answer["result"].get("protocolVersion")
            self.handshake_version = version if isinstance(version, str) else None
        await self.write(answer)


async def run(*, url: str, token: str) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    lock = asyncio.Lock()

    async def write(message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with lock:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    bridge = Bridge(endpoint=url.rstrip("/") + "/mcp", token=token, write=write)
    try:
        while True:
            try:
                line = await reader.readline()
            except ValueError:
                await write(error(None, -32600, "Message too long"))
                continue
            if not line:
                break
            await bridge.handle_line(line)
        # stdin closed: let answers already on their way reach the host.
        await asyncio.gather(*bridge.in_flight.values(), return_exceptions=True)
    finally:
        await bridge.close()


def main() -> None:
    url = os.environ.get(URL_ENV, "").strip()
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not url.startswith(("https://", "http://")) or not token:
        sys.stderr.write(f"pollerdash-mcp: set {URL_ENV} (https://…) and {TOKEN_ENV} (pdt_…); nothing else is read\n")
        raise SystemExit(2)
    try:
        asyncio.run(run(url=url, token=token))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
