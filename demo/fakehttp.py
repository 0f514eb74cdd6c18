"""The small threaded HTTP server under the fake PagerDuty and Slack receivers.

The server of the fake provider (demo/fakeprovider.py) too, so all the fakes make the same choices:
- TCP_NODELAY on every connection (`disable_nagle_algorithm`): a response written in two sends
  would otherwise wait ~40 ms on a delayed ACK;
- no reverse DNS lookup at bind; daemon handler threads that stop() does not wait for;
- a receiver told to "hang" holds the connection until stop(), so a test proves the sender's
  timeout, not the fake's patience; stop() wakes every held or idle connection.
"""

from __future__ import annotations

import socket
import socketserver
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar

REQUEST_BODY_MAX = 1024 * 1024


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self.stop_event = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__((host, port), handler)
        self.host_port = f"{host}:{self.server_address[1]}"

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that can take seconds.
        socketserver.TCPServer.server_bind(self)
        # An AF_INET server's address is (host, port) with the host a str (the stubs allow bytes too).
        self.server_name, self.server_port = self.server_address[:2]  # type: ignore[assignment]

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # clients that time out and hang up are the point of some tests
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: FakeServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: test output stays readable."""

    def read_body(self, *, cap: int = REQUEST_BODY_MAX) -> bytes | None:
        """The request body, or None (and the connection closed) when it has no length or is too big."""
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding") or not length or not length.isdigit() or int(length) > cap:
            self.close_connection = True
            return None
        return self.rfile.read(int(length))

    def reply(self, status: int, body: bytes, *, content_type: str, headers: dict[str, str] | None = None) -> None:
        """One write: status line, headers and body in a single segment."""
        lines = [f"HTTP/1.1 {status} {self.responses.get(status, ('Unknown',))[0]}\r\n"]
        lines.append(f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n")
        lines.extend(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        if self.close_connection:
            lines.append("Connection: close\r\n")
        lines.append("\r\n")
        self.wfile.write("".join(lines).encode("latin-1") + body)

    def hang(self) -> None:
        """Never answer: hold the connection until the server stops."""
        self.server.stop_event.wait()
        self.close_connection = True

    def drop(self) -> None:
        """Close without answering."""
        self.close_connection = True


class FakeReceiver:
    """Start/stop plumbing shared by the fakes: ``with FakePagerDuty() as pd: ...``."""

    handler: type[FakeHandler]
    thread_name = "fake-receiver"

    def __init__(self) -> None:
        self._server: FakeServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str = "127.0.0.1", port: int = 0) -> FakeReceiver:
        if self._server is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        self._server = FakeServer(host, port, self.handler)
        # The handler reaches its receiver through the server object (not a field of HTTPServer).
        self._server.receiver = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name, daemon=True
        )
        self._thread.start()
        return self

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://{self._server.host_port}"

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._server = self._thread = None
        server.stop_event.set()
        server.shutdown()
        server.close_connections()
        server.server_close()
        thread.join(timeout=5)

    def __enter__(self) -> FakeReceiver:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


R = TypeVar("R")


@dataclass
class Script(Generic[R]):
    """What a scripted fake is told to answer next, and what it received, under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    steps: deque[str] = field(default_factory=deque)
    log: list[R] = field(default_factory=list)


class ScriptedReceiver(FakeReceiver, Generic[R]):
    """A fake answered by a script of steps ("202", "429:30", "hang"...), recording what it received."""

    def __init__(self) -> None:
        super().__init__()
        self.script: Script[R] = Script()

    def answer(self, *steps: str) -> None:
        """Queue how the next valid requests are answered (then the default again)."""
        with self.script.lock:
            self.script.steps.extend(steps)

    def received(self) -> list[R]:
        with self.script.lock:
            return list(self.script.log)

    def reset(self) -> None:
        with self.script.lock:
            self.script.steps.clear()
            self.script.log.clear()
