"""Transport errors are recorded as a fixed vocabulary, never as exception text (issue 16, finding 4).

httpx's messages can quote the request: a LocalProtocolError quoted an illegal header value, and
`str(exc)[:120]` put most of a private key on a card and into the audit chain.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl

import httpx
import pytest

from operations.infrastructure import outbound
from operations.infrastructure.redaction import register_secret
from operations.providers import http
from operations.providers.targets import check_destination
from tests.support import CANARY, has_canary, job_id


def detail_of(kind: str, exc_type: str) -> str:
    return f"{http.TRANSPORT_ERRORS[kind]} ({exc_type})"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_refused_connection_is_connect_error():
    raw = http.send(method="GET", url=f"http://127.0.0.1:{closed_port()}/v1/jobs/x")
    assert (raw.transport_error, raw.transport_detail) == ("connect_error", detail_of("connect_error", "ConnectError"))


def test_a_tls_handshake_with_a_plain_http_server_is_tls_error(fake_provider):
    raw = http.send(method="GET", url=f"https://127.0.0.1:{fake_provider.port}/v1/jobs/x")
    assert raw.transport_error == "tls_error" and raw.transport_detail.startswith(http.TRANSPORT_ERRORS["tls_error"])


def test_a_connection_closed_without_an_answer_is_protocol_error(fake_provider):
    url = f"{fake_provider.base_url}/v1/jobs/{job_id('flaky_5xx', pattern='drop')}"
    raw = http.send(method="GET", url=url)
    assert raw.transport_error == "protocol_error"
    assert raw.transport_detail == detail_of("protocol_error", "RemoteProtocolError")


@pytest.mark.parametrize(
    ("cause", "kind"),
    [
        (socket.gaierror(-2, "Name or service not known"), "dns_error"),
        (ssl.SSLCertVerificationError(1, "certificate verify failed"), "tls_error"),
        (ConnectionRefusedError(111, "Connection refused"), "connect_error"),
    ],
)
def test_connect_errors_are_told_apart_by_their_cause(cause, kind):
    try:
        try:
            raise cause
        except OSError as inner:
            raise httpx.ConnectError(str(inner)) from inner
    except httpx.ConnectError as exc:
        assert outbound.transport_error_kind(exc) == kind


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (httpx.ReadError("connection reset"), "network_error"),
        (httpx.RemoteProtocolError("illegal status line"), "protocol_error"),
        (httpx.LocalProtocolError("Illegal header value"), "invalid_request"),
        (httpx.UnsupportedProtocol("Request URL has an unsupported protocol"), "invalid_request"),
    ],
)
def test_other_transport_errors_map_to_their_word(exc, kind):
    assert outbound.transport_error_kind(exc) == kind


def test_an_exception_quoting_a_secret_leaves_no_trace_in_the_result_or_the_log(monkeypatch, caplog):
    """A transport that quotes the request in its error, as httpx does for an illegal header."""
    register_secret(CANARY)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.LocalProtocolError(f"Illegal header value b'Bearer {CANARY}\\n'")

    monkeypatch.setitem(
        outbound._clients, outbound.Purpose.PROVIDER, httpx.Client(transport=httpx.MockTransport(refuse))
    )
    monkeypatch.setattr(outbound, "_clients_pid", os.getpid())
    with caplog.at_level(logging.INFO, logger="operations.infrastructure.outbound"):
        raw = http.send(method="GET", url="http://provider.test/v1/jobs/x")

    assert (raw.transport_error, raw.transport_detail) == (
        "invalid_request",
        detail_of("invalid_request", "LocalProtocolError"),
    )
    # The operator's log keeps the exception's text, scrubbed.
    [record] = [r for r in caplog.records if r.name == "operations.infrastructure.outbound"]
    assert "Illegal header value" in record.getMessage() and "[redacted]" in record.getMessage()
    assert not has_canary(record.getMessage())


@pytest.mark.parametrize(
    "value",
    ["line one\nline two", "trailing-del\x7f", "ünïcode-token-value", " padded", "a\r\nInjected: header"],
)
def test_a_credential_that_is_not_a_legal_header_value_is_refused_without_quoting_it(value, monkeypatch, fake_provider):
    monkeypatch.setenv("PROVIDER_ODD_TOKEN", value)
    before = len(fake_provider.requests())
    destination = check_destination(
        credential_env="PROVIDER_ODD_TOKEN", url=f"{fake_provider.base_url}/v1/jobs/{job_id('slow_success')}"
    )
    raw = http.send_to_provider(method="GET", destination=destination, auth_scheme="Bearer")
    assert raw.transport_error == "invalid_credential"
    assert raw.transport_detail == "the credential in PROVIDER_ODD_TOKEN is not a valid header value"
    assert len(fake_provider.requests()) == before


def test_a_credential_with_inner_spaces_is_a_legal_header_value(monkeypatch):
    monkeypatch.setenv("PROVIDER_SPACED_TOKEN", "key id=42 sig=abc")
    assert http.credential_headers(credential_env="PROVIDER_SPACED_TOKEN", auth_scheme="Signature") == {
        "Authorization": "Signature key id=42 sig=abc"
    }
