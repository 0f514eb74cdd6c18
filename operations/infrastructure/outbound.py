"""Every HTTP request pollerdash sends goes through `send`: the one module that imports httpx
(tests/test_architecture.py fails on any other, the agent's own client aside).

A request names its purpose, and the purpose sets its rules:

    purpose       address rule (returns a Target)          timeouts                   answer read
    provider      provider_targets.check_destination       POLL_HTTP_*, whole 30 s    POLL_BODY_CAP_BYTES, else error
    callback      callbacks.targets.resolve_target         CALLBACK_TIMEOUT_S         none: the status says it all
    oncall        escalations.oncall.channels.base.admit   connect 3 s, read 5 s      64 KiB, cut there
    slack_lookup  the same (users.info, views.open: a click waits) connect 1 s, read 2 s  64 KiB, cut there
    oidc          accounts.discovery.admit                 OIDC_TIMEOUT               256 KiB, else error

Whatever the purpose: redirects are never followed (a 3xx is an answer); `Accept-Encoding:
identity` is asked and no decoder ever runs on an answer (httpx inflates each network chunk whole
before any cap sees it: 64 KiB of gzip became 64 MiB), so a compressed answer is refused unread
(an error for the provider and the identity provider, its status alone for the others); no proxy
is taken from the environment, except for the identity provider (as before: a company's IdP may
be reachable through its proxy only); and a failure is one word of TRANSPORT_ERRORS and the
exception's type, never the exception's text, which can quote the request (an illegal header value
put a key on a card once) or the URL (a chat's webhook URL is a secret). The operator's
log gets that text scrubbed (operations.infrastructure.redaction).

One keep-alive client per purpose and process (made after fork, so django-q2 workers never share
a socket). The whole-request limit is enforced inside the network layer: every connect, read and
write gets at most the time left before the request's deadline, so a peer that trickles its
headers or its body a byte at a time is cut off, not kept alive by a per-read timeout.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import httpcore
import httpx
from django.conf import settings

from operations.cards.words import NOT_SENT_DESTINATION
from operations.infrastructure.redaction import redact

logger = logging.getLogger(__name__)


class Purpose(StrEnum):
    PROVIDER = "provider"  # a job's status or cancel request
    CALLBACK = "callback"  # an agent's completion callback (Standard Webhooks)
    ONCALL = "oncall"  # a pager, a chat, a webhook (escalations/oncall/channels/)
    SLACK_LOOKUP = "slack_lookup"  # Slack's users.info and views.open while a click waits for its answer
    OIDC = "oidc"  # the identity provider: discovery, keys, tokens, userinfo


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where one request goes, as its purpose's address rule admitted it: the URL to connect to
    (a name resolved now may be pinned to the checked address), with the Host header and TLS name
    that keep the original name. Built by the address rules of the table above."""

    purpose: Purpose
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    extensions: Mapping[str, object] = field(default_factory=dict)


