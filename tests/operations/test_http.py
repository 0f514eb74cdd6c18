"""The provider client against a real local HTTP server: what it asks for and what it reads."""

from __future__ import annotations

import gzip
import threading
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from operations.providers import http

# 64 MiB of zeros compress to about 64 KiB: each network chunk of it inflates a thousandfold.
BOMB = gzip.compress(bytes(64 * 1024 * 1024), compresslevel=9)
PLAIN = b'{"state": "running"}'


class Provider:
    """Answers 200 with a fixed body and Content-Encoding per path (a redirect for /redirect);
    remembers what was asked (a proxy's absolute URL too)."""

    ANSWERS = {
        "/gzip": (BOMB, "gzip"),
        "/gzip-gzip": (gzip.compress(BOMB, compresslevel=9), "gzip, gzip"),
        "/plain": (PLAIN, None),
        "/identity": (PLAIN, "identity"),
        "/big": (b"x" * (300 * 1024), None),
    }

    def __init__(self) -> None:
        provider = self
        self.accept_encodings: list[str | None] = []
        self.requests: list[tuple[str, dict[str, str]]] = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                provider.accept_encodings.append(self.headers.get("Accept-Encoding"))
                provider.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = urlsplit(self.path).path
                if path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", "/plain")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body, encoding = provider.ANSWERS[path]
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading, as it should

            do_GET = do_POST = _answer  # http.server's naming

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider() -> Iterator[Provider]:
    server = Provider()
    yield server
    server.stop()


@pytest.mark.parametrize("path", ["/gzip", "/gzip-gzip"])
def test_a_compressed_body_is_never_inflated(provider, path):
    # Inflated inside httpx, one 64 KiB chunk became 64 MiB (and "gzip, gzip" gigabytes) before
    # the 1 MiB cap was looked at: a MemoryError, which is no httpx error, escaped send().
    tracemalloc.start()
    try:
        raw = http.send(method="GET", url=f"{provider.url}{path}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024
    assert raw.transport_error == "protocol_error" and raw.http_status == 200 and raw.body is None
    assert raw.transport_detail == f"{http.TRANSPORT_ERRORS['protocol_error']} (Content-Encoding not requested)"


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_status_and_cancel_requests_ask_for_an_unencoded_body(provider, method):
    raw = http.send(method=method, url=f"{provider.url}/plain")
    assert raw.transport_error is None and raw.body == PLAIN
    assert provider.accept_encodings == ["identity"]


def test_an_identity_content_encoding_is_read_as_it_is(provider):
    raw = http.send(method="GET", url=f"{provider.url}/identity")
    assert raw.transport_error is None and raw.body == PLAIN and raw.body_bytes == len(PLAIN)
