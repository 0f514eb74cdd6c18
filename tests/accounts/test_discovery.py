"""The identity provider's discovery document is read the way every answer pollerdash reads is:
uncompressed only (`Accept-Encoding: identity`, a compressed answer refused unread) and at most
256 KiB of it (accounts/discovery.py), so a hostile or broken provider cannot make a web process
inflate or hold an answer of any size."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from accounts import discovery

MiB = 1024 * 1024


class Provider:
    """A discovery endpoint on loopback whose answer each test chooses."""

    def __init__(self) -> None:
        self.mode = "plain"
        self.sent = 0
        self.asked_encoding = ""
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # http.server's name
                provider.asked_encoding = self.headers.get("Accept-Encoding", "")
                doc = json.dumps(provider.document()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if provider.mode == "gzip":
                    body = gzip.compress(doc)
                    self.send_header("Content-Encoding", "gzip")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                elif provider.mode == "endless":
                    # No Content-Length, and 64 MiB of whitespace before the document.
                    self.send_header("Connection", "close")
                    self.end_headers()
                    try:
                        for _ in range(64 * 16):
                            self.wfile.write(b" " * (64 * 1024))
                            provider.sent += 64 * 1024
                        self.wfile.write(doc)
                    except OSError:
                        pass  # the reader stopped reading
                else:
                    self.send_header("Content-Length", str(len(doc)))
                    self.end_headers()
                    self.wfile.write(doc)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}/o"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def document(self) -> dict:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize/",
            "token_endpoint": f"{self.issuer}/token/",
            "userinfo_endpoint": f"{self.issuer}/userinfo/",
            "jwks_uri": f"{self.issuer}/jwks/",
        }


@pytest.fixture
def provider(settings) -> Iterator[Provider]:
    running = Provider()
    settings.OIDC_OP_ISSUER = running.issuer
    discovery.forget()
    yield running
    running.server.shutdown()
    discovery.forget()


def test_the_document_is_asked_for_uncompressed_and_read(provider) -> None:
    assert discovery.document()["token_endpoint"] == f"{provider.issuer}/token/"
    assert provider.asked_encoding == "identity"


def test_a_compressed_answer_is_refused_unread(provider) -> None:
    provider.mode = "gzip"
    with pytest.raises(discovery.DiscoveryError, match="compressed"):
        discovery.document()


def test_an_endless_answer_is_read_only_up_to_the_cap(provider) -> None:
    provider.mode = "endless"
    with pytest.raises(discovery.DiscoveryError, match="larger than 262144 bytes"):
        discovery.document()
    # The reader stopped: what the provider got out is the cap plus socket buffers, not 64 MiB.
    assert provider.sent < 32 * MiB, provider.sent
