"""Early answers end the connection, and a client that goes away mid-body is one log line (review F4).

An answer sent before the request's body was read (the guard's 413, /mcp's refusals, the MCP SDK's
own) carries `Connection: close` and the server closes the connection: the unread body can never be
read as the next request on a kept-alive connection (request smuggling through a proxy that reuses
its upstream connection). A client that disconnects in the middle of its body is logged as one line,
never a traceback, and answered nothing (no 500)."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest

from operations.agents.identities import agent_token_issue
from tests.integration.support import Proc, Processes, start_web, wait_until

pytestmark = [pytest.mark.integration]


@pytest.fixture
def web(processes: Processes, tmp_path: Path) -> tuple[Proc, int]:
    proc, url = start_web(processes, ALLOWED_HOSTS="127.0.0.1", SECURE_COOKIES="0")
    return proc, int(url.rsplit(":", 1)[1])


def exchange(port: int, raw: bytes, *, wait_s: float = 5.0) -> tuple[bytes, bool]:
    """Send `raw` on one keep-alive connection; what came back, and whether the server closed it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=wait_s)
    sock.sendall(raw)
    received = bytearray()
    closed = False
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                closed = True
                break
            received.extend(chunk)
    except TimeoutError:
        pass  # still open when the deadline came: the server kept the connection alive
    finally:
        sock.close()
    return bytes(received), closed


def smuggling(path: str, port: int, *, headers: str = "") -> bytes:
    """A POST whose body is itself a whole request: a server that answered early and kept the
    connection would take it for the client's next request."""
    inner = f"GET /accounts/login/?smuggled=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\n{headers}Content-Length: {len(inner)}\r\n\r\n"
    )
    return head.encode() + inner


def statuses(answer: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]


@pytest.mark.parametrize(
    ("case", "path", "headers", "status"),
    [
        ("no token", "/mcp", "", 401),
        ("bad token", "/mcp", "Authorization: Bearer pdt_not-a-token\r\n", 401),
        ("a query string", "/mcp?token=x", "", 400),
        ("a foreign Origin", "/mcp", "Origin: https://evil.example\r\n", 403),
    ],
)
def test_mcp_answers_before_the_body_end_the_connection(web, case, path, headers, status) -> None:
    _proc, port = web
    answer, closed = exchange(port, smuggling(path, port, headers=headers))
    assert statuses(answer) == [status], answer[:400]
    assert b"connection: close" in answer.lower(), answer[:400]
    assert closed, f"{case}: the connection stayed open after an answer that left the body unread"


def test_the_mcp_sdks_own_refusal_comes_after_the_whole_body(web, transactional_db) -> None:
    _proc, port = web
    token = agent_token_issue(name="smuggler").token
    # An Accept the SDK refuses (406): /mcp read the body first, so the connection may stay and
    # the body is still never served as a request.
    raw = smuggling("/mcp", port, headers=f"Authorization: Bearer {token}\r\n").replace(
        b"Accept: application/json, text/event-stream\r\n", b"Accept: text/html\r\n"
    )
    answer, _closed = exchange(port, raw, wait_s=3)
    assert statuses(answer) == [406], answer[:400]
    assert b"smuggled" not in answer


def test_the_guards_413_ends_the_connection(web) -> None:
    _proc, port = web
    head = f"POST /api/v1/operations HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {10 * 1024 * 1024}\r\n\r\n"
    answer, closed = exchange(port, head.encode())
    assert statuses(answer) == [413] and b"connection: close" in answer.lower() and closed


def test_an_answer_after_the_whole_body_keeps_the_connection(web) -> None:
    _proc, port = web
    body = b'{"provider": "x"}'
    one = (
        f"POST /api/v1/operations HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    answer, _closed = exchange(port, one + one, wait_s=3)
    # Both requests answered on one connection (keep-alive still works where the body was read).
    assert statuses(answer) == [401, 401], answer[:600]


@pytest.mark.parametrize("path", ["/mcp", "/api/v1/operations", "/accounts/login/"])
def test_a_client_gone_mid_body_is_one_log_line_not_a_traceback(web, path, transactional_db) -> None:
    proc, port = web
    token = agent_token_issue(name="leaver").token
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\n"
        "Content-Length: 5000\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(head.encode() + b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"')
    sock.close()
    wait_until(lambda: "went away mid-body" in proc.log(), timeout=15, what="the one line about the client")
    log = proc.log()
    assert "Traceback" not in log, log[-3000:]
    assert "Error handling POST request" not in log and " 500" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if "went away mid-body" in line]
    assert len(lines) == 1 and path in lines[0], lines