class Refused(Exception):
    """An address rule refused a URL: nothing is sent. `why` never quotes a URL that may be a secret."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class Answer:
    """What came back from one request, or the transport error that stood in for it."""

    http_status: int | None = None
    headers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    body: bytes | None = None
    body_bytes: int = 0
    body_digest: str = ""
    transport_error: str | None = None  # a word of TRANSPORT_ERRORS
    transport_detail: str = ""  # its fixed words, and the exception's type
    error_type: str = ""  # the exception's type name ("ReadTimeout")

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[0] if values else None


INVALID_CREDENTIAL = "invalid_credential"
DESTINATION_NOT_ALLOWED = "destination_not_allowed"
# Every transport error a request can end in, with the only text stored about it (a provider's
# status check or cancel records these on the operation and in the audit chain).
TRANSPORT_ERRORS = {
    "timeout": "no complete answer within the time limits",
    "connect_timeout": "no connection within the connect time limit",
    "dns_error": "the provider's host name did not resolve",
    "connect_error": "the connection was refused or could not be made",
    "tls_error": "the TLS handshake or certificate check failed",
    "network_error": "the connection broke during the exchange",
    "protocol_error": "the answer was not valid HTTP",
    "invalid_request": "the request could not be built",
    "body_too_large": "the body is over the size cap",
    INVALID_CREDENTIAL: "the credential cannot be sent",
    DESTINATION_NOT_ALLOWED: NOT_SENT_DESTINATION,
}
ENCODED = "Content-Encoding not requested"


@dataclass(frozen=True)
class Rules:
    connect_s: float
    read_s: float
    total_s: float | None  # the whole request, None: per step only
    cap: int  # bytes of the answer read; 0: none
    over_cap_is_error: bool  # else the answer is cut at the cap
    compressed_is_error: bool  # else its status is kept and nothing of it read
    user_agent: str
    accept: str = "*/*"
    digest: bool = False  # the body's SHA-256 (a provider's check records it)


PROVIDER_AGENT = "pollerdash/0.1 (+status poller)"
JSON = "application/json"
# On-call's receivers: a pager or chat that never answers frees the worker after the read timeout,
# well inside django-q2's task timeout.
ONCALL_CONNECT_TIMEOUT_S = 3.0
ONCALL_READ_TIMEOUT_S = 5.0


def rules(purpose: Purpose) -> Rules:
    """The purpose's rules, read from the settings now."""
    if purpose is Purpose.PROVIDER:
        limits = (
            settings.POLL_HTTP_CONNECT_TIMEOUT_S,
            settings.POLL_HTTP_READ_TIMEOUT_S,
            settings.POLL_HTTP_TOTAL_TIMEOUT_S,
        )
        return Rules(*limits, settings.POLL_BODY_CAP_BYTES, True, True, PROVIDER_AGENT, JSON, digest=True)
    if purpose is Purpose.CALLBACK:
        timeout = settings.CALLBACK_TIMEOUT_S
        return Rules(timeout, timeout, None, 0, False, False, "pollerdash-webhooks/1")
    if purpose is Purpose.OIDC:
        connect_s, read_s = settings.OIDC_TIMEOUT
        return Rules(connect_s, read_s, None, 256 * 1024, True, True, "pollerdash-oidc/1", JSON)
    if purpose is Purpose.SLACK_LOOKUP:
        return Rules(1.0, 2.0, None, 64 * 1024, False, False, "pollerdash-notify/1")
    return Rules(ONCALL_CONNECT_TIMEOUT_S, ONCALL_READ_TIMEOUT_S, None, 64 * 1024, False, False, "pollerdash-notify/1")


def send(
    *,
    target: Target,
    method: str,
    content: bytes | None = None,
    form: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Answer:
    """Send one request under its purpose's rules and read what they allow of the answer."""
    purpose = target.purpose
    rule = rules(purpose)
    sent = {
        "User-Agent": rule.user_agent,
        "Accept": rule.accept,
        **target.headers,
        **(headers or {}),
        "Accept-Encoding": "identity",
    }
    timeout = httpx.Timeout(connect=rule.connect_s, read=rule.read_s, write=rule.read_s, pool=rule.connect_s)
    _request_deadline.at = None if rule.total_s is None else time.monotonic() + rule.total_s
    status: int | None = None
    answer_headers: dict[str, tuple[str, ...]] = {}
    try:
        with _client(purpose).stream(
            method,
            target.url,
            content=content,
            data=form,
            headers=sent,
            extensions=dict(target.extensions),
            timeout=timeout,
        ) as response:
            status = response.status_code
            for name in {key.lower() for key in response.headers.keys()}:
                answer_headers[name] = tuple(response.headers.get_list(name))
            if _encoded(answer_headers.get("content-encoding", ())):
                if rule.compressed_is_error:
                    detail = f"{TRANSPORT_ERRORS['protocol_error']} ({ENCODED})"
                    return _failure(status, answer_headers, "protocol_error", detail, "")
                return Answer(http_status=status, headers=answer_headers, body=b"")
            return _read(response, status=status, headers=answer_headers, rule=rule)
    except httpx.TimeoutException as exc:
        if _request_deadline.at is not None and time.monotonic() >= _request_deadline.at:
            return _failure(status, answer_headers, "timeout", f"whole request over {rule.total_s:g} s", _name(exc))
        kind = "connect_timeout" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
        return _failure(status, answer_headers, kind, f"{TRANSPORT_ERRORS[kind]} ({_name(exc)})", _name(exc))
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
        kind = transport_error_kind(exc)
        # The exception's own text is for the operator's log only, scrubbed and cut.
        logger.info("%s request failed: %s (%s: %s)", purpose, kind, _name(exc), redact(str(exc))[:300])
        return _failure(status, answer_headers, kind, f"{TRANSPORT_ERRORS[kind]} ({_name(exc)})", _name(exc))
    finally:
        _request_deadline.at = None


def _read(response: httpx.Response, *, status: int, headers: dict[str, tuple[str, ...]], rule: Rules) -> Answer:
    if rule.cap <= 0:
        return Answer(http_status=status, headers=headers, body=b"")
    digest = hashlib.sha256() if rule.digest else None
    chunks: list[bytes] = []
    size = 0
    # Raw: the bytes as they came, so the cap counts what is held in memory.
    for chunk in response.iter_raw():
        size += len(chunk)
        if size > rule.cap:
            if rule.over_cap_is_error:
                return Answer(
                    http_status=status,
                    headers=headers,
                    body_bytes=size,
                    transport_error="body_too_large",
                    transport_detail=f"body over the {rule.cap} byte cap",
                )
            chunks.append(chunk[: len(chunk) - (size - rule.cap)])
            size = rule.cap
            break
        if digest is not None:
            digest.update(chunk)
        chunks.append(chunk)
    return Answer(
        http_status=status,
        headers=headers,
        body=b"".join(chunks),
        body_bytes=size,
        body_digest=digest.hexdigest() if digest is not None else "",
    )


def _encoded(values: tuple[str, ...]) -> bool:
    """Whether a Content-Encoding field names any coding but identity (one field may list several)."""
    return any(token.strip().lower() not in ("", "identity") for value in values for token in value.split(","))


def _name(exc: BaseException) -> str:
    return type(exc).__name__


def _failure(status: int | None, headers: dict[str, tuple[str, ...]], kind: str, detail: str, name: str) -> Answer:
    return Answer(http_status=status, headers=headers, transport_error=kind, transport_detail=detail, error_type=name)


def transport_error_kind(exc: BaseException) -> str:
    """The TRANSPORT_ERRORS word for an exception raised while sending, judged by its type only."""
    causes: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and len(causes) < 10:
        causes.append(cause)
        cause = cause.__cause__ or cause.__context__
    if any(isinstance(c, ssl.SSLError | ssl.CertificateError) for c in causes):
        return "tls_error"
    if isinstance(exc, httpx.ConnectError):
        return "dns_error" if any(isinstance(c, socket.gaierror) for c in causes) else "connect_error"
    if isinstance(exc, httpx.NetworkError):
        return "network_error"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.DecodingError):
        return "protocol_error"
    return "invalid_request"


