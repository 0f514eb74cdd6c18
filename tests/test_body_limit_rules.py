"""The body caps' rules on the ASGI layer itself (pollerdash/body_limits.py); tests/integration/
test_body_limits.py runs them in a real uvicorn process with a 200 MiB body."""

from __future__ import annotations

import asyncio
import json

from django.conf import settings

from pollerdash.body_limits import cap_for, declared_length, with_body_limits

CAPS = {"/api/": 64, "/slack/": 64, "/mcp": 64, "/api/v1/big/": 256}


def test_the_settings_cap_machine_endpoints_at_64_kib_and_pages_at_1_mib() -> None:
    for path in ("/api/v1/operations", "/slack/interactions", "/pagerduty/webhooks", "/mcp", "/mcp/session"):
        assert cap_for(path, caps=settings.REQUEST_BODY_PATH_CAPS, default=settings.REQUEST_BODY_MAX_BYTES)[1] == 65536
    for path in ("/accounts/login/", "/admin/operations/escalationpolicy/add/", "/cards/1/decide/", "/apifoo"):
        assert cap_for(path, caps=settings.REQUEST_BODY_PATH_CAPS, default=settings.REQUEST_BODY_MAX_BYTES) == (
            "",
            1024 * 1024,
        )


def test_the_longest_prefix_decides() -> None:
    assert cap_for("/api/v1/big/x", caps=CAPS, default=1000) == ("/api/v1/big/", 256)
    assert cap_for("/api/v1/small", caps=CAPS, default=1000) == ("/api/", 64)


def test_only_one_whole_content_length_is_believed() -> None:
    def scope(*values: bytes) -> dict:
        return {"headers": [(b"content-length", value) for value in values]}

    assert declared_length(scope(b"12")) == 12
    assert declared_length(scope()) is None
    assert declared_length(scope(b"12", b"13")) is None  # counted as it arrives instead
    assert declared_length(scope(b"-1")) is None
    assert declared_length(scope(b"1e9")) is None


class App:
    """Reads the whole body, as Django does, then answers 200 with its length."""

    def __init__(self) -> None:
        self.called = False
        self.disconnected = False

    async def __call__(self, scope: dict, receive: object, send: object) -> None:
        self.called = True
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(len(body)).encode()})


def run(path: str, chunks: list[bytes], *, content_length: int | None = None) -> tuple[App, list[dict], int]:
    """Serve one request; returns the app, what was sent to the client, and how many chunks were read."""
    app = App()
    guarded = with_body_limits(app, caps=CAPS, default=1000)
    sent: list[dict] = []
    read = 0

    async def receive() -> dict:
        nonlocal read
        read += 1
        if read > len(chunks):
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": chunks[read - 1], "more_body": read < len(chunks)}

    async def send(message: dict) -> None:
        sent.append(message)

    headers = [] if content_length is None else [(b"content-length", str(content_length).encode())]
    asyncio.run(guarded({"type": "http", "path": path, "headers": headers}, receive, send))
    return app, sent, read


def test_a_declared_length_over_the_cap_is_answered_without_reading_or_calling_the_app() -> None:
    app, sent, read = run("/api/v1/operations", [b"x" * 65], content_length=65)
    assert (sent[0]["status"], read, app.called) == (413, 0, False)
    assert (b"connection", b"close") in sent[0]["headers"]
    problem = json.loads(sent[1]["body"])
    assert (
        problem["code"] == "body_too_large" and problem["detail"] == "Request bodies to /api/ are limited to 64 bytes."
    )


def test_a_body_exactly_at_the_cap_goes_through_declared_or_chunked() -> None:
    assert run("/slack/interactions", [b"x" * 64], content_length=64)[1][1]["body"] == b"64"
    assert run("/slack/interactions", [b"x" * 32, b"x" * 32, b""])[1][1]["body"] == b"64"


def test_a_chunked_body_stops_being_read_at_the_first_byte_over_the_cap() -> None:
    app, sent, read = run("/mcp", [b"x" * 40, b"x" * 40, *([b"x" * 40] * 1000)])
    assert read == 2  # the chunk that crossed the cap, no more
    assert sent[0]["status"] == 413 and len(sent) == 2  # the app answered nothing after it
    assert app.disconnected  # Django drops the request as if the client had gone away


def test_pages_get_the_default_cap() -> None:
    assert run("/accounts/login/", [b"x" * 1000], content_length=1000)[1][1]["body"] == b"1000"
    assert run("/accounts/login/", [b"x" * 1001], content_length=1001)[1][0]["status"] == 413


class EarlyApp:
    """Answers at once, before reading the body (as /mcp's refusals do)."""

    async def __call__(self, scope: dict, receive: object, send: object) -> None:
        await send({"type": "http.response.start", "status": 401, "headers": [(b"connection", b"keep-alive")]})
        await send({"type": "http.response.body", "body": b"no"})


def serve(app: object, scope_headers: list, messages: list[dict]) -> list[dict]:
    sent: list[dict] = []
    pending = list(messages)

    async def receive() -> dict:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    guarded = with_body_limits(app, caps=CAPS, default=1000)
    asyncio.run(guarded({"type": "http", "method": "POST", "path": "/mcp", "headers": scope_headers}, receive, send))
    return sent


def test_an_answer_before_the_body_was_read_closes_the_connection() -> None:
    body = [{"type": "http.request", "body": b"x" * 10, "more_body": False}]
    for headers in ([(b"content-length", b"10")], [(b"transfer-encoding", b"chunked")]):
        start = serve(EarlyApp(), headers, body)[0]
        assert [value for name, value in start["headers"] if name == b"connection"] == [b"close"]
    # Without a body there is nothing left unread: the connection may stay.
    start = serve(EarlyApp(), [(b"content-length", b"0")], [])[0]
    assert (b"connection", b"close") not in start["headers"]


def test_an_answer_after_the_whole_body_keeps_the_connection() -> None:
    sent = serve(App(), [(b"content-length", b"10")], [{"type": "http.request", "body": b"x" * 10}])
    assert sent[0]["status"] == 200 and (b"connection", b"close") not in sent[0]["headers"]


def test_a_client_gone_mid_body_is_one_line(caplog) -> None:
    app = App()
    chunk = {"type": "http.request", "body": b"x" * 10, "more_body": True}
    with caplog.at_level("INFO", logger="pollerdash.requests"):
        sent = serve(app, [(b"content-length", b"50")], [chunk])
    assert sent == [] and app.disconnected
    assert [r.getMessage() for r in caplog.records] == ["client went away mid-body: POST /mcp after 10 bytes"]
