"""Every request pollerdash sends goes through operations.outbound, against real local servers: whatever
its purpose, a redirect is an answer (never followed), `identity` is asked and a compressed answer
never inflated, the answer is read up to the purpose's cap, and no proxy is taken from the
environment except for the identity provider (whose proxy was honoured before, and still is)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from operations import outbound
from operations.outbound import Purpose

BIG = b"x" * (300 * 1024)


class Server:
    """Answers per path; remembers each request line and its headers."""

    def __init__(self) -> None:
        server = self
        self.seen: list[tuple[str, dict[str, str]]] = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                path = self.path.rsplit("/", 1)[-1] if "://" in self.path else self.path.lstrip("/")
                headers: dict[str, str] = {}
                status, body = 200, b'{"ok": true}'
                if path == "redirect":
                    status, body, headers = 302, b"", {"Location": "/landed"}
                elif path == "big":
                    body = BIG
                elif path == "gzip":
                    body, headers = gzip.compress(BIG), {"Content-Encoding": "gzip"}
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading, as it should

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def paths(self) -> list[str]:
        return [path for path, _ in self.seen]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.stop()


def send(server: Server, path: str, purpose: Purpose) -> outbound.Answer:
    return outbound.send(target=outbound.Target(purpose=purpose, url=f"{server.url}{path}"), method="GET")


@pytest.mark.parametrize("purpose", list(Purpose))
def test_a_redirect_is_an_answer_never_followed_and_identity_is_always_asked(server, purpose):
    answer = send(server, "/redirect", purpose)
    assert answer.http_status == 302 and server.paths() == ["/redirect"]
    assert server.seen[0][1]["accept-encoding"] == "identity"


@pytest.mark.parametrize("purpose", list(Purpose))
def test_a_compressed_answer_is_never_inflated(server, purpose):
    answer = send(server, "/gzip", purpose)
    assert answer.http_status == 200 and not answer.body
    if purpose in (Purpose.PROVIDER, Purpose.OIDC):
        assert answer.transport_error == "protocol_error"  # refused unread: an error for these
    else:
        assert answer.transport_error is None  # its status alone counts for a pager or a callback


@pytest.mark.parametrize(
    ("purpose", "body_bytes", "error"),
    [
        (Purpose.PROVIDER, None, None),  # 300 KiB is within POLL_BODY_CAP_BYTES (1 MiB)
        (Purpose.ONCALL, 64 * 1024, None),  # cut at the cap: a pager's answer is a few words
        (Purpose.SLACK_LOOKUP, 64 * 1024, None),
        (Purpose.OIDC, None, "body_too_large"),  # over 256 KiB: refused
        (Purpose.CALLBACK, 0, None),  # nothing read: the status says it all
    ],
)
def test_each_purpose_reads_the_answer_up_to_its_own_cap(server, purpose, body_bytes, error):
    answer = send(server, "/big", purpose)
    assert answer.http_status == 200 and answer.transport_error == error
    expected = len(BIG) if body_bytes is None and error is None else body_bytes
    if error is None:
        assert len(answer.body or b"") == expected


def test_the_provider_cap_is_its_setting_and_over_it_an_error(server, settings):
    settings.POLL_BODY_CAP_BYTES = 100 * 1024
    answer = send(server, "/big", Purpose.PROVIDER)
    assert answer.transport_error == "body_too_large" and answer.body is None


def test_no_proxy_from_the_environment_but_for_the_identity_provider(server, monkeypatch):
    proxy = Server()
    try:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.setattr(outbound, "_clients", {})  # clients made now, with this environment
        for purpose in Purpose:
            assert send(server, "/plain", purpose).http_status == 200
        # Every purpose reached the server itself, the identity provider's request went through the proxy.
        assert len(server.paths()) == len(Purpose) - 1
        assert proxy.paths() == [f"{server.url}/plain"]
    finally:
        proxy.stop()


def test_each_purpose_says_who_is_asking(server):
    for purpose in Purpose:
        send(server, "/plain", purpose)
    agents = [headers["user-agent"] for _, headers in server.seen]
    assert agents == [
        "pollerdash/0.1 (+status poller)",
        "pollerdash-webhooks/1",
        "pollerdash-notify/1",
        "pollerdash-notify/1",
        "pollerdash-oidc/1",
    ]