# --- the clients ---------------------------------------------------------------------------------------

_clients: dict[Purpose, httpx.Client] = {}
_clients_pid: int | None = None
_clients_lock = threading.Lock()
_request_deadline = threading.local()


def _client(purpose: Purpose) -> httpx.Client:
    global _clients_pid
    with _clients_lock:
        if _clients_pid != os.getpid():
            _clients.clear()
            _clients_pid = os.getpid()
        client = _clients.get(purpose)
        if client is None:
            client = _clients[purpose] = _new_client(purpose)
        return client


def _new_client(purpose: Purpose) -> httpx.Client:
    if purpose is Purpose.OIDC:
        # An identity provider may be reachable through the company's proxy only, and its CA may be
        # the environment's (SSL_CERT_FILE): the environment counts here, as it did before. No
        # request to it has a whole-request limit, so it needs no transport of ours.
        return httpx.Client(follow_redirects=False, trust_env=True)
    return httpx.Client(
        transport=_transport(httpx.Limits(max_connections=50, max_keepalive_connections=20)),
        follow_redirects=False,
        # Never a proxy picked up from the environment (a transport given here excludes them too).
        trust_env=False,
    )


def _time_left(timeout: float | None, error: type[Exception]) -> float | None:
    """This I/O step's timeout, shortened to what is left of the current request's deadline."""
    deadline = getattr(_request_deadline, "at", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the whole-request time limit was reached")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: object, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(
            # Typing: httpcore hands our stream the SSL context it was given.
            self._inner.start_tls(ssl_context, server_hostname, _time_left(timeout, httpcore.ConnectTimeout))  # type: ignore[arg-type]
        )

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.SyncBackend):
    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: object = None,
    ) -> httpcore.NetworkStream:
        inner = super().connect_tcp(
            # Typing: httpcore hands our backend the socket options it was given.
            host,
            port,
            _time_left(timeout, httpcore.ConnectTimeout),
            local_address,
            # Typing: httpcore hands our backend the socket options it was given, untyped here.
            socket_options,  # type: ignore[arg-type]
        )
        return _DeadlineStream(inner)


def _transport(limits: httpx.Limits) -> httpx.HTTPTransport:
    transport = httpx.HTTPTransport(limits=limits, trust_env=False)
    # httpx offers no public way to choose httpcore's network backend: rebuild its connection pool
    # with the same settings and ours (httpx and httpcore are pinned in pyproject.toml).
    transport._pool = httpcore.ConnectionPool(
        ssl_context=transport._pool._ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_DeadlineBackend(),
    )
    return transport
